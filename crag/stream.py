"""The answer to one question as a stream of text: ``AnswerStream`` puts the steps of ``crag.pipeline`` in the order
of Algorithm 1 and reports the stages, or takes another way for a question about whole documents (``crag.overview``)
and for one of several asks (``crag.asks``). It holds one question's state (its usage, timings, notes, grounding),
where ``Pipeline`` holds what every question shares.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import cached_property
from typing import Protocol

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


class Steps(Protocol):
    """What an answer asks of the pipeline (``crag.pipeline.Pipeline`` is one): the steps of Algorithm 1, and what
    the run is made with. Named here so that this module needs nothing of the pipeline but its shape."""

    backend: BackendInfo
    retriever: Retriever

    def answer_kind(self, mode: str | None = None) -> AnswerKind: ...
    def evaluator(self, choice: str) -> Evaluator: ...
    def documents(self, question: str, scope: Scope, history: History = ()) -> list[Overview]: ...
    def analyse(self, asked: str, scope: Scope) -> Analysis: ...
    def reads(self, languages: dict[str, str]) -> bool: ...
    def suggest(self, question: str, scope: Scope, sources: Sequence[Source]) -> tuple[Suggestion, ...]: ...
    def read(self, question: str, scope: Scope, usage: RunUsage) -> tuple[Expansion, ...]: ...
    def condense(self, question: str, history: History, usage: RunUsage) -> Condensed: ...
    def retrieve(
        self,
        queries: Sequence[str],
        k: int,
        mode: Mode,
        asked: Analysis,
        scope: Scope = EVERYTHING,
        expansion: Expansion | None = None,
    ) -> list[ScoredChunk]: ...
    def evaluate(
        self,
        question: str,
        asked: Analysis,
        hits: Sequence[ScoredChunk],
        evaluator: Evaluator,
        upper: float,
        usage: RunUsage,
    ) -> Evaluation: ...
    def refine(self, question: str, graded: Sequence[ScoredChunk], lower: float) -> list[Strip]: ...
    def closest(self, question: str, graded: Sequence[ScoredChunk]) -> list[Strip]: ...
    def doc_query(self, question: str, graded: Sequence[ScoredChunk], usage: RunUsage, notes: list[str]) -> str: ...
    def search_web(self, question: str, suggested: str, usage: RunUsage, notes: list[str]) -> WebKnowledge: ...
    def generate(self, question: str, sources: Sequence[Source], usage: RunUsage) -> Iterator[str]: ...


# The CRAG run's one log, as the API has "crag.api": a failure the answer survives keeps its cause there.
log = logging.getLogger("crag.pipeline")


_Made = tuple[AnswerKind, str, list[Source]]  # what ``AnswerStream._write`` returns
# The model's reading of a question, its asks each with the words to search by: () offline, None not read yet.
ModelWords = tuple[Expansion, ...] | None


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
    """Iterate to get the answer's text as it is made; ``answer`` is set when it ends.

    An answer left before its end (``break``, the Stop button's exception, a client gone) ends the model's
    stream as the iterator is dropped; ``close()`` or ``with`` ends it at once for an iterator still held.
    ``answer`` stays None then."""

    def __init__(self, pipeline: Steps, question: str, history: History, on_step: OnStep, options: Options):
        self.p = pipeline
        self.question = question
        self.history = history
        self.on_step = on_step
        self.options = options
        self.answer: Answer | None = None
        self.parts: list[str] = []
        self.usage = RunUsage()
        self.timings: dict[str, float] = {}
        self.notes: list[str] = []
        self.grounding = Grounding()  # what holding a written answer to its sources cut and cited
        self.written = ""  # the model's own text, as kept: a written answer without the quotes under it
        self.expansions: list[Expansion] = []  # the model's words each ask was searched with
        self._condense_calls = 0  # model calls made to condense a follow-up: they come before the answer's
        self._before_answer = 0  # of a question of several asks: model calls before the first ask's answer
        self._comparison = False  # the asks are the sides of a comparison: each must be answered
        self._start = 0.0
        self._running: weakref.ref[Generator[str, None, None]] | None = None  # weak: dropping it closes it

    @cached_property
    def _asked(self) -> Analysis:
        """The question as asked, analysed once: its language is judged without the files it names
        ("texlive-zh-cn.pdf 讲了什么" is Chinese), its terms weighed in the scope's documents."""
        return self.p.analyse(self.question, self.options.scope)

    @property
    def _language(self) -> str:
        return self._asked.language

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
        return "".join(self.parts)

    @contextmanager
    def _stage(self, stage: str, timing: str) -> Iterator[None]:
        if stage:
            self.on_step(stage)
        started = time.perf_counter()
        try:
            yield
        finally:
            self.timings[timing] = round(self.timings.get(timing, 0.0) + time.perf_counter() - started, 3)

    def _emit(self, text: str) -> str:
        self.timings.setdefault("first_token", round(time.perf_counter() - self._start, 3))
        self.parts.append(text)
        return text

    def __iter__(self) -> Iterator[str]:
        steps = self._steps()
        self._running = weakref.ref(steps)
        return steps

    def _steps(self) -> Generator[str, None, None]:
        """Algorithm 1: each step is a method of its own; this only puts them in order and reports the stages. A
        question about whole documents is answered from the documents themselves instead (``crag.overview``), and a
        question of several asks ask by ask (``crag.asks``)."""
        self._start = time.perf_counter()
        documents = self.p.documents(self.question, self.options.scope, self.history)
        # The asks are asked without the conversation: only a question that stands alone is split.
        alone = not documents and (not self.history or stands_alone(self.question))
        words = self._read(self.question) if alone else None
        several = self._several(words) if alone else []
        if several:
            knowledge, kind, error, sources = yield from self._asks(several)
            before_answer = self._before_answer
        else:
            knowledge = self._about(documents) if documents else self._search(words)
            before_answer = self.usage.requests - self._condense_calls
            with self._stage("generating", "generate"):
                kind, error, sources = yield from self._write(knowledge)
        self.timings.setdefault("first_token", round(time.perf_counter() - self._start, 3))
        self.timings["total"] = round(time.perf_counter() - self._start, 3)
        if kind is AnswerKind.GENERATED:
            before_answer += 1  # the answer's own call
        self.answer = self._answer(knowledge, sources, kind, error, before_answer)

    def _write(
        self, knowledge: Knowledge, first: int = 1
    ) -> Generator[str, None, tuple[AnswerKind, str, list[Source]]]:
        """The answer from what was found: quoted, or written by the model and held to its sources (quoted when
        nothing it wrote is backed). Sources are numbered from ``first``. Returns the kind of answer made, why the
        model failed ("" when it did not), and the sources."""
        documents = knowledge.documents
        kind, chosen, sources = self._number_sources(knowledge, first=first)
        if documents and (kind is not AnswerKind.GENERATED or len(documents) > 1):
            # Quoted: what each document says it is, with its outline. A model summarises one document only.
            yield self._emit(overview.render(documents, sources, self._language))
            return AnswerKind.EVIDENCE, "", sources
        kind, error = yield from self._generate(knowledge, kind, chosen, sources)
        if kind is AnswerKind.GENERATED and not error and not self.grounding.grounded:
            # Nothing the model wrote is backed by its sources: their own words answer instead.
            self.notes.append("the model's answer said nothing its sources back: the sources are quoted instead")
            kind, chosen, sources = self._number_sources(knowledge, AnswerKind.EVIDENCE, first)
            if documents:
                yield self._emit(overview.render(documents, sources, self._language))
                return AnswerKind.EVIDENCE, "", sources
            kind, error = yield from self._generate(knowledge, kind, chosen, sources)
        return kind, error, sources

    def _read(self, question: str) -> tuple[Expansion, ...]:
        """The model's reading of the question (``Pipeline.read``); () offline, and for a question about a name the
        documents never mention (no words of the model's make them answer it)."""
        languages = self.p.retriever.file_languages(self.options.scope)
        model = self.options.use_model and self.p.reads(languages) and not self._asked.beyond_documents
        with self._stage("reading the question" if model else "", "read"):
            return self.p.read(question, self.options.scope, self.usage) if model else ()

    def _several(self, words: ModelWords) -> list[tuple[str, str, ModelWords]]:
        """The asks of a question of several, each as (its heading, what is searched and answered for it, the model's
        words for it): the two sides of a comparison, or the asks of one question ("…, and how do I…?"), as the model
        read them (by rule without a model, or when it failed); [] for a question of one ask."""
        if sides := compared(self.question):
            self.notes.append("a comparison: each side was searched, graded and answered on its own")
            self._comparison = True
            return [(side, ask, words) for side, ask in sides]
        if words and not words[0].error:
            if len(words) < 2:
                return []
            self.notes.append(
                f"a question of {len(words)} asks, as the model read it: each was searched, graded and answered "
                "on its own"
            )
            return [(e.ask, e.ask, (e,)) for e in words]
        several = asks(self.question)
        if len(several) < 2:
            return []
        self.notes.append(f"a question of {len(several)} asks: each was searched, graded and answered on its own")
        return [(ask, ask, () if words is not None else None) for ask in several]

    def _asks(
        self, several: Sequence[tuple[str, str, ModelWords]]
    ) -> Generator[str, None, tuple[Knowledge, AnswerKind, str, list[Source]]]:
        """A question of several asks: each is searched, graded and answered on its own, under its own heading, its
        sources numbered after those of the asks before. One the documents do not answer says so."""
        found: list[Knowledge] = []
        kinds: list[AnswerKind] = []
        sources: list[Source] = []
        invented: list[str] = []
        for n, (heading, ask, words) in enumerate(several, start=1):
            one = AnswerStream(self.p, ask, (), self.on_step, self.options)
            one.usage, one.timings, one._start = self.usage, self.timings, self._start
            found.append(one._search(words))
            self.expansions += one.expansions
            if n == 1:
                self._before_answer = self.usage.requests
            yield self._emit(("\n\n" if n > 1 else "") + f"**{n}. {heading}**\n\n")
            with self._stage("generating", "generate"):
                kind, error, numbered = yield from self._relay(one._write(found[-1], len(sources) + 1))
            self.notes += [f"ask {n}: {note}" for note in one.notes]
            kinds.append(kind)
            sources += numbered
            invented += one.grounding.invented
            if error:
                break
        self.grounding = Grounding(invented=invented)
        order = (AnswerKind.GENERATED, AnswerKind.EVIDENCE)  # written if any ask was, else quoted, else none
        kind = next((k for k in order if k in kinds), AnswerKind.NO_ANSWER)
        return joined_asks(self.question, found, every=self._comparison), kind, error, sources

    def _relay(self, steps: Generator[str, None, _Made]) -> Generator[str, None, _Made]:
        """Another stream's text, as this answer's own; returns what that stream returned."""
        while True:
            try:
                piece = next(steps)
            except StopIteration as done:
                return done.value
            yield self._emit(piece) if piece else ""

    def _about(self, documents: Sequence[Overview]) -> Knowledge:
        """A question about whole documents: their opening sentences are the knowledge, quoted as they are."""
        self.notes.append(
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
        before = self.usage.requests
        with self._stage("understanding the follow-up" if self.history else "", "condense"):
            condensed = p.condense(self.question, self.history, self.usage)
        self.notes += condensed.notes
        self._condense_calls = self.usage.requests - before
        if words is None:
            words = self._read(condensed.question)
        expansion = one_ask(condensed.question, words) if words else None
        if expansion is not None:
            self.expansions.append(expansion)
        with self._stage("retrieving", "retrieve"):
            hits = p.retrieve(condensed.queries, o.top_k, o.retrieval_mode, self._asked, o.scope, expansion)
        if p.retriever.lexical_only:  # the index's embedder is missing: its dense half could not be searched
            self.notes.append(p.retriever.lexical_only)
        with self._stage("grading", "grade"):
            evaluator = p.evaluator(o.evaluator)
            evaluation = p.evaluate(condensed.question, self._asked, hits, evaluator, o.upper_threshold, self.usage)
            action = self._decide_action(evaluation)
            question, evaluation, action = self._read_with_history(condensed, hits, evaluator, evaluation, action)
        # Only where the model was not asked for its words at first (model search off): not offline (no one waits for a
        # model there), nor without the model, nor for what the documents never mention (other words find it no more).
        again = o.use_model and p.backend.name != "embedded" and expansion is None
        if action is not Action.CORRECT and again and not evaluation.terms.decisive:
            with self._stage("rewriting the question", "rewrite"):
                hits, evaluation, action = self._retrieve_again(question, hits, evaluation, action, evaluator)
        if evaluation.terms.missing:
            self.notes.append(near_miss_note(evaluation.terms, [h.anchor for h in hits if h.anchor], o.scope.paths))
        strips: list[Strip] = []
        if action in (Action.CORRECT, Action.AMBIGUOUS):
            with self._stage("refining", "refine"):
                strips = p.refine(question, evaluation.graded, o.lower_threshold)
            strips, action = self._fall_back(strips, action)
        # A model's grade is trusted; a similarity grade (also the LLM grader's fallback) is checked.
        if action is Action.CORRECT and not any(g.trusted for g in evaluation.graded):
            action = self._held_to_terms(strips)
        web = WebKnowledge(error=OFF_REASON) if action is not Action.CORRECT and not o.web else WebKnowledge()
        if action is not Action.CORRECT and o.web:
            with self._stage("searching the web", "web"):
                suggested = evaluation.web_query or (" ".join(expansion.keywords) if expansion else "")
                web = p.search_web(question, suggested, self.usage, self.notes)
        strips += web.strips
        if action is Action.INCORRECT and not any(s.kept for s in strips):
            # Never hide the closest evidence: the answer says what is missing, then what came closest.
            with self._stage("refining", "refine"):
                strips = p.closest(question, evaluation.graded) + strips
        if dropped := sum(1 for s in strips if s.drop is Drop.INJECTION):
            self.notes.append(f"{dropped} strip(s) looked like prompt injection and were dropped (see their reasons)")
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
        again = self.p.evaluate(with_history, self._asked, hits, evaluator, o.upper_threshold, self.usage)
        if goes_on:  # graded on both: what it adds, and what it goes on from
            again = first.mean(again)
        graded = [(g.score, index_text(g.chunk)) for g in again.graded]
        if note := reading(self.question, first.best, action is Action.CORRECT, graded, o.lower_threshold):
            self.notes.append(note)
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
        query = p.doc_query(question, first.graded, self.usage, self.notes)
        if not query:
            return hits, first, action
        found = p.retrieve([query], o.top_k, o.retrieval_mode, self._asked, o.scope)
        again = p.evaluate(question, self._asked, found, evaluator, o.upper_threshold, self.usage)
        if again.best <= first.best:
            self.notes.append(f"searched again as “{query}”: no passage graded better, the first ones are kept")
            return hits, first, action
        # Found through the model's words, not the user's: quoted at best, never a Correct of their own (as a passage
        # found by one term of the question is not).
        self.notes.append(f"searched again as “{query}”: its passages graded better and are used")
        action = self._decide_action(again)
        return found, again, Action.AMBIGUOUS if action is Action.CORRECT else action

    def _held_to_terms(self, strips: Sequence[Strip]) -> Action:
        """Correct only when what is kept answers: the passages graded relevant must hold the question's specific
        terms in some form (or most of its words, for one in plain words). A similarity grade says a passage is on
        the topic, not that it answers; a model's grade is trusted."""
        kept = [s.scored_text for s in strips if s.kept and s.kind == "local"]
        if why := self._asked.unanswered(kept):
            self.notes.append(f"graded relevant, but {why}: shown as the closest passages (Ambiguous)")
            return Action.AMBIGUOUS
        return Action.CORRECT

    def _fall_back(self, strips: list[Strip], action: Action) -> tuple[list[Strip], Action]:
        """Refinement left no strip: Correct becomes Ambiguous, and Ambiguous keeps the closest passages."""
        if action is Action.CORRECT and not any(s.kept for s in strips):
            # The paper's fallback: the documents matched, yet no strip of them survived refinement.
            action = Action.AMBIGUOUS
            self.notes.append("Correct, but no strip survived refinement: treated as Ambiguous")
        if action is Action.AMBIGUOUS and not any(s.kept for s in strips):
            strips = keep_closest(strips, TUNING.answering.closest_kept)
            if any(s.kept for s in strips):
                self.notes.append("no strip reached the floor: the closest passages are shown as such")
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
            else evidence.select(knowledge.strips, self.question, self.notes)
        )
        sources = number_sources(knowledge.strips, knowledge.evaluation.graded, chosen)
        sources = [replace(s, n=s.n + first - 1) for s in sources]  # after the sources of the asks before
        return (answering if sources else AnswerKind.NO_ANSWER), chosen, sources

    def _generate(
        self, knowledge: Knowledge, kind: AnswerKind, chosen: Sequence[Strip], sources: Sequence[Source]
    ) -> Generator[str, None, tuple[AnswerKind, str]]:
        """The answer's text: the quoted evidence; the chat model's, held to its sources as it streams, then the quotes
        it rests on; or a message that says why there is none. Returns the kind of answer made and, when the model
        failed, why."""
        quoted = evidence.evidence_answer(chosen, sources, self._language, knowledge.action, self.options.scope.paths)
        if kind is AnswerKind.EVIDENCE:
            if quoted:
                yield self._emit(
                    what_is_missing(self.question, knowledge, self.options.web, self.options.scope.paths) + quoted
                )
                return kind, ""
            kind = AnswerKind.NO_ANSWER
        if kind is AnswerKind.NO_ANSWER:
            yield self._emit(no_answer(self.question, knowledge, self.options.web, self.options.scope.paths))
            return kind, ""
        grounder, error, start = Grounder(sources, self._given(knowledge, sources), self.question), "", len(self.parts)
        try:
            for delta in self.p.generate(knowledge.question, sources, self.usage):
                # "" while a sentence is held: whoever reads the stream can still stop it (a client gone, Stop).
                yield self._emit(kept) if (kept := grounder.feed(delta)) else ""
        except Exception as exc:  # noqa: BLE001 - a dead model server must not lose the partial answer
            log.warning("the model failed while writing an answer: %r", exc)
            error = model_failure_message(self.p.backend, exc)
        finally:
            self.grounding = grounder.counts
        if kept := grounder.close(failed=bool(error)):  # the last sentence; or the one it was writing when it failed
            yield self._emit(kept)
        self.written = "".join(self.parts[start:]).strip()
        if error:
            return kind, error
        self.notes += grounder.counts.notes()
        if self.written and quoted:  # what the answer rests on, in the sources' own words: a small model may misread
            yield self._emit("\n\n" + quoted)
        return kind, ""

    def _given(self, knowledge: Knowledge, sources: Sequence[Source]) -> list[str]:
        """What the model was given to write from: the questions asked, and each source with where it comes from."""
        given = [self.question, knowledge.question, *(said for role, said in self.history if role == "user")]
        return given + [
            f"{s.text}\n{s.file} {s.title} {s.url} {s.section} {' '.join(map(str, s.pages))}" for s in sources
        ]

    def _answer(
        self, knowledge: Knowledge, sources: Sequence[Source], kind: AnswerKind, error: str, before_answer: int
    ) -> Answer:
        """The answer and its trace: how it was made, and what a written answer states that nothing given says."""
        p, o, text = self.p, self.options, self.text.strip()
        if kind is AnswerKind.GENERATED and not error and not cited(text) & {s.n for s in sources}:
            self.notes.append(
                "the answer cites none of its sources: they are listed as given to the model, not as cited"
            )
        # A model may state what nothing it was given says: such names and numbers are shown, said to be cut.
        stated = tuple(self.grounding.invented)  # cut from the answer, or from the model's answer set aside
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
            notes=tuple(self.notes),
            hint=language_hint(self.question, p.retriever.file_languages(o.scope)) if crosses else "",
            remedy=remedy(knowledge) if kind is AnswerKind.NO_ANSWER else None,
            unsupported=stated,
            scope=o.scope.paths,
            expansions=tuple(self.expansions),
            timings=dict(self.timings),
            llm_calls=self.usage.requests,
            llm_calls_before_answer=before_answer,
            input_tokens=self.usage.input_tokens,
            output_tokens=self.usage.output_tokens,
        )
        # Not found for sure: the sections whose titles are closest, to ask again in the documents' words.
        unsure = knowledge.action is not Action.CORRECT and not knowledge.documents and not error
        return Answer(
            text=text,
            backend=p.backend.name,
            model=p.backend.model,
            sources=tuple(sources),
            trace=trace,
            complete=not error,
            error=error,
            kind=kind,
            suggestions=p.suggest(self.question, o.scope, sources) if unsure else (),
        )
