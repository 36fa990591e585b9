"""The answer as JSON: one pydantic model, printed by ``crag ask --json`` and returned by the HTTP API.

Every edge that shows an answer outside Python uses this contract, so the CLI, the API, /v1 and MCP cannot drift.
``answer`` is the answer's text; ``parts`` the same answer as data (``crag.parts``), one object per part with its
``kind``, for clients that lay an answer out themselves.
``CitationOut`` is what an answer cites, for clients that show citations apart from the text (/v1, MCP). ``Turn`` is
one earlier turn of a conversation, as the HTTP API and MCP take it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from crag import parts as p
from crag.errors import Remedy
from crag.markdown import api_markdown, escaped_parts
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


class LeadOut(_Strict):
    kind: Literal["lead"] = "lead"
    text: str = Field(description="A line the app sets over the quotes after it.")


class NoteOut(_Strict):
    kind: Literal["note"] = "note"
    text: str = Field(description="The app's own words: why there is no answer, what the documents never mention.")


class WrittenOut(_Strict):
    kind: Literal["written"] = "written"
    text: str = Field(description="A sentence (or code block) the model wrote, as Markdown, with its [n] citations.")
    cited: list[int] = Field(description="The sources it cites.")


class QuoteOut(_Strict):
    kind: Literal["quote"] = "quote"
    text: str = Field(description="Sentences of a document, quoted whole: text, not Markdown.")
    n: int = Field(description="The source it is quoted from.")
    faq: str = Field(description="The document's question it answers (a FAQ's), or empty.")


class CodeOut(_Strict):
    kind: Literal["code"] = "code"
    text: str = Field(description="Code quoted whole from a document, its lines and indentation kept.")
    n: int
    language: str = Field(description="Its language, when known; else empty.")
    faq: str


class TableOut(_Strict):
    kind: Literal["table"] = "table"
    header: list[str]
    rows: list[list[str]] = Field(description="The rows under the header, each cell as text.")
    n: int
    faq: str


class HeadingOut(_Strict):
    kind: Literal["heading"] = "heading"
    text: str = Field(description="An ask's heading, or a document's title.")
    detail: str = Field(description="What follows a document's title on its line.")
    ask: int = Field(description="The ask's number, from 1, for a question of several asks; else 0.")


class OutlineEntryOut(_Strict):
    depth: int
    text: str = Field(description="A heading of the document, with its page.")


class OutlineOut(_Strict):
    kind: Literal["outline"] = "outline"
    heading: str
    entries: list[OutlineEntryOut]


class SuggestionsOut(_Strict):
    kind: Literal["suggestions"] = "suggestions"
    items: list[SuggestionOut]


PartOut = Annotated[
    LeadOut | NoteOut | WrittenOut | QuoteOut | CodeOut | TableOut | HeadingOut | OutlineOut | SuggestionsOut,
    Field(discriminator="kind"),
]


def part_out(part: p.Part) -> PartOut:
    """One part as JSON: its own fields, the gap before it left out (the layout of the text, which ``answer`` has)."""
    if isinstance(part, p.Table):
        return TableOut(header=list(part.header), rows=[list(r) for r in part.rows[1:]], n=part.n, faq=part.faq)
    if isinstance(part, p.Outline):
        entries = [OutlineEntryOut(depth=d, text=t) for d, t in part.entries]
        return OutlineOut(heading=part.heading, entries=entries)
    if isinstance(part, p.Suggestions):
        return SuggestionsOut(items=[SuggestionOut(title=s.title, file=s.file, page=s.page) for s in part.items])
    out: PartOut = _OUT[type(part)].model_validate({k: v for k, v in vars(part).items() if k != "gap"})
    return out


_OUT: dict[type, type[LeadOut | NoteOut | WrittenOut | QuoteOut | CodeOut | HeadingOut]] = {
    p.Lead: LeadOut,
    p.Note: NoteOut,
    p.Written: WrittenOut,
    p.Quote: QuoteOut,
    p.Code: CodeOut,
    p.Heading: HeadingOut,
}


class AnswerOut(_Strict):
    """An answer, its sources, and how it was made."""

    answer: str
    parts: list[PartOut] = Field(
        [],
        description="The answer as data, part by part, in order: what the model wrote (Markdown), and what the app "
        "sets and the documents say (text): lead lines, notes, quotes, code, tables, headings, outlines, and the "
        "sections suggested under an answer not found for sure.",
    )
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
        markdown: bool = False,
    ) -> AnswerOut:
        """``remedies``: the edge's words for what the user must do, said as the hint when the answer names a remedy.
        ``answer_id``: the id the answer was kept under, when it was. ``markdown``: for clients that render Markdown
        (the API, MCP): the text as ``api_markdown`` sets it, and what the model wrote escaped as it is there."""
        trace = answer.trace
        cited = {s.n for s in answer.cited_sources}
        shown = escaped_parts(answer.parts) if markdown else answer.parts
        return cls(
            answer=api_markdown(answer.parts) if markdown else answer.text,
            parts=[part_out(part) for part in shown],
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
        for part in p.quoted(answer.parts):
            quoted.setdefault(part.n, []).extend(p.quoted_texts(part))
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
