"""Plain data that flows between the core and its edges (CLI, UI, API)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

# Layout block types, shared by every parser. Headers, footers and page numbers are kept as
# blocks so a parser's output is complete, and dropped by the chunker.
BLOCK_TYPES = ("text", "title", "table", "equation", "list", "caption", "header", "footer", "image", "code")


@dataclass(frozen=True)
class Block:
    """One layout block of a page, in reading order."""

    type: str  # one of BLOCK_TYPES
    text: str  # plain text; tables as markdown (PyMuPDF) or HTML (MinerU); equations as LaTeX
    page: int  # 1-based
    bbox: tuple[float, float, float, float]  # PDF points, origin top-left: x0, y0, x1, y1
    order: int  # reading order within the page, from 0
    level: int = 0  # heading level of a title (1 is the top), 0 for other blocks


@dataclass(frozen=True)
class ParsedPDF:
    """A parser's output for one file."""

    blocks: tuple[Block, ...]
    pages: int
    parser: str  # "pymupdf" | "mineru"
    parser_version: str
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Chunk:
    """A retrievable piece of a document, with everything needed to cite and highlight it."""

    id: str
    text: str
    file: str  # path relative to the files folder
    pages: tuple[int, ...]  # 1-based; a chunk may span two pages
    section: str = ""  # heading path, " > "-joined
    bboxes: tuple[tuple[int, float, float, float, float], ...] = ()  # (page, x0, y0, x1, y1)
    block_types: tuple[str, ...] = ()
    parser: str = ""
    parser_version: str = ""
    file_hash: str = ""


@dataclass(frozen=True)
class ScoredChunk:
    """A chunk with a score: a retrieval score, or the evaluator's relevance in [-1, 1]."""

    chunk: Chunk
    score: float
    method: str = ""  # who scored it: "llm", "similarity", or "similarity (fallback: <why>)"


class Action(StrEnum):
    """The CRAG action trigger's verdict on the retrieved knowledge (arXiv:2401.15884)."""

    CORRECT = "correct"
    AMBIGUOUS = "ambiguous"
    INCORRECT = "incorrect"


@dataclass(frozen=True)
class WebResult:
    """One web search hit; ``text`` is the page's main text when it was fetched, else empty."""

    title: str
    url: str
    snippet: str
    text: str = ""


@dataclass(frozen=True)
class Strip:
    """A few sentences of knowledge, scored and kept or dropped by refinement."""

    text: str
    score: float
    kept: bool
    kind: str  # "local" | "web"
    file: str = ""
    pages: tuple[int, ...] = ()
    url: str = ""
    title: str = ""
    order: tuple[int, int] = (0, 0)  # (source position, strip position): document order
    chunk_id: str = ""  # the chunk a local strip came from


@dataclass(frozen=True)
class Source:
    """A numbered source the answer may cite as [n]."""

    n: int
    kind: str  # "local" | "web"
    text: str  # the refined knowledge taken from it
    file: str = ""
    pages: tuple[int, ...] = ()
    url: str = ""
    title: str = ""
    chunk_ids: tuple[str, ...] = ()
    bboxes: tuple[tuple[int, float, float, float, float], ...] = ()

    @property
    def snippet(self) -> str:
        return self.text if len(self.text) <= 300 else self.text[:297].rstrip() + "..."


@dataclass(frozen=True)
class Trace:
    """How an answer was made, for the expander in the UI and for ``ask --json``."""

    question: str
    standalone_question: str
    action: Action | None = None
    retrieved: tuple[ScoredChunk, ...] = ()  # scored by the evaluator, in retrieval order
    strips: tuple[Strip, ...] = ()
    web_query: str = ""
    web_results: tuple[WebResult, ...] = ()
    web_error: str = ""
    notes: tuple[str, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)
    llm_calls: int = 0
    llm_calls_before_answer: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def refined_context(self) -> str:
        return "\n".join(s.text for s in self.strips if s.kept)


@dataclass(frozen=True)
class Answer:
    """One answer, its numbered sources and how it was made."""

    text: str
    backend: str
    model: str
    sources: tuple[Source, ...] = ()
    trace: Trace | None = None
    complete: bool = True
    error: str = ""

    @property
    def action(self) -> Action | None:
        return self.trace.action if self.trace else None
