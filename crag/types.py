"""Plain data that flows between the core and its edges (CLI, UI, API)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Answer:
    """One answer and how it was made."""

    text: str
    backend: str
    model: str
    complete: bool = True
    error: str = ""
    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    timings: dict[str, float] = field(default_factory=dict)


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
    chunk: Chunk
    score: float


@dataclass(frozen=True)
class WebResult:
    """One web search hit; ``text`` is the page's main text when it was fetched, else empty."""

    title: str
    url: str
    snippet: str
    text: str = ""
