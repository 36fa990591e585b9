"""Deterministic stand-ins for crag's pieces: an embedder, a retriever, evaluators, a searcher, models."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RunUsage

from crag.analysis import Analysis
from crag.config import Settings
from crag.evaluator import Evaluator, Grade, Grading, SimilarityEvaluator
from crag.models import BackendInfo, Embedder, EmbedderUnavailable
from crag.overview import Overview, overview
from crag.pipeline import Pipeline
from crag.retriever import anchor
from crag.scope import EVERYTHING, Scope, resolve
from crag.sections import Section, SectionIndex, sections
from crag.terms import Vocabulary
from crag.text import document_language, lexical_tokens
from crag.types import Chunk, FileResult, Method, ScoredChunk, WebResult
from crag.websearch import Searcher, WebSearchUnavailable


class HashEmbedder(Embedder):
    """Bag of words hashed into 64 dimensions: texts sharing words are close. Deterministic and instant."""

    name = "fake:hash"

    def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for text in texts:
            v = [0.0] * 64
            for token in lexical_tokens(text):
                v[int(hashlib.md5(token.encode()).hexdigest(), 16) % 64] += 1.0
            norm = math.sqrt(sum(x * x for x in v)) or 1.0
            out.append([x / norm for x in v])
        return out


def chunk(text: str, file: str = "manual.pdf", page: int = 1, n: int = 0) -> Chunk:
    return Chunk(id=f"c{n}", text=text, file=file, pages=(page,), section="Intro", bboxes=((page, 0, 0, 100, 20),))


@dataclass
class FakeRetriever:
    chunks: list[Chunk]
    asked: list[str] = field(default_factory=list)
    embedder: Embedder = field(default_factory=HashEmbedder)
    missing: EmbedderUnavailable | None = None  # the index's embedder, when it cannot be had
    lexical_only: str = ""

    def retrieve(self, question: str, k: int, mode: str = "hybrid", scope: Scope = EVERYTHING) -> list[ScoredChunk]:
        self.asked.append(question)
        return [ScoredChunk(chunk=c, score=1.0 / (i + 1)) for i, c in enumerate(self.held(scope)[:k])]

    def held(self, scope: Scope = EVERYTHING) -> list[Chunk]:
        return [c for c in self.chunks if scope.holds(c.file)]

    def moved(self) -> bool:
        """A fake's index never moves to another embedder."""
        return False

    def check_scope(self, scope: Scope) -> None:
        """As the index checks a scope: against its files (here, the chunks' files)."""
        if scope:
            files = {c.file for c in self.chunks}
            resolve(scope, [FileResult(file=f, status="indexed", chunks=1) for f in sorted(files)])

    def term_stats(self, scope: Scope = EVERYTHING) -> FakeStats:
        return FakeStats([c.text for c in self.held(scope)])

    def anchor(self, asked: Analysis, hits: list[ScoredChunk], scope: Scope = EVERYTHING) -> list[ScoredChunk]:
        return anchor(asked, hits, lambda query, n: self.lexical(query, n, scope))

    def file_languages(self, scope: Scope = EVERYTHING) -> dict[str, str]:
        held = self.held(scope)
        return {f: document_language([c.text for c in held if c.file == f]) for f in {c.file for c in held}}

    def sections(self, question: str, scope: Scope, skip: Callable[[Section], bool]) -> list[Section]:
        """As the index offers them: the scope's sections closest to the question, by the fake embedder. Its deeper
        search is no search of the answer's: ``asked`` does not record it."""
        index = SectionIndex(sections(self.held(scope), []), self.embedder)
        found = [h.chunk for h in self.lexical(question, 20, scope)]
        return index.closest(question, self.embedder.embed([question])[0], None, skip, found)

    def overviews(self, files: Sequence[str]) -> list[Overview]:
        return [o for f in files if (o := overview(f, [c for c in self.chunks if c.file == f], None))]

    def lexical(self, query: str, n: int, scope: Scope = EVERYTHING) -> list[ScoredChunk]:
        """Every chunk of the scope, those sharing most words with the query first."""
        words = set(lexical_tokens(query))
        ranked = sorted(self.held(scope), key=lambda c: -len(words & set(lexical_tokens(c.text))))
        return [ScoredChunk(chunk=c, score=0.0) for c in ranked[:n]]


class WordRetriever(FakeRetriever):
    """Ranks the chunks by the words they share with the query, as a lexical search would."""

    def retrieve(self, question: str, k: int, mode: str = "hybrid", scope: Scope = EVERYTHING) -> list[ScoredChunk]:
        self.asked.append(question)
        return [replace(h, score=1.0) for h in self.lexical(question, k, scope)]


@dataclass
class FakeStats:
    """Document frequencies over a few texts, as the index computes them."""

    texts: list[str]

    @property
    def n_docs(self) -> int:
        return len(self.texts)

    def doc_frequency(self, token: str) -> int:
        return sum(1 for text in self.texts if token in lexical_tokens(text))

    @cached_property
    def vocabulary(self) -> Vocabulary:
        return Vocabulary(self.texts)


@dataclass
class FixedEvaluator(Evaluator):
    """Scores given in advance; records what it graded."""

    scores: list[float]
    name: str = "fixed"
    graded: list[str] = field(default_factory=list)

    def grade(self, question: str, texts: Sequence[str], usage: RunUsage | None = None) -> Grading:
        self.graded.append(question)
        method = Method.LLM if self.name == "llm" else Method.SIMILARITY  # a grader named "llm" stands for one
        return Grading([Grade(s, method) for s in self.scores[: len(texts)]])


@dataclass
class FakeSearcher(Searcher):
    results: list[WebResult] = field(default_factory=list)
    error: str = ""
    queries: list[str] = field(default_factory=list)

    def search(self, query: str, max_results: int) -> list[WebResult]:
        self.queries.append(query)
        if self.error:
            raise WebSearchUnavailable(self.error)
        return self.results[:max_results]


@dataclass
class ScriptedModel:
    """A FunctionModel that answers structured requests from ``structured`` (by schema title) and
    streams ``answer`` for the final generation; it records every prompt and the instructions."""

    answer: str = "The widget needs two cores [1]."
    structured: dict[str, dict] = field(default_factory=dict)
    prompts: list[str] = field(default_factory=list)
    instructions: list[str] = field(default_factory=list)

    def model(self) -> FunctionModel:
        return FunctionModel(self._request, stream_function=self._stream)

    def _record(self, messages: list[ModelMessage], info: AgentInfo) -> None:
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        self.prompts.append("".join(p.content for p in last.parts if isinstance(p, UserPromptPart)))
        self.instructions.append(info.instructions or "")

    def _request(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self._record(messages, info)
        title = info.model_request_parameters.output_object.name if info.model_request_parameters.output_object else ""
        return ModelResponse(parts=[TextPart(json.dumps(self.structured.get(title, {})))])

    async def _stream(self, messages: list[ModelMessage], info: AgentInfo):
        self._record(messages, info)
        for word in self.answer.split(" "):
            yield word + " "


def pipeline(
    settings: Settings,
    chunks: list[Chunk],
    scores: list[float],
    model: ScriptedModel | None = None,
    searcher: FakeSearcher | None = None,
    evaluator: Evaluator | None = None,
    backend: str = "ollama",
) -> Pipeline:
    """A pipeline over fakes. The backend is a model server's unless told otherwise: written answers, a model
    that condenses follow-ups; ``backend="embedded"`` gives the offline behaviour (quoted evidence)."""
    model = model or ScriptedModel()
    retriever = FakeRetriever(chunks)
    scorer = SimilarityEvaluator(retriever.embedder, retriever.term_stats)
    grader = evaluator or FixedEvaluator(scores)
    return Pipeline(
        settings=settings,
        model=model.model(),
        backend=BackendInfo(backend, "fake", "test"),
        retriever=retriever,
        scorer=scorer,
        evaluators={"similarity": grader, "llm": grader},
        searcher=searcher or FakeSearcher(),
        fetch=lambda results, top_n, timeout: list(results),  # never the network
    )
