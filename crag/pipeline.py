"""The CRAG run (arXiv:2401.15884, Algorithm 1), one named step per stage of the paper:

    condense      a follow-up becomes a standalone question (only with history)
    retrieve      top-k chunks
    evaluate      the retrieval evaluator scores each (question, chunk) in [-1, 1]; near misses are capped
    decide_action Correct / Ambiguous / Incorrect, as the official code's ``process_flag``
    refine        decompose -> score -> filter -> recompose, number the sources (Correct, Ambiguous)
    search_web    rewrite the question, search, refine the web text the same way (Incorrect, Ambiguous)
    generate      the answer: quoted evidence, or written by the chat model, citing sources as [n]

Each step takes and returns plain data; ``AnswerStream`` only sequences them and reports the stages
through ``on_step``, so the UI, the CLI and the API show the same progress.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.models import Model
from pydantic_ai.usage import RequestUsage

from crag import evidence, prompts
from crag.config import Settings
from crag.evaluator import Evaluator, LLMEvaluator, SimilarityEvaluator, Usage, cap_near_miss, check_terms
from crag.followups import READ_ON, History, conversation_query, elliptical, reading, rewrite_problem
from crag.messages import language_hint, model_failure_message, near_miss_note, no_answer_message
from crag.models import COUNTED, BackendInfo, build_chat_model, resolve_backend, run_structured
from crag.refine import keep_closest, local_strips, number_sources, refine, web_strips
from crag.retriever import Retriever, open_retriever
from crag.store import Mode, fuse, index_text
from crag.support import unsupported
from crag.text import clean_question, content_words, language
from crag.types import Action, Answer, AnswerKind, ScoredChunk, Source, Strip, TermCheck, Trace, WebResult, cited
from crag.websearch import OFF_REASON, Searcher, WebSearchUnavailable, build_searcher, fetch_pages

OnStep = Callable[[str], None]

STRIPS_KEPT = 8  # strips that survive refinement, local and web each
STRIP_FLOOR = -0.2  # a strip below this is noise even when few strips exist
CLOSEST_KEPT = 3  # Ambiguous with no strip above the floor: the closest passages shown, said to be such
WEB_RESULTS = 5
WEB_PAGES_FETCHED = 2


@dataclass(frozen=True)
class Options:
    """Per-question knobs. They are arguments of ``stream``: changing one never rebuilds the pipeline."""

    top_k: int
    upper_threshold: float
    lower_threshold: float
    web: bool
    evaluator: str  # auto | llm | similarity
    retrieval_mode: Mode
    answer_mode: str  # auto | evidence | generated

    @classmethod
    def from_settings(cls, s: Settings) -> Options:
        return cls(
            s.top_k, s.upper_threshold, s.lower_threshold, s.web_search, s.evaluator, s.retrieval_mode, s.answer_mode
        )


# ---------------------------------------------------------------------------------------------
# Step results


@dataclass(frozen=True)
class Condensed:
    question: str  # what is graded and answered: the question, or the model's standalone rewrite of it
    queries: tuple[str, ...]  # what is retrieved; several are fused
    with_context: str = ""  # the question with the conversation's words, for when it is not answered alone
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Evaluation:
    graded: tuple[ScoredChunk, ...]
    terms: TermCheck
    web_query: str = ""  # an LLM grader writes it on the way

    @property
    def best(self) -> float:
        return max((g.score for g in self.graded), default=-1.0)

    def mean(self, other: Evaluation) -> Evaluation:
        """Each passage graded as the mean of two readings of a follow-up: alone, by what it adds ("删除" in
        "那怎么删除呢？"), and with the question it goes on from (installing a package with tlmgr)."""
        scores = [round((a.score + b.score) / 2, 4) for a, b in zip(self.graded, other.graded, strict=True)]
        return replace(other, graded=tuple(replace(g, score=s) for g, s in zip(other.graded, scores, strict=True)))


@dataclass(frozen=True)
class WebKnowledge:
    query: str = ""
    results: tuple[WebResult, ...] = ()
    error: str = ""
    strips: tuple[Strip, ...] = ()


def decide_action(scores: Sequence[float], upper: float, lower: float) -> Action:
    """The official code's ``process_flag``: any score >= upper -> Correct; else any >= lower -> Ambiguous."""
    if any(s >= upper for s in scores):
        return Action.CORRECT
    if any(s >= lower for s in scores):
        return Action.AMBIGUOUS
    return Action.INCORRECT


# ---------------------------------------------------------------------------------------------
# Agents: built once; the model is given per run, so tests can ``override`` them.

answer_agent = Agent(instructions=prompts.ANSWER, name="answer")
# The structured ones run in the output mode their model server accepts (``run_structured``).
condense_agent = Agent(output_type=prompts.Standalone, instructions=prompts.CONDENSE, retries=1, name="condense")
web_query_agent = Agent(output_type=prompts.WebQuery, instructions=prompts.WEB_QUERY, retries=1, name="web_query")


# ---------------------------------------------------------------------------------------------
# The pipeline


@dataclass
class Pipeline:
    """Everything a question needs, built once and reused for every question."""

    settings: Settings
    model: Model
    backend: BackendInfo
    retriever: Retriever
    scorer: SimilarityEvaluator  # scores strips, and grades chunks as the "similarity" evaluator
    evaluators: dict[str, Evaluator]  # by name: "similarity", "llm"
    searcher: Searcher
    fetch: Callable[[list[WebResult], int, float], list[WebResult]] = fetch_pages  # main text of top pages

    @classmethod
    def from_settings(cls, settings: Settings) -> Pipeline:
        backend = resolve_backend(settings)
        model = build_chat_model(settings, backend)
        retriever = open_retriever(settings)
        scorer = SimilarityEvaluator(retriever.embedder, retriever.term_stats)
        evaluators = {"similarity": scorer, "llm": LLMEvaluator(model, scorer, timeout=settings.request_timeout)}
        return cls(settings, model, backend, retriever, scorer, evaluators, build_searcher(settings))

    def options(self, **overrides: object) -> Options:
        return replace(Options.from_settings(self.settings), **overrides)

    def stream(
        self, question: str, history: History = (), on_step: OnStep | None = None, **overrides: object
    ) -> AnswerStream:
        """The answer as a stream of text. Raises ``BadQuestion`` at once for an empty, punctuation-only or
        over-long question. ``overrides`` are ``Options`` fields for this question (``top_k=3``, ``web=False``...)."""
        options = self.options(**{k: v for k, v in overrides.items() if v is not None})
        return AnswerStream(self, clean_question(question), history, on_step or (lambda stage: None), options)

    def ask(self, question: str, history: History = (), **overrides: object) -> Answer:
        with self.stream(question, history, **overrides) as stream:
            for _ in stream:
                pass
        return stream.answer

    def answer_kind(self, mode: str | None = None) -> AnswerKind:
        """``CRAG_ANSWER_MODE`` (or this question's choice). auto: evidence on the embedded backend (a 135M
        model's prose cannot be trusted), generated on Ollama and OpenAI-compatible servers."""
        mode = mode or self.settings.answer_mode
        if mode == "evidence" or (mode == "auto" and self.backend.name == "embedded"):
            return AnswerKind.EVIDENCE
        return AnswerKind.GENERATED

    def evaluator(self, choice: str) -> Evaluator:
        """auto: the LLM grader on Ollama/OpenAI servers, similarity on the embedded model (small local
        models grade no better than chance; see README, "Evaluator")."""
        if choice == "auto":
            choice = "similarity" if self.backend.name == "embedded" else "llm"
        return self.evaluators[choice]

    def _structured(self, agent: Agent, prompt: str, usage: Usage, notes: list[str]) -> BaseModel | None:
        """One schema-constrained call; None when the model fails twice, times out, or takes no structured output."""
        try:
            result = run_structured(agent, prompt, self.model, self.settings.request_timeout)
        except Exception as exc:  # noqa: BLE001 - the pipeline goes on without this step
            notes.append(f"{agent.name} step failed ({type(exc).__name__}); skipped")
            return None
        usage.add(result.usage)
        return result.output

    # ---- the steps of Algorithm 1

    def condense(self, question: str, history: History, usage: Usage) -> Condensed:
        if not history:
            return Condensed(question, (question,))
        with_context = conversation_query(question, history)
        if self.backend.name == "embedded":
            return Condensed(question, (question, with_context), with_context)
        notes: list[str] = []
        out = self._structured(condense_agent, prompts.condense_prompt(question, history), usage, notes)
        rewrite = " ".join(out.question.split()) if out is not None else ""
        if rewrite and not (problem := rewrite_problem(rewrite, question, history)):
            return Condensed(rewrite, (rewrite,), notes=tuple(notes))
        if rewrite:
            notes.append(
                f"the model's rewrite “{rewrite[:120]}” was rejected ({problem}): the question was used as asked"
            )
        return Condensed(question, (question, with_context), with_context, tuple(notes))

    def retrieve(self, queries: Sequence[str], k: int, mode: Mode, asked: str) -> list[ScoredChunk]:
        rankings = [self.retriever.retrieve(q, k, mode) for q in dict.fromkeys(queries)]
        if len(rankings) == 1:
            return self.retriever.anchor(asked, rankings[0])
        own = {h.chunk.id for h in rankings[0]}
        fused = [replace(h, context=h.chunk.id not in own) for h in fuse(rankings)[:k]]
        return self.retriever.anchor(asked, fused)

    def evaluate(
        self, question: str, asked: str, hits: Sequence[ScoredChunk], evaluator: Evaluator, upper: float, usage: Usage
    ) -> Evaluation:
        """Grades in [-1, 1], capped for a near miss: a specific term of the question as asked that no passage
        of the first search mentions (below ``upper``), or that the documents never mention (Incorrect)."""
        texts = [index_text(h.chunk) for h in hits]  # with their section headings, as they were indexed
        grading = evaluator.grade(question, texts, usage)
        # Found by a term alone, or only with the words of the question before: no say on whether the question's own
        # names are mentioned ("R 里怎么删除…" after a question on R is not answered by a tlmgr page that never says R).
        found = [(t, h.context) for t, h in zip(texts, hits, strict=True) if not h.anchor]
        first = [t for t, context in found if not context] or [t for t, _ in found]
        terms = check_terms(asked, first, self.retriever.term_stats())
        grades = cap_near_miss(grading.grades, terms, upper)
        graded = tuple(replace(h, score=g.score, method=g.method) for h, g in zip(hits, grades, strict=True))
        return Evaluation(graded, terms, grading.web_query)

    def refine(self, question: str, graded: Sequence[ScoredChunk], lower: float) -> list[Strip]:
        keep = [g for g in graded if g.score >= lower or g.anchor]
        return refine(question, local_strips(keep), self.scorer, STRIPS_KEPT, STRIP_FLOOR)

    def search_web(self, question: str, suggested: str, usage: Usage, notes: list[str]) -> WebKnowledge:
        """Rewrite (no model call on the embedded backend, nor when the grader wrote the query), search, refine."""
        query = suggested
        if not query and self.backend.name != "embedded":
            out = self._structured(web_query_agent, question, usage, notes)
            query = out.query.strip() if out is not None else ""
        query = query or " ".join(content_words(question)[:6])  # without a model: the first content words
        try:
            found = self.searcher.search(query, WEB_RESULTS)
            results = tuple(self.fetch(found, WEB_PAGES_FETCHED, self.settings.request_timeout))
        except WebSearchUnavailable as exc:
            return WebKnowledge(query, error=exc.reason)
        strips = refine(question, web_strips(results), self.scorer, STRIPS_KEPT, STRIP_FLOOR)
        return WebKnowledge(query, results, "", tuple(strips))

    def generate(self, question: str, sources: Sequence[Source], usage: Usage) -> Iterator[str]:
        """The chat model's answer, streamed. Raises whatever the model raises. Closing this generator (or
        a failure) ends the model's stream before it returns: nothing is left running on the event loop."""
        counted = RequestUsage()  # the embedded model's exact counts; other models report theirs
        with answer_agent.run_stream_sync(
            prompts.answer_prompt(question, sources),
            model=self.model,
            model_settings={"max_tokens": self.settings.max_answer_tokens, COUNTED: counted},
        ) as result:
            yield from result.stream_text(delta=True, debounce_by=None)
            exact = {"input_tokens": counted.input_tokens, "output_tokens": counted.output_tokens}
            usage.add(replace(result.usage, **exact) if counted.has_values() else result.usage)


class AnswerStream:
    """Iterate to get the answer's text as it is made; ``answer`` is set when it ends.

    An answer left before its end (``break``, the Stop button's exception, a client gone) ends the model's
    stream as the iterator is dropped; ``close()`` or ``with`` ends it at once for an iterator still held.
    ``answer`` stays None then."""

    def __init__(self, pipeline: Pipeline, question: str, history: History, on_step: OnStep, options: Options):
        self.p = pipeline
        self.question = question
        self.history = history
        self.on_step = on_step
        self.options = options
        self.answer: Answer | None = None
        self.parts: list[str] = []
        self.usage = Usage()
        self.timings: dict[str, float] = {}
        self.notes: list[str] = []
        self._start = 0.0
        self._running: weakref.ref[Generator[str, None, None]] | None = None  # weak: dropping it closes it

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
        p, o = self.p, self.options
        self._start = time.perf_counter()

        with self._stage("understanding the follow-up" if self.history else "", "condense"):
            condensed = p.condense(self.question, self.history, self.usage)
        self.notes += condensed.notes
        question = condensed.question
        condense_calls = self.usage.requests

        with self._stage("retrieving", "retrieve"):
            hits = p.retrieve(condensed.queries, o.top_k, o.retrieval_mode, self.question)
        if p.retriever.lexical_only:  # the index's embedder is missing: its dense half could not be searched
            self.notes.append(p.retriever.lexical_only)
        with self._stage("grading", "grade"):
            evaluator = p.evaluator(o.evaluator)
            evaluation = p.evaluate(question, self.question, hits, evaluator, o.upper_threshold, self.usage)
            action = decide_action([g.score for g in evaluation.graded], o.upper_threshold, o.lower_threshold)
            # Not answered on its own, or going on from the question before ("And on Windows?" alone is Correct on
            # any page that names Windows): a follow-up is read with what it follows.
            context, goes_on = condensed.with_context, elliptical(self.question)
            if context not in ("", question) and (action is not Action.CORRECT or goes_on):
                again = p.evaluate(context, self.question, hits, evaluator, o.upper_threshold, self.usage)
                if goes_on:  # graded on both: what it adds, and what it goes on from
                    again = evaluation.mean(again)
                graded = [(g.score, index_text(g.chunk)) for g in again.graded]
                if note := reading(self.question, evaluation.best, action is Action.CORRECT, graded, o.lower_threshold):
                    self.notes.append(note)
                if note == READ_ON:
                    question, evaluation = context, again
                    action = decide_action([g.score for g in again.graded], o.upper_threshold, o.lower_threshold)
        if evaluation.terms.missing:
            self.notes.append(near_miss_note(evaluation.terms, [h.anchor for h in hits if h.anchor]))

        strips: list[Strip] = []
        if action in (Action.CORRECT, Action.AMBIGUOUS):
            with self._stage("refining", "refine"):
                strips = p.refine(question, evaluation.graded, o.lower_threshold)
            if action is Action.CORRECT and not any(s.kept for s in strips):
                # The paper's fallback: the documents matched, yet no strip of them survived refinement.
                action = Action.AMBIGUOUS
                self.notes.append("Correct, but no strip survived refinement: treated as Ambiguous")
            if action is Action.AMBIGUOUS and not any(s.kept for s in strips):
                strips = keep_closest(strips, CLOSEST_KEPT)
                if any(s.kept for s in strips):
                    self.notes.append("no strip reached the floor: the closest passages are shown as such")

        web = WebKnowledge()
        if action in (Action.INCORRECT, Action.AMBIGUOUS) and o.web:
            with self._stage("searching the web", "web"):
                web = p.search_web(question, evaluation.web_query, self.usage, self.notes)
            strips += web.strips
        elif action in (Action.INCORRECT, Action.AMBIGUOUS):
            web = WebKnowledge(error=OFF_REASON)
        if dropped := sum(1 for s in strips if s.reason.startswith("possible prompt injection")):
            self.notes.append(f"{dropped} strip(s) looked like prompt injection and were dropped (see their reasons)")

        answering = p.answer_kind(o.answer_mode)
        # Quoted strips number their sources first: an answer quoting two passages cites [1] and [2].
        chosen = evidence.select(strips) if answering is AnswerKind.EVIDENCE else []
        sources = number_sources(strips, evaluation.graded, chosen)
        before_answer = self.usage.requests - condense_calls
        kind, error = (answering if sources else AnswerKind.NO_ANSWER), ""
        with self._stage("generating", "generate"):
            quoted = ""
            if kind is AnswerKind.EVIDENCE:
                quoted = evidence.evidence_answer(chosen, sources, language(self.question), action)
                kind = AnswerKind.EVIDENCE if quoted else AnswerKind.NO_ANSWER
            if kind is AnswerKind.NO_ANSWER:
                terms, graded = evaluation.terms, bool(evaluation.graded)
                yield self._emit(no_answer_message(self.question, action, terms, web.query, web.error, o.web, graded))
            elif kind is AnswerKind.EVIDENCE:
                yield self._emit(quoted)
            else:
                before_answer += 1
                try:
                    for delta in p.generate(question, sources, self.usage):
                        yield self._emit(delta)
                except Exception as exc:  # noqa: BLE001 - a dead model server must not lose the partial answer
                    error = model_failure_message(p.backend, exc)
        self.timings.setdefault("first_token", round(time.perf_counter() - self._start, 3))
        self.timings["total"] = round(time.perf_counter() - self._start, 3)

        text = self.text.strip()
        if kind is AnswerKind.GENERATED and not error and not cited(text) & {s.n for s in sources}:
            self.notes.append(
                "the answer cites none of its sources: they are listed as given to the model, not as cited"
            )
        # A model may state what nothing it was given says: such names and numbers are shown as unsupported.
        stated: tuple[str, ...] = ()
        if kind is AnswerKind.GENERATED:  # quotes state only what their sources say: nothing to gather for them
            given = [self.question, question, *(said for role, said in self.history if role == "user")]
            given += [
                f"{s.text}\n{s.file} {s.title} {s.url} {s.section} {' '.join(map(str, s.pages))}" for s in sources
            ]
            stated = unsupported(text, given)
        # A question in one language rarely finds passages in the other offline: the user is told to ask in theirs.
        crosses = action is not Action.CORRECT and not p.retriever.embedder.multilingual
        trace = Trace(
            question=self.question,
            standalone_question=question,
            action=action,
            retrieved=evaluation.graded,
            thresholds=(o.lower_threshold, o.upper_threshold),
            terms=evaluation.terms,
            strips=tuple(strips),
            web_query=web.query,
            web_results=web.results,
            web_error=web.error,
            notes=tuple(self.notes),
            hint=language_hint(self.question, p.retriever.file_languages()) if crosses else "",
            unsupported=stated,
            timings=dict(self.timings),
            llm_calls=self.usage.requests,
            llm_calls_before_answer=before_answer,
            input_tokens=self.usage.input_tokens,
            output_tokens=self.usage.output_tokens,
        )
        self.answer = Answer(text, p.backend.name, p.backend.model, tuple(sources), trace, not error, error, kind)
