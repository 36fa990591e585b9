"""The answer as JSON: one pydantic model, printed by ``crag ask --json`` and returned by the HTTP API.

Every edge that shows an answer outside Python uses this contract, so the CLI, the API, /v1 and MCP cannot drift.
``CitationOut`` is what an answer cites, for clients that show citations apart from the text (/v1, MCP). ``Turn`` is
one earlier turn of a conversation, as the HTTP API and MCP take it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from crag.errors import Remedy
from crag.evidence import quoted_lines
from crag.models import BackendInfo
from crag.text import strip_invisible
from crag.types import Answer, AnswerKind, ScoredChunk, Source

MAX_TURN = 20_000  # characters of one earlier turn (an earlier answer can be long; the pipeline cuts what it uses)
MAX_TURNS = 50  # earlier turns a question may come with


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _clean(text: str) -> str:
    return strip_invisible(text).strip()


# One earlier turn of a conversation, oldest first in a question's history (``crag.followups.History``). No
# docstring: it would become the schema's description, which the API and MCP publish.
class Turn(_Strict):
    role: Literal["user", "assistant"]
    content: Annotated[str, Field(max_length=MAX_TURN), AfterValidator(_clean)]


class ScoreOut(_Strict):
    file: str
    pages: list[int]
    score: float
    method: str
    anchor: str = Field(
        "", description="The question's term this passage was searched for, when the first search missed it."
    )
    found_by_model: bool = Field(
        False, description="Found only by the model's words for the question (what the answer would say), not its own."
    )
    verdict: Literal["answers", "partly", "no"] | None = Field(None, description="The LLM grader's verdict.")
    answering: str = Field("", description="The sentence of the passage the LLM grader quoted as answering.")


class SearchWordsOut(_Strict):
    ask: str
    answer: str = Field(description="What the model expects the answer to say, as the documents would word it.")
    keywords: list[str]
    error: str | None = Field(None, description="Why there are no words: the model failed or ran out of time.")


class SuggestionOut(_Strict):
    title: str = Field(description="A section heading of the documents, close to the question: words to ask with.")
    file: str
    page: int


class SourceOut(_Strict):
    n: int
    kind: Literal["local", "web"]
    cited: bool = Field(description="Whether the answer's text cites it; otherwise it was only given to the model.")
    file: str | None
    pages: list[int]
    url: str | None
    title: str | None
    section: str | None = Field(None, description="The headings above a document's passage.")
    snippet: str


class TokensOut(_Strict):
    input: int
    output: int


class TermsOut(_Strict):
    terms: list[str] = Field(description="The question's specific terms: names, identifiers, rare words.")
    missing: list[str] = Field(description="Specific terms that no retrieved passage mentions.")
    unknown: list[str] = Field(description="Specific terms that no passage of the knowledge base mentions.")


class AnswerOut(_Strict):
    """An answer, its sources, and how it was made."""

    answer: str
    kind: Literal["evidence", "generated", "no_answer"] = Field(
        description="evidence: sentences quoted from the sources, each with its [n]; generated: written by the "
        "chat model; no_answer: nothing usable was found, and the text says why."
    )
    action: Literal["correct", "ambiguous", "incorrect"] | None
    scope: list[str] = Field(
        [],
        description="Where the question was asked: the folders (knowledge bases) and files it searched, relative to "
        "the files folder; empty for every document.",
    )
    backend: str
    model: str
    backend_reason: str
    scores: list[ScoreOut]
    terms: TermsOut
    refined_context: str
    sources: list[SourceOut]
    cited: list[int] = Field(description="The source numbers the text cites.")
    web_query: str | None
    web_error: str | None
    llm_calls: int
    llm_calls_before_answer: int
    tokens: TokensOut
    timings: dict[str, float]
    notes: list[str]
    hint: str = Field(
        "",
        description="What the user could do for a better answer (ask in the documents' language), or must do for "
        "any (build the knowledge base).",
    )
    unsupported: list[str] = Field(
        [],
        description="Names, identifiers and numbers a written answer states that neither its sources nor the "
        "question mention: the model may have invented them.",
    )
    search_words: list[SearchWordsOut] = Field(
        [], description="With a model: the words it wrote for each ask, searched beside the question's own."
    )
    suggestions: list[SuggestionOut] = Field(
        [],
        description="For an answer not found for sure: sections whose titles are closest to the question, whose "
        "words may be asked with instead.",
    )
    complete: bool
    error: str | None = Field(None, description="Only when `complete` is false: why the answer stopped early.")
    answer_id: str | None = Field(
        None,
        description="The answer's id, to rate it with POST /feedback; null when it was not kept (it stopped early, "
        "or CRAG_API_STORE_ANSWERS is off) and outside the HTTP API.",
    )

    @classmethod
    def of(
        cls,
        answer: Answer,
        backend: BackendInfo,
        remedies: Mapping[Remedy, str] | None = None,
        answer_id: str | None = None,
    ) -> AnswerOut:
        """``remedies``: the edge's words for what the user must do, said as the hint when the answer names a remedy.
        ``answer_id``: the id the answer was kept under, when it was."""
        trace = answer.trace
        cited = {s.n for s in answer.cited_sources}
        return cls(
            answer=answer.text,
            kind=answer.kind.value,
            action=trace.action.value if trace and trace.action else None,
            scope=list(trace.scope) if trace else [],
            backend=answer.backend,
            model=answer.model,
            backend_reason=backend.reason,
            scores=[_score(g) for g in (trace.retrieved if trace else ())],
            terms=TermsOut(
                terms=list(trace.terms.terms) if trace else [],
                missing=list(trace.terms.missing) if trace else [],
                unknown=list(trace.terms.unknown) if trace else [],
            ),
            refined_context=trace.refined_context if trace else "",
            sources=[
                SourceOut(
                    n=s.n,
                    kind=s.kind,
                    cited=s.n in cited,
                    file=s.file or None,
                    pages=list(s.pages),
                    url=s.url or None,
                    title=s.title or None,
                    section=s.section or None,
                    snippet=s.snippet,
                )
                for s in answer.sources
            ],
            cited=sorted(cited),
            web_query=(trace.web_query or None) if trace else None,
            web_error=(trace.web_error or None) if trace else None,
            llm_calls=trace.llm_calls if trace else 0,
            llm_calls_before_answer=trace.llm_calls_before_answer if trace else 0,
            tokens=TokensOut(input=trace.input_tokens if trace else 0, output=trace.output_tokens if trace else 0),
            timings=trace.timings if trace else {},
            notes=list(trace.notes) if trace else [],
            hint=(remedies[trace.remedy] if trace.remedy and remedies else trace.hint) if trace else "",
            unsupported=list(trace.unsupported) if trace else [],
            search_words=[
                SearchWordsOut(ask=e.ask, answer=e.answer, keywords=list(e.keywords), error=e.error or None)
                for e in (trace.expansions if trace else ())
            ],
            suggestions=[SuggestionOut(title=s.title, file=s.file, page=s.page) for s in answer.suggestions],
            complete=answer.complete,
            error=(answer.error or "The answer stopped early: ask again.") if not answer.complete else None,
            answer_id=answer_id,
        )


def _score(g: ScoredChunk) -> ScoreOut:
    return ScoreOut(
        file=g.chunk.file,
        pages=list(g.chunk.pages),
        score=round(g.score, 4),
        method=g.graded_by,
        anchor=g.anchor,
        found_by_model=g.from_model,
        verdict=g.verdict.value if g.verdict else None,
        answering=g.answering,
    )


class CitationOut(_Strict):
    """A source the answer's text cites as [n], with what the answer took from it."""

    n: int
    kind: Literal["local", "web"]
    file: str | None = Field(description="The document, relative to the files folder (local sources).")
    pages: list[int] = Field(description="Its pages in the PDF, from 1.")
    section: str | None = Field(description="The headings above the passage.")
    url: str | None = Field(description="The web page (web sources).")
    title: str | None
    quote: str = Field(
        description="What the answer took from it: the sentences it quotes (evidence answers), else the start "
        "of the passage the model was given."
    )


def citations(answer: Answer) -> list[CitationOut]:
    """The sources the text cites, and only those: a source it was given but does not cite is no citation."""
    quoted: dict[int, list[str]] = {}
    if answer.kind is AnswerKind.EVIDENCE:
        for line in quoted_lines(answer.text):
            quoted.setdefault(int(line["n"]), []).append(line["quote"])
    return [_citation(s, quoted.get(s.n, [])) for s in answer.cited_sources]


def _citation(source: Source, quotes: list[str]) -> CitationOut:
    return CitationOut(
        n=source.n,
        kind=source.kind,
        file=source.file or None,
        pages=list(source.pages),
        section=source.section or None,
        url=source.url or None,
        title=source.title or None,
        quote=" … ".join(quotes) or source.snippet,
    )
