"""The CRAG run (arXiv:2401.15884, Algorithm 1), one named step per stage of the paper:

    condense      a follow-up becomes a standalone question (only one that cannot stand alone)
    retrieve      top-k chunks
    evaluate      the retrieval evaluator scores each (question, chunk) in [-1, 1]; near misses are capped
    decide_action Correct / Ambiguous / Incorrect, as the official code's ``process_flag``
    doc_query     Ambiguous / Incorrect on a model server: the question in the documents' words, searched again
    refine        decompose -> score -> filter -> recompose, number the sources (Correct, Ambiguous)
    search_web    rewrite the question, search, refine the web text the same way (Incorrect, Ambiguous)
    generate      the answer: quoted evidence, or written by the chat model and held to its sources, citing them as [n]

Each step takes and returns plain data (``crag.steps``); ``AnswerStream`` (``crag.stream``) only sequences them and
reports the stages through ``on_step``, so the UI, the CLI and the API show the same progress.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar, Unpack, cast

from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RequestUsage, RunUsage

from crag import prompts
from crag.analysis import Analysis
from crag.asks import model_asks
from crag.config import Settings
from crag.evaluator import Evaluator, Grade, LLMEvaluator, SimilarityEvaluator, verdict_grade
from crag.followups import (
    History,
    conversation_query,
    rewrite_problem,
    stands_alone,
)
from crag.models import COUNTED, BackendInfo, build_chat_model, resolve_backend, run_structured
from crag.overview import (
    Overview,
    asks_about_documents,
    by_title,
    documents_named,
    named_files,
    names_a_document,
    without_names,
)
from crag.refine import local_strips, refine, refine_closest, web_strips
from crag.retriever import Retriever, open_retriever
from crag.scope import EVERYTHING, Scope
from crag.sections import shown_by, suggestion
from crag.steps import Condensed, Evaluation, Options, Overrides, WebKnowledge
from crag.store import Mode, fuse, fuse_top, index_text
from crag.stream import AnswerStream, OnStep
from crag.text import clean_question, content_words, language, warm_up
from crag.tuning import TUNING
from crag.types import (
    Answer,
    AnswerKind,
    Expansion,
    ScoredChunk,
    Source,
    Strip,
    Suggestion,
    TermCheck,
    ThresholdsFrom,
    Verdict,
    WebResult,
)
from crag.websearch import Searcher, WebSearchUnavailable, build_searcher, fetch_pages

# Failures the pipeline survives become notes on the answer; the log keeps their cause for whoever runs the server.
log = logging.getLogger(__name__)

_ANSWERING = TUNING.answering
WEB_RESULTS = 5
WEB_PAGES_FETCHED = 2
MAX_DOCUMENTS = 12  # documents described in one answer: more is a catalogue, and a scope narrows it


# ---------------------------------------------------------------------------------------------
# Agents: built once; the model is given per run, so tests can ``override`` them.

answer_agent = Agent(instructions=prompts.ANSWER, name="answer")
# The structured ones run in the output mode their model server accepts (``run_structured``).
condense_agent = Agent(output_type=prompts.Standalone, instructions=prompts.CONDENSE, retries=1, name="condense")
doc_query_agent = Agent(output_type=prompts.DocQuery, instructions=prompts.DOC_QUERY, retries=1, name="rewrite")
web_query_agent = Agent(output_type=prompts.WebQuery, instructions=prompts.WEB_QUERY, retries=1, name="web_query")
read_agent = Agent(output_type=prompts.Reading, instructions=prompts.READ, retries=1, name="read")


# ---------------------------------------------------------------------------------------------
# The pipeline

_READ_TITLES = 8  # documents whose titles tell the model what the question is about: the scope's, or the closest


def _ceiling(hit: ScoredChunk, grade: Grade, terms: TermCheck, analysis: Analysis, upper: float) -> float:
    """The highest grade a passage may have. A near miss caps it (``TermCheck.ceiling``), but a passage the model
    read and quoted as answering may say in the documents' words what the question says in plain ones ("widescreen",
    "aspectratio=169"): then only a name or identifier it never mentions caps it. A passage only the model's words
    found is Ambiguous at most, unless the model, reading it against the question, says it answers."""
    answered = grade.trusted and grade.verdict is Verdict.ANSWERS and bool(grade.answering)
    named = {t.text for t in analysis.terms if t.strong}
    cap = terms.ceiling(upper)
    if answered and not terms.decisive and not named & set(terms.missing):
        cap = math.inf
    if hit.from_model and not answered:
        cap = min(cap, upper - 0.01)
    return cap


Out = TypeVar("Out", bound=BaseModel)  # a structured step's output


def _as_partial(hit: ScoredChunk) -> ScoredChunk:
    """A passage a model's verdict calls off the question, graded as a partial verdict is (its similarity grade, below
    Correct); any other as it is."""
    if hit.verdict is not Verdict.NO or hit.similarity is None:
        return hit
    return replace(hit, score=max(hit.score, verdict_grade(Verdict.PARTLY, False, hit.similarity)))


@dataclass(kw_only=True)
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
        warm_up()  # at start, not on the first question
        backend = resolve_backend(settings)
        model = build_chat_model(settings, backend)
        retriever = open_retriever(settings)
        retriever.embedder.load()  # at start too: the packaged model loads on first use otherwise
        scorer = SimilarityEvaluator(retriever.embedder, retriever.term_stats)
        evaluators = {"similarity": scorer, "llm": LLMEvaluator(model, scorer, timeout=settings.grade_timeout)}
        return cls(
            settings=settings,
            model=model,
            backend=backend,
            retriever=retriever,
            scorer=scorer,
            evaluators=evaluators,
            searcher=build_searcher(settings),
        )

    def options(self, **overrides: Unpack[Overrides]) -> Options:
        """The settings' options with this question's overrides; a None override keeps the settings' value."""
        changes: dict[str, Any] = {k: v for k, v in overrides.items() if v is not None}
        if "scope" in changes:  # folders and files, as a Scope or as paths
            changes["scope"] = Scope.of(changes["scope"])
        if changes.get("use_model") is False:  # each step that would call the model, its way without one
            changes |= {"evaluator": "similarity", "answer_mode": "evidence", "web": False}
        options = replace(Options.from_settings(self.settings), **changes)
        settings = (self.settings.lower_threshold, self.settings.upper_threshold)
        if "thresholds_from" not in changes and (options.lower_threshold, options.upper_threshold) != settings:
            options = replace(options, thresholds_from=ThresholdsFrom.CHOSEN)  # the answer says whose they were
        return options

    def stream(
        self, question: str, history: History = (), on_step: OnStep | None = None, **overrides: Unpack[Overrides]
    ) -> AnswerStream:
        """The answer as a stream of text. Raises ``BadQuestion`` at once for an empty, punctuation-only or
        over-long question, and ``UnknownScope`` for a scope the index does not hold. ``overrides`` are ``Options``
        fields for this question (``top_k=3``, ``web=False``, ``scope=["projects/alpha"]``...)."""
        options = self.options(**overrides)
        if history and not options.use_model:
            raise ValueError("a question asked without the chat model takes no conversation: the model condenses it")
        if options.scope:
            self.retriever.check_scope(options.scope)
        return AnswerStream(self, clean_question(question), history, on_step or (lambda stage: None), options)

    def ask(self, question: str, history: History = (), **overrides: Unpack[Overrides]) -> Answer:
        with self.stream(question, history, **overrides) as stream:
            for _ in stream:
                pass
        return stream.finished

    def answer_kind(self, mode: str | None = None) -> AnswerKind:
        """``CRAG_ANSWER_MODE`` (or this question's choice). auto: evidence on the embedded backend (a 135M
        model's prose cannot be trusted), generated on Ollama and OpenAI-compatible servers."""
        mode = mode or self.settings.answer_mode
        if mode == "evidence" or (mode == "auto" and self.backend.name == "embedded"):
            return AnswerKind.EVIDENCE
        return AnswerKind.GENERATED

    def evaluator(self, choice: str) -> Evaluator:
        """auto: the LLM grader on Ollama/OpenAI servers, similarity on the embedded model (small local
        models grade no better than chance: docs/how-it-works.md)."""
        if choice == "auto":
            choice = "similarity" if self.backend.name == "embedded" else "llm"
        return self.evaluators[choice]

    def _structured(self, agent: Agent[Any, Out], prompt: str, usage: RunUsage, notes: list[str]) -> Out | None:
        """One schema-constrained call; None when the model fails twice, times out, or takes no structured output."""
        try:
            result = run_structured(agent, prompt, self.model, self.settings.request_timeout)
        except Exception as exc:  # noqa: BLE001 - the pipeline goes on without this step
            log.warning("the %s step failed and was skipped: %r", agent.name, exc)
            notes.append(f"{agent.name} step failed ({type(exc).__name__}); skipped")
            return None
        usage.incr(result.usage)
        output: Out = result.output  # the agent's output_type: run_structured asks for it
        return output

    # ---- the steps of Algorithm 1

    def condense(self, question: str, history: History, usage: RunUsage) -> Condensed:
        if not history or stands_alone(question):  # two unrelated questions in a row are two questions
            return Condensed(question, (question,))
        with_history = conversation_query(question, history)
        if self.backend.name == "embedded":
            return Condensed(question, (question, with_history), with_history)
        notes: list[str] = []
        out = self._structured(condense_agent, prompts.condense_prompt(question, history), usage, notes)
        rewrite = " ".join(out.question.split()) if out is not None else ""
        if rewrite and not (problem := rewrite_problem(rewrite, question, history)):
            return Condensed(rewrite, (rewrite,), notes=tuple(notes))
        if rewrite:
            notes.append(
                f"the model's rewrite “{rewrite[:120]}” was rejected ({problem}): the question was used as asked"
            )
        return Condensed(question, (question, with_history), with_history, tuple(notes))

    def read(self, question: str, scope: Scope, usage: RunUsage) -> tuple[Expansion, ...]:
        """The model's reading of a question: its asks, each with a short answer as the documents would write it and
        the keywords of the passage that answers (HyDE), searched beside the question's own words. () without a model
        server, or with ``model_search`` off; one ask that says why, with no words, when the model fails or runs
        past ``model_search_timeout``."""
        languages = self.retriever.file_languages(scope)
        if not self.reads(languages):
            return ()
        timeout = self.settings.model_search_timeout
        language_of, titles = self._subject(question, scope, languages)
        prompt = prompts.read_prompt(question, language_of, titles)
        try:
            result = run_structured(read_agent, prompt, self.model, timeout)
        except TimeoutError:
            return (Expansion(ask=question, error=f"the model took longer than {timeout:g} s"),)
        except Exception as exc:  # noqa: BLE001 - the question's own search still answers
            log.warning("the model wrote no search words: %r", exc)
            return (Expansion(ask=question, error=f"the model failed ({type(exc).__name__})"),)
        usage.incr(result.usage)
        return model_asks(question, result.output)

    def reads(self, languages: dict[str, str]) -> bool:
        """Whether the model is asked to read a question asked of these files (each with its language): not offline,
        nor with model search off, nor when there is nothing to search (an index empty or needing a rebuild)."""
        return self.backend.name != "embedded" and self.settings.model_search and bool(languages)

    def _subject(self, question: str, scope: Scope, languages: dict[str, str]) -> tuple[str, list[str]]:
        """The language the answer is likeliest written in (the scope's, or that of the documents its closest
        passages come from), and the titles of the documents it may be in (``languages``: the scope's files, each
        with its language): what the model writes in and about."""
        files = list(languages)
        if len(files) > _READ_TITLES or len(set(languages.values())) > 1:
            near = list(dict.fromkeys(h.chunk.file for h in self.retriever.retrieve(question, 5, scope=scope)))
            files = near[:_READ_TITLES] if len(files) > _READ_TITLES else files
            spoken = [languages.get(f, "") for f in near[:3]]
            language_of = max(set(spoken), key=spoken.count) if spoken else language(question)
        else:
            language_of = next(iter(languages.values()), language(question))
        titles = [o.title for o in self.retriever.overviews(files) if o.title]
        return language_of if language_of in prompts.LANGUAGE_NAMES else language(question), titles

    def suggest(self, question: str, scope: Scope, sources: Sequence[Source]) -> tuple[Suggestion, ...]:
        """The sections of the scope whose titles are closest to a question not answered for sure, to ask again in
        the documents' own words; those the answer's sources show already are left out. They only add to an answer
        made already: when they cannot be had (an embedder gone meanwhile), the answer stands without them."""
        try:
            return tuple(suggestion(s) for s in self.retriever.sections(question, scope, shown_by(sources)))
        except Exception:  # noqa: BLE001 - the answer is made and streamed: it must not fail for its offers
            log.warning("no sections could be offered", exc_info=True)
            return ()

    def documents(self, question: str, scope: Scope, history: History = ()) -> list[Overview]:
        """What each document a question about whole documents asks of is ("What is this document about?",
        "总结一下 R-intro.pdf"), those with a sentence that says so, at most ``MAX_DOCUMENTS``; [] for any other
        question, and for one that points back to the conversation ("Summarize it")."""
        languages = self.retriever.file_languages(scope)
        if not languages or not asks_about_documents(question, languages):
            return []
        if history and not stands_alone(question) and not names_a_document(question, languages):
            return []
        wanted = documents_named(question, languages)
        # No file named, no language: perhaps a title ("the Beamer user guide", "这份安装指南").
        if 1 < len(wanted) == len(languages) and not named_files(question, wanted, by_word=True):
            wanted = by_title(question, self.retriever.overviews(wanted)) or wanted
        return [d for d in self.retriever.overviews(wanted[:MAX_DOCUMENTS]) if d.said]

    def analyse(self, question: str, scope: Scope) -> Analysis:
        """The question as asked, analysed once in its scope, without the files it names: "R-intro.pdf" is no term a
        passage must mention."""
        return Analysis(without_names(question, self.retriever.file_languages(scope)), self.retriever.term_stats(scope))

    def retrieve(
        self,
        queries: Sequence[str],
        k: int,
        mode: Mode,
        analysis: Analysis,
        scope: Scope = EVERYTHING,
        expansion: Expansion | None = None,
    ) -> list[ScoredChunk]:
        """The top ``k`` for the question's own words (and its conversation's), fused with those for the model's words
        (``expansion``): each ranking's best is kept, and a passage only the model's words found says so."""
        rankings = [self.retriever.retrieve(q, k, mode, scope=scope) for q in dict.fromkeys(queries)]
        hits = rankings[0]
        if len(rankings) > 1:
            own = {h.chunk.id for h in rankings[0]}
            hits = [replace(h, from_history=h.chunk.id not in own) for h in fuse(rankings)[:k]]
        if expansion is not None and expansion.queries:
            legs = [hits, *(self.retriever.retrieve(q, k, mode, scope=scope) for q in expansion.queries)]
            plain = {h.chunk.id: h for h in hits}
            fused = [plain.get(h.chunk.id) or replace(h, from_model=True) for h in fuse_top(legs, [1.0] * len(legs), k)]
            # The question's own best passage is never left out, however few are kept.
            hits = fused if not hits or hits[0] in fused else [hits[0], *fused][:k]
        return self.retriever.anchor(analysis, hits, scope=scope)

    def evaluate(
        self,
        question: str,
        analysis: Analysis,
        hits: Sequence[ScoredChunk],
        evaluator: Evaluator,
        upper: float,
        usage: RunUsage,
    ) -> Evaluation:
        """Grades in [-1, 1] of ``question`` (as searched), capped for a near miss of the question as asked
        (``analysis``): a specific term that no passage of the first search mentions (below ``upper``), or that the
        scope's documents never mention (Incorrect)."""
        texts = [index_text(h.chunk) for h in hits]  # with their section headings, as they were indexed
        # Found by a term alone, or only with the words of the question before: no say on whether the question's own
        # names are mentioned ("R 里怎么删除…" after a question on R is not answered by a tlmgr page that never says R).
        found = [(t, h.from_history) for t, h in zip(texts, hits, strict=True) if not h.anchor]
        terms = analysis.near_miss([t for t, from_history in found if not from_history] or [t for t, _ in found])
        grades = evaluator.grade(question, texts, usage)
        graded = tuple(
            replace(
                h,
                score=min(g.score, _ceiling(h, g, terms, analysis, upper)),
                method=g.method,
                detail=g.detail,
                verdict=g.verdict,
                answering=g.answering,
                similarity=g.similarity,
            )
            for h, g in zip(hits, grades.grades, strict=True)
        )
        return Evaluation(graded, terms, grades.web_query)

    def refine(self, question: str, graded: Sequence[ScoredChunk], lower: float, unsure: bool = False) -> list[Strip]:
        """The strips to answer with. An ``unsure`` answer (Ambiguous) quotes as its similarity grades would: a small
        model says "no" of the very passage that answers (the paraphrase set, 1.5B: its best-graded passage by
        similarity, 0.92 to 0.95, in 2 of 10 answers that lost the key fact), so a "no" counts as a partial verdict
        here. The action is decided already, on the verdicts."""
        if unsure:
            graded = [_as_partial(g) for g in graded]
        keep = [g for g in graded if g.score >= lower or g.anchor]
        return refine(question, local_strips(keep), self.scorer, _ANSWERING.strips_kept, _ANSWERING.strip_floor)

    def closest(self, question: str, graded: Sequence[ScoredChunk]) -> list[Strip]:
        """The strips of the passages that came closest, when the action is Incorrect and the web gave nothing."""
        return refine_closest(question, local_strips(graded), self.scorer, _ANSWERING.closest_kept)

    def doc_query(self, question: str, graded: Sequence[ScoredChunk], usage: RunUsage, notes: list[str]) -> str:
        """The question in the words of the documents ("stems point upward" → "stem direction \\stemUp"), by the model;
        "" when it fails or says the same. The passages graded best give the language to write in (where the answer
        is likeliest) and their headings some of the documents' words."""
        best = sorted(graded, key=lambda g: -g.score)[:3]
        prompt = prompts.doc_query_prompt(
            question, language(best[0].chunk.text) if best else "en", [g.chunk.section for g in best]
        )
        out = self._structured(doc_query_agent, prompt, usage, notes)
        query = " ".join(out.query.split()) if out is not None else ""
        return query if content_words(query) and set(content_words(query)) != set(content_words(question)) else ""

    def search_web(self, question: str, suggested: str, usage: RunUsage, notes: list[str]) -> WebKnowledge:
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
            log.warning("web search unavailable: %s", exc.reason)
            return WebKnowledge(query, error=exc.reason)
        try:
            strips = refine(question, web_strips(results), self.scorer, _ANSWERING.strips_kept, _ANSWERING.strip_floor)
        except Exception as exc:  # noqa: BLE001 - the web only adds: the documents' passages still answer
            log.warning("the web pages could not be scored", exc_info=exc)
            return WebKnowledge(query, results, f"the web pages could not be scored ({type(exc).__name__})")
        return WebKnowledge(query, results, "", tuple(strips))

    def generate(self, question: str, sources: Sequence[Source], usage: RunUsage) -> Iterator[str]:
        """The chat model's answer, streamed. Raises whatever the model raises. Closing this generator (or
        a failure) ends the model's stream before it returns: nothing is left running on the event loop."""
        counted = RequestUsage()  # the embedded model's exact counts; other models report theirs
        with answer_agent.run_stream_sync(
            prompts.answer_prompt(question, sources),
            model=self.model,
            # With a key of our own, which only the embedded model reads.
            model_settings=cast(ModelSettings, {"max_tokens": self.settings.max_answer_tokens, COUNTED: counted}),
        ) as result:
            yield from result.stream_text(delta=True, debounce_by=None)
            exact = replace(result.usage, input_tokens=counted.input_tokens, output_tokens=counted.output_tokens)
            usage.incr(exact if counted.has_values() else result.usage)
