"""The answer to one question as a stream of parts (``crag.parts``): ``AnswerStream`` puts the steps of
``crag.pipeline`` in the order of Algorithm 1 and reports the stages, or takes another way for a question about whole
documents (``crag.overview``) and for one of several asks (``crag.asks``). What one question's run gathers (its model
usage, timings, notes, the model's words, grounding) is a ``Run``, handed to each step; an ask of a question of
several is answered with a ``Run`` of its own that shares the usage and timings. ``Pipeline`` holds what every
question shares.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Protocol, TypeVar

from pydantic_ai.usage import RunUsage

from crag import evidence, overview
from crag.analysis import Analysis
from crag.asks import asks, compared, one_ask
from crag.evaluator import Evaluator
from crag.followups import (
    READ_ON,
    History,
    elliptical,
    reading,
    stands_alone,
)
from crag.messages import language_hint, model_failure_message, near_miss_note, no_answer, remedy, what_is_missing
from crag.models import BackendInfo
from crag.overview import Overview
from crag.parts import Heading, Note, Part, Suggestions, after, plain, written
from crag.refine import keep_closest, number_sources
from crag.retriever import Retriever
from crag.scope import EVERYTHING, Scope
from crag.steps import Condensed, Evaluation, Knowledge, Options, WebKnowledge, decide_action
from crag.store import Mode, index_text
from crag.support import Grounder, Grounding, unsupported
from crag.tuning import TUNING
from crag.types import (
    Action,
    Answer,
    AnswerKind,
    Drop,
    Expansion,
    Method,
    ScoredChunk,
    Source,
    Strip,
    Suggestion,
    TermCheck,
    Trace,
    cited,
)
from crag.websearch import OFF_REASON

OnStep = Callable[[str], None]
R = TypeVar("R")


class Steps(Protocol):
    """What an answer asks of the pipeline (``crag.pipeline.Pipeline`` is one): the steps of Algorithm 1, and what
    the run is made with. Named here so that this module needs nothing of the pipeline but its shape."""

    backend: BackendInfo
    retriever: Retriever

    def answer_kind(self, mode: str | None = None) -> AnswerKind: ...
    def evaluator(self, choice: str) -> Evaluator: ...
    def documents(self, question: str, scope: Scope, history: History = ()) -> list[Overview]: ...
    def analyse(self, question: str, scope: Scope) -> Analysis: ...
    def reads(self, languages: dict[str, str]) -> bool: ...
    def suggest(self, question: str, scope: Scope, sources: Sequence[Source]) -> tuple[Suggestion, ...]: ...
    def read(self, question: str, scope: Scope, usage: RunUsage) -> tuple[Expansion, ...]: ...
    def condense(self, question: str, history: History, usage: RunUsage) -> Condensed: ...
    def retrieve(
        self,
        queries: Sequence[str],
        k: int,
        mode: Mode,
        analysis: Analysis,
        scope: Scope = EVERYTHING,
        expansion: Expansion | None = None,
    ) -> list[ScoredChunk]: ...
    def evaluate(
        self,
        question: str,
        analysis: Analysis,
        hits: Sequence[ScoredChunk],
        evaluator: Evaluator,
        upper: float,
        usage: RunUsage,
    ) -> Evaluation: ...
    def refine(
        self, question: str, graded: Sequence[ScoredChunk], lower: float, unsure: bool = False
    ) -> list[Strip]: ...
    def closest(self, question: str, graded: Sequence[ScoredChunk]) -> list[Strip]: ...
    def doc_query(self, question: str, graded: Sequence[ScoredChunk], usage: RunUsage, notes: list[str]) -> str: ...
    def search_web(self, question: str, suggested: str, usage: RunUsage, notes: list[str]) -> WebKnowledge: ...
    def generate(self, question: str, sources: Sequence[Source], usage: RunUsage) -> Iterator[str]: ...


# The CRAG run's one log, as the API has "crag.api": a failure the answer survives keeps its cause there.
log = logging.getLogger("crag.pipeline")


# The model's reading of a question, its asks each with the words to search by: () offline, None not read yet.
ModelWords = tuple[Expansion, ...] | None


@dataclass
class Run:
    """What one question's run gathers as its steps go: the model's usage, the stages' timings, the notes for the
    trace, the model's words each ask was searched with, what grounding did. Each step is handed it; an ask of a
    question of several has a run of its own (``for_ask``) that shares the usage and the timings."""

    on_step: OnStep
    usage: RunUsage = field(default_factory=RunUsage)
    timings: dict[str, float] = field(default_factory=dict)
    start: float = field(default_factory=time.perf_counter)
    notes: list[str] = field(default_factory=list)
    expansions: list[Expansion] = field(default_factory=list)
    grounding: Grounding = field(default_factory=Grounding)  # what holding a written answer to its sources did
    condensed: int = 0  # model calls made to understand a follow-up: not counted as calls before the answer
    before_answer: int | None = None  # model calls made before the (first) answer was written

    def for_ask(self) -> Run:
        return Run(self.on_step, self.usage, self.timings, self.start)

    @contextmanager
    def stage(self, stage: str, timing: str) -> Iterator[None]:
        """A stage of the run: reported (unless ``stage`` is ""), and its time added to ``timing``."""
        if stage:
            self.on_step(stage)
        started = time.perf_counter()
        try:
            yield
        finally:
            self.timings[timing] = round(self.timings.get(timing, 0.0) + time.perf_counter() - started, 3)

    def answering(self) -> None:
        """The answer starts to be written: the model calls made so far, but those that understood a follow-up, came
        before it. Only the first answer of a question of several asks counts."""
        if self.before_answer is None:
            self.before_answer = self.usage.requests - self.condensed

    def said(self) -> None:
        """The answer said its first part: the time to the first token."""
        self.timings.setdefault("first_token", round(time.perf_counter() - self.start, 3))


@dataclass(frozen=True)
class Made:
    """What writing an answer made: its kind, why the model failed ("" when it did not), its numbered sources."""

    kind: AnswerKind
    error: str
    sources: tuple[Source, ...]


@dataclass(frozen=True)
class Found:
    """What answering a question made: what the steps found, and what was written from it."""

    knowledge: Knowledge
    made: Made


def joined_asks(question: str, found: Sequence[Knowledge], every: bool = False) -> Knowledge:
    """What the asks of one question found, as one: every passage, grade and strip, their terms, and one action:
    theirs when they agree, else Ambiguous (part of the question is answered, part is not). ``every``: the question
    needs every ask answered (a comparison), so one the documents know nothing of makes it Incorrect."""
    actions = {k.action for k in found}
    action = actions.pop() if len(actions) == 1 else Action.AMBIGUOUS
    if every and Action.INCORRECT in {k.action for k in found}:
        action = Action.INCORRECT
    checks = [k.evaluation.terms for k in found]

    def joined(field: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t for c in checks for t in getattr(c, field)))

    terms = TermCheck(joined("terms"), joined("missing"), joined("unknown"), decisive=all(c.decisive for c in checks))
    graded = tuple(g for k in found for g in k.evaluation.graded)
    web = next((k.web for k in found if k.web.query or k.web.error), WebKnowledge())
    return Knowledge(
        question=question,
        evaluation=Evaluation(graded, terms),
        action=action,
        strips=tuple(s for k in found for s in k.strips),
        web=web,
    )


class AnswerStream:
    """Iterate to get the answer's parts as they are made (None while a sentence is held: whoever reads the stream
    can still stop it there); ``answer`` is set when it ends.

    An answer left before its end (``break``, the Stop button's exception, a client gone) ends the model's
    stream as the iterator is dropped; ``close()`` or ``with`` ends it at once for an iterator still held.
    ``answer`` stays None then. ``run``: an ask's stream answers with a run of its own (``Run.for_ask``)."""

    def __init__(
        self,
        pipeline: Steps,
        question: str,
        history: History,
        on_step: OnStep,
        options: Options,
        run: Run | None = None,
    ):
        self.p = pipeline
        self.question = question
        self.history = history
        self.options = options
        self.run = run or Run(on_step)
        self.answer: Answer | None = None
        self.parts: list[Part] = []
        self._comparison = False  # the asks are the sides of a comparison: each must be answered
        self._running: weakref.ref[Generator[Part | None, None, None]] | None = None  # weak: dropping it closes it

    @cached_property
    def analysis(self) -> Analysis:
        """The question as asked, analysed once: its language is judged without the files it names
        ("texlive-zh-cn.pdf 讲了什么" is Chinese), its terms weighed in the scope's documents."""
        return self.p.analyse(self.question, self.options.scope)

    @property
    def _language(self) -> str:
        return self.analysis.language

    def __enter__(self) -> AnswerStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the answer now if it is still being made: the model's stream is closed when this returns."""
        running = self._running() if self._running else None
        if running is not None:
            running.close()

    @property
    def finished(self) -> Answer:
        """The answer of a stream iterated to its end. Raises ``RuntimeError`` for one left before its end."""
        if self.answer is None:
            raise RuntimeError("the answer was left before its end")
        return self.answer

    @property
    def text(self) -> str:
        """The text made so far, complete or not."""
        return plain(self.parts)

    @property
    def written(self) -> str:
        """What the model wrote, as kept: its sentences without the quotes under them ("" for a quoted answer)."""
        return written(self.parts)

    @property
    def grounding(self) -> Grounding:
        return self.run.grounding

    def _emit(self, part: Part) -> Part:
        self.run.said()
        self.parts.append(part)
        return part

    def __iter__(self) -> Iterator[Part | None]:
        steps = self._steps()
        self._running = weakref.ref(steps)
        return steps

    def _steps(self) -> Generator[Part | None, None, None]:
        """Algorithm 1: each step is a method of its own; this only puts them in order and reports the stages. A
        question about whole documents is answered from the documents themselves instead (``crag.overview``), and a
        question of several asks ask by ask (``crag.asks``)."""
        run = self.run
        run.start = time.perf_counter()  # timings count from when the answer starts, not from when it was asked for
        documents = self.p.documents(self.question, self.options.scope, self.history)
        # The asks are asked without the conversation: only a question that stands alone is split.
        alone = not documents and (not self.history or stands_alone(self.question))
        words = self._read(self.question) if alone else None
        several = self._several(words) if alone else []
        if several:
            found = yield from self._relayed(self._asks(several))
        else:
            knowledge = self._about(documents) if documents else self._search(words)
            run.answering()
            with run.stage("generating", "generate"):
                made = yield from self._relayed(self._write(knowledge))
            found = Found(knowledge, made)
        run.said()
        run.timings["total"] = round(time.perf_counter() - run.start, 3)
        self.answer = self._answer(found)

    def _relayed(self, parts: Generator[Part | None, None, R]) -> Generator[Part | None, None, R]:
        """The parts a step makes, as this answer's own; returns what that step returned."""
        while True:
            try:
                part = next(parts)
            except StopIteration as done:
                return done.value
            yield self._emit(part) if part is not None else None

    def _write(self, knowledge: Knowledge, first: int = 1) -> Generator[Part | None, None, Made]:
        """The answer from what was found: quoted, or written by the model and held to its sources (quoted when
        nothing it wrote is backed). Sources are numbered from ``first``."""
        documents = knowledge.documents
        kind, chosen, sources = self._number_sources(knowledge, first=first)
        if documents and (kind is not AnswerKind.GENERATED or len(documents) > 1):
            # Quoted: what each document says it is, with its outline. A model summarises one document only.
            yield from overview.render(documents, sources, self._language)
            return Made(AnswerKind.EVIDENCE, "", tuple(sources))
        kind, error = yield from self._generate(knowledge, kind, chosen, sources)
        if kind is AnswerKind.GENERATED and not error and not self.run.grounding.grounded:
            # Nothing the model wrote is backed by its sources: their own words answer instead.
            self.run.notes.append("the model's answer said nothing its sources back: the sources are quoted instead")
            kind, chosen, sources = self._number_sources(knowledge, AnswerKind.EVIDENCE, first)
            if documents:
                yield from overview.render(documents, sources, self._language)
                return Made(AnswerKind.EVIDENCE, "", tuple(sources))
            kind, error = yield from self._generate(knowledge, kind, chosen, sources)
        return Made(kind, error, tuple(sources))

    def _read(self, question: str) -> tuple[Expansion, ...]:
        """The model's reading of the question (``Pipeline.read``); () offline, and for a question about a name the
        documents never mention (no words of the model's make them answer it)."""
        languages = self.p.retriever.file_languages(self.options.scope)
        model = self.options.use_model and self.p.reads(languages) and not self.analysis.beyond_documents
        with self.run.stage("reading the question" if model else "", "read"):
            return self.p.read(question, self.options.scope, self.run.usage) if model else ()

    def _several(self, words: ModelWords) -> list[tuple[str, str, ModelWords]]:
        """The asks of a question of several, each as (its heading, what is searched and answered for it, the model's
        words for it): the two sides of a comparison, or the asks of one question ("…, and how do I…?"), as the model
        read them (by rule without a model, or when it failed); [] for a question of one ask."""
        notes = self.run.notes
        if sides := compared(self.question):
            notes.append("a comparison: each side was searched, graded and answered on its own")
            self._comparison = True
            return [(side, ask, words) for side, ask in sides]
        if words and not words[0].error:
            if len(words) < 2:
                return []
            notes.append(
                f"a question of {len(words)} asks, as the model read it: each was searched, graded and answered "
                "on its own"
            )
            return [(e.ask, e.ask, (e,)) for e in words]
        several = asks(self.question)
        if len(several) < 2:
            return []
        notes.append(f"a question of {len(several)} asks: each was searched, graded and answered on its own")
        return [(ask, ask, () if words is not None else None) for ask in several]

    def _asks(self, several: Sequence[tuple[str, str, ModelWords]]) -> Generator[Part | None, None, Found]:
        """A question of several asks: each is searched, graded and answered on its own (a stream of its own, with a
        run of its own), under its own heading, its sources numbered after those of the asks before. One the
        documents do not answer says so."""
        run = self.run
        found: list[Knowledge] = []
        made: list[Made] = []
        invented: list[str] = []
        for n, (heading, ask, words) in enumerate(several, start=1):
            one = AnswerStream(self.p, ask, (), run.on_step, self.options, run.for_ask())
            found.append(one._search(words))
            run.expansions += one.run.expansions
            run.answering()
            yield Heading(text=heading, ask=n, gap="\n\n" if n > 1 else "")
            with run.stage("generating", "generate"):
                first = sum(len(m.sources) for m in made) + 1
                written = yield from _after_heading(one._write(found[-1], first))
            run.notes += [f"ask {n}: {note}" for note in one.run.notes]
            made.append(written)
            invented += one.run.grounding.invented
            if written.error:
                break
        run.grounding = Grounding(invented=invented)
        order = (AnswerKind.GENERATED, AnswerKind.EVIDENCE)  # written if any ask was, else quoted, else none
        kind = next((k for k in order if k in {m.kind for m in made}), AnswerKind.NO_ANSWER)
        sources = tuple(s for m in made for s in m.sources)
        knowledge = joined_asks(self.question, found, every=self._comparison)
        return Found(knowledge, Made(kind, made[-1].error, sources))

    def _about(self, documents: Sequence[Overview]) -> Knowledge:
        """A question about whole documents: their opening sentences are the knowledge, quoted as they are."""
        self.run.notes.append(
            "a question about the whole document: answered from what its opening pages say it is and its outline, "
            "not from the passages a search for the question's words finds"
        )
        shown = TUNING.overview.said_each if len(documents) > 1 else None  # several: a paragraph each, its best
        strips = tuple(s for d in documents for s in d.said[:shown])
        quoted = {s.chunk_id for s in strips}
        graded = tuple(
            ScoredChunk(chunk=c, score=1.0, method=Method.DOCUMENT)
            for d in documents
            for c in d.opening
            if c.id in quoted
        )
        evaluation = Evaluation(graded, TermCheck())
        return Knowledge(
            question=self.question,
            evaluation=evaluation,
            action=Action.CORRECT,
            strips=strips,
            web=WebKnowledge(),
            documents=tuple(documents),
        )

    def _search(self, words: ModelWords = None) -> Knowledge:
        """Algorithm 1 up to generation: condense, retrieve (with the model's words for the question, ``words``,
        made here for a follow-up once it is understood), evaluate, decide, correct, refine, search the web."""
        p, o = self.p, self.options
        condensing = RunUsage()  # its calls come before the answer, but are not counted as the answer's
        with self.run.stage("understanding the follow-up" if self.history else "", "condense"):
            condensed = p.condense(self.question, self.history, condensing)
        self.run.usage.incr(condensing)
        self.run.condensed += condensing.requests
        self.run.notes += condensed.notes
        if words is None:
            words = self._read(condensed.question)
        expansion = one_ask(condensed.question, words) if words else None
        if expansion is not None:
            self.run.expansions.append(expansion)
        with self.run.stage("retrieving", "retrieve"):
            hits = p.retrieve(condensed.queries, o.top_k, o.retrieval_mode, self.analysis, o.scope, expansion)
        if p.retriever.lexical_only:  # the index's embedder is missing: its dense half could not be searched
            self.run.notes.append(p.retriever.lexical_only)
        with self.run.stage("grading", "grade"):
            evaluator = p.evaluator(o.evaluator)
            evaluation = p.evaluate(
                condensed.question, self.analysis, hits, evaluator, o.upper_threshold, self.run.usage
            )
            action = self._decide_action(evaluation)
            question, evaluation, action = self._read_with_history(condensed, hits, evaluator, evaluation, action)
        # Only where the model was not asked for its words at first (model search off): not offline (no one waits for a
        # model there), nor without the model, nor for what the documents never mention (other words find it no more).
        again = o.use_model and p.backend.name != "embedded" and expansion is None
        if action is not Action.CORRECT and again and not evaluation.terms.decisive:
            with self.run.stage("rewriting the question", "rewrite"):
                hits, evaluation, action = self._retrieve_again(question, hits, evaluation, action, evaluator)
        if evaluation.terms.missing:
            self.run.notes.append(near_miss_note(evaluation.terms, [h.anchor for h in hits if h.anchor], o.scope.paths))
        strips: list[Strip] = []
        if action in (Action.CORRECT, Action.AMBIGUOUS):
            with self.run.stage("refining", "refine"):
                strips = p.refine(question, evaluation.graded, o.lower_threshold, unsure=action is Action.AMBIGUOUS)
            strips, action = self._fall_back(strips, action)
        # A model's grade is trusted; a similarity grade (also the LLM grader's fallback) is checked.
        if action is Action.CORRECT and not any(g.trusted for g in evaluation.graded):
            action = self._held_to_terms(strips)
        web = WebKnowledge(error=OFF_REASON) if action is not Action.CORRECT and not o.web else WebKnowledge()
        if action is not Action.CORRECT and o.web:
            with self.run.stage("searching the web", "web"):
                suggested = evaluation.web_query or (" ".join(expansion.keywords) if expansion else "")
                web = p.search_web(question, suggested, self.run.usage, self.run.notes)
        strips += web.strips
        if action is Action.INCORRECT and not any(s.kept for s in strips):
            # Never hide the closest evidence: the answer says what is missing, then what came closest.
            with self.run.stage("refining", "refine"):
                strips = p.closest(question, evaluation.graded) + strips
        if dropped := sum(1 for s in strips if s.drop is Drop.INJECTION):
            self.run.notes.append(
                f"{dropped} strip(s) looked like prompt injection and were dropped (see their reasons)"
            )
        return Knowledge(question=question, evaluation=evaluation, action=action, strips=tuple(strips), web=web)

    def _decide_action(self, evaluation: Evaluation) -> Action:
        o = self.options
        return decide_action([g.score for g in evaluation.graded], o.upper_threshold, o.lower_threshold)

    def _read_with_history(
        self, condensed: Condensed, hits: Sequence[ScoredChunk], evaluator: Evaluator, first: Evaluation, action: Action
    ) -> tuple[str, Evaluation, Action]:
        """The question to answer, its grades and its action. A follow-up not answered on its own, or going on
        from the question before ("And on Windows?" alone is Correct on any page that names Windows), is read
        with what it follows."""
        question, with_history, goes_on = condensed.question, condensed.with_history, elliptical(self.question)
        if with_history in ("", question) or (action is Action.CORRECT and not goes_on):
            return question, first, action
        o = self.options
        again = self.p.evaluate(with_history, self.analysis, hits, evaluator, o.upper_threshold, self.run.usage)
        if goes_on:  # graded on both: what it adds, and what it goes on from
            again = first.mean(again)
        graded = [(g.score, index_text(g.chunk)) for g in again.graded]
        if note := reading(self.question, first.best, action is Action.CORRECT, graded, o.lower_threshold):
            self.run.notes.append(note)
        if note == READ_ON:
            return with_history, again, self._decide_action(again)
        return question, first, action

    def _retrieve_again(
        self, question: str, hits: list[ScoredChunk], first: Evaluation, action: Action, evaluator: Evaluator
    ) -> tuple[list[ScoredChunk], Evaluation, Action]:
        """CRAG's correction inside the documents, before any web search: the model rewrites the question in the
        documents' words and retrieval runs again. The passages found are graded against the question itself, and
        the ranking whose best passage grades higher is kept, as Ambiguous at best."""
        p, o = self.p, self.options
        query = p.doc_query(question, first.graded, self.run.usage, self.run.notes)
        if not query:
            return hits, first, action
        found = p.retrieve([query], o.top_k, o.retrieval_mode, self.analysis, o.scope)
        again = p.evaluate(question, self.analysis, found, evaluator, o.upper_threshold, self.run.usage)
        if again.best <= first.best:
            self.run.notes.append(f"searched again as “{query}”: no passage graded better, the first ones are kept")
            return hits, first, action
        # Found through the model's words, not the user's: quoted at best, never a Correct of their own (as a passage
        # found by one term of the question is not).
        self.run.notes.append(f"searched again as “{query}”: its passages graded better and are used")
        action = self._decide_action(again)
        return found, again, Action.AMBIGUOUS if action is Action.CORRECT else action

    def _held_to_terms(self, strips: Sequence[Strip]) -> Action:
        """Correct only when what is kept answers: the passages graded relevant must hold the question's specific
        terms in some form (or most of its words, for one in plain words). A similarity grade says a passage is on
        the topic, not that it answers; a model's grade is trusted."""
        kept = [s.scored_text for s in strips if s.kept and s.kind == "local"]
        if why := self.analysis.unanswered(kept):
            self.run.notes.append(f"graded relevant, but {why}: shown as the closest passages (Ambiguous)")
            return Action.AMBIGUOUS
        return Action.CORRECT

    def _fall_back(self, strips: list[Strip], action: Action) -> tuple[list[Strip], Action]:
        """Refinement left no strip: Correct becomes Ambiguous, and Ambiguous keeps the closest passages."""
        if action is Action.CORRECT and not any(s.kept for s in strips):
            # The paper's fallback: the documents matched, yet no strip of them survived refinement.
            action = Action.AMBIGUOUS
            self.run.notes.append("Correct, but no strip survived refinement: treated as Ambiguous")
        if action is Action.AMBIGUOUS and not any(s.kept for s in strips):
            strips = keep_closest(strips, TUNING.answering.closest_kept)
            if any(s.kept for s in strips):
                self.run.notes.append("no strip reached the floor: the closest passages are shown as such")
        return strips, action

    def _number_sources(
        self, knowledge: Knowledge, answering: AnswerKind | None = None, first: int = 1
    ) -> tuple[AnswerKind, list[Strip], list[Source]]:
        """The kind of answer to make (``answering``, else the settings'), the strips it quotes, and the numbered
        sources. Quoted strips number their sources first: an answer quoting two passages cites [1] and [2]. Without
        sources there is no answer."""
        answering = answering or self.p.answer_kind(self.options.answer_mode)
        if knowledge.action is not Action.CORRECT and not any(s.kept and s.kind == "web" for s in knowledge.strips):
            # Passages the grader was unsure of (Ambiguous) or that failed (Incorrect), and nothing from the web: they
            # are quoted as the closest ones. No model writes from what may not answer.
            answering = AnswerKind.EVIDENCE
        # A written answer shows them under it. What documents say they are is quoted whole.
        chosen = (
            list(knowledge.strips)
            if knowledge.documents
            else evidence.select(knowledge.strips, self.question, self.run.notes)
        )
        sources = number_sources(knowledge.strips, knowledge.evaluation.graded, chosen)
        sources = [replace(s, n=s.n + first - 1) for s in sources]  # after the sources of the asks before
        return (answering if sources else AnswerKind.NO_ANSWER), chosen, sources

    def _generate(
        self, knowledge: Knowledge, kind: AnswerKind, chosen: Sequence[Strip], sources: Sequence[Source]
    ) -> Generator[Part | None, None, tuple[AnswerKind, str]]:
        """The answer's parts: the quoted evidence; the chat model's sentences, held to their sources as they stream,
        then the quotes they rest on; or a message that says why there is none. Returns the kind of answer made and,
        when the model failed, why."""
        o, run = self.options, self.run
        quoted = evidence.evidence_parts(chosen, sources, self._language, knowledge.action, o.scope.paths)
        if kind is AnswerKind.EVIDENCE:
            if quoted:
                missing = what_is_missing(self.question, knowledge, o.web, o.scope.paths)
                yield from ([missing, *after("\n\n", quoted)] if missing else quoted)
                return kind, ""
            kind = AnswerKind.NO_ANSWER
        if kind is AnswerKind.NO_ANSWER:
            yield Note(text=no_answer(self.question, knowledge, o.web, o.scope.paths))
            return kind, ""
        grounder, error, said = Grounder(sources, self._given(knowledge, sources), self.question), "", False
        try:
            for delta in self.p.generate(knowledge.question, sources, run.usage):
                if kept := grounder.feed(delta):
                    said = True
                    yield from kept
                else:  # a sentence is held: whoever reads the stream can still stop it here
                    yield None
        except Exception as exc:  # noqa: BLE001 - a dead model server must not lose the partial answer
            log.warning("the model failed while writing an answer: %r", exc)
            error = model_failure_message(self.p.backend, exc)
        finally:
            run.grounding = grounder.counts
        kept = grounder.close(failed=bool(error))  # the last sentence; or the one it was writing when it failed
        yield from kept
        if error:
            return kind, error
        run.notes += grounder.counts.notes()
        if (said or kept) and quoted:  # what the answer rests on, in the sources' own words: a small model may misread
            yield from after("\n\n", quoted)
        return kind, ""

    def _given(self, knowledge: Knowledge, sources: Sequence[Source]) -> list[str]:
        """What the model was given to write from: the questions asked, and each source with where it comes from."""
        given = [self.question, knowledge.question, *(said for role, said in self.history if role == "user")]
        return given + [
            f"{s.text}\n{s.file} {s.title} {s.url} {s.section} {' '.join(map(str, s.pages))}" for s in sources
        ]

    def _answer(self, found: Found) -> Answer:
        """The answer and its trace: how it was made, and what a written answer states that nothing given says."""
        p, o, run, knowledge, made = self.p, self.options, self.run, found.knowledge, found.made
        kind, sources, text = made.kind, made.sources, plain(self.parts).strip()
        if kind is AnswerKind.GENERATED and not made.error and not cited(text) & {s.n for s in sources}:
            run.notes.append(
                "the answer cites none of its sources: they are listed as given to the model, not as cited"
            )
        # A model may state what nothing it was given says: such names and numbers are shown, said to be cut.
        stated = tuple(run.grounding.invented)  # cut from the answer, or from the model's answer set aside
        if kind is AnswerKind.GENERATED:  # quotes state only what their sources say: nothing to gather for them
            stated += tuple(t for t in unsupported(text, self._given(knowledge, sources)) if t not in stated)
        # A question in one language rarely finds passages in the other offline: the user is told to ask in theirs.
        crosses = knowledge.action is not Action.CORRECT and not p.retriever.embedder.multilingual
        trace = Trace(
            question=self.question,
            standalone_question=knowledge.question,
            action=knowledge.action,
            retrieved=knowledge.evaluation.graded,
            thresholds=(o.lower_threshold, o.upper_threshold),
            thresholds_from=o.thresholds_from,
            terms=knowledge.evaluation.terms,
            strips=knowledge.strips,
            web_query=knowledge.web.query,
            web_results=knowledge.web.results,
            web_error=knowledge.web.error,
            notes=tuple(run.notes),
            hint=language_hint(self.question, p.retriever.file_languages(o.scope)) if crosses else "",
            remedy=remedy(knowledge) if kind is AnswerKind.NO_ANSWER else None,
            unsupported=stated,
            scope=o.scope.paths,
            expansions=tuple(run.expansions),
            timings=dict(run.timings),
            llm_calls=run.usage.requests,
            llm_calls_before_answer=(run.before_answer or 0) + (kind is AnswerKind.GENERATED),
            input_tokens=run.usage.input_tokens,
            output_tokens=run.usage.output_tokens,
        )
        # Not found for sure: the sections whose titles are closest, to ask again in the documents' words.
        unsure = knowledge.action is not Action.CORRECT and not knowledge.documents and not made.error
        suggested = p.suggest(knowledge.question, o.scope, sources) if unsure else ()
        return Answer(
            parts=(*self.parts, *([Suggestions(items=suggested)] if suggested else [])),
            backend=p.backend.name,
            model=p.backend.model,
            sources=tuple(sources),
            trace=trace,
            complete=not made.error,
            error=made.error,
            kind=kind,
        )


def _after_heading(parts: Generator[Part | None, None, Made]) -> Generator[Part | None, None, Made]:
    """An ask's parts, the first a blank line under the ask's heading; returns what the ask's writing returned."""
    first = True
    while True:
        try:
            part = next(parts)
        except StopIteration as done:
            return done.value
        if part is not None and first:
            part, first = after("\n\n", [part])[0], False
        yield part
