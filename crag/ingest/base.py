"""The parser interface. Every parser turns one PDF into layout blocks in reading order."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from crag.errors import CragError
from crag.types import Block, ParsedPDF


class PageProgress(Protocol):
    """Progress of one file, for progress bars: ``on_page(done, count)`` after each page, and
    ``on_page(j, count, "ocr")`` before page j is read with OCR, which takes seconds, not milliseconds."""

    def __call__(self, done: int, count: int, stage: str = "parsing", /) -> None: ...


@dataclass(kw_only=True, frozen=True)
class PagesRead:
    """Some pages of a file: their blocks, warnings, how each page was read ("parsing" or "ocr"), how many had no
    text and how many OCR read; ``page_count`` is the whole file's."""

    blocks: tuple[Block, ...]
    warnings: tuple[str, ...]
    stages: tuple[str, ...]
    blank: int
    page_count: int
    ocr_pages: int = 0


Outline = tuple[tuple[int, str, int], ...]  # a PDF's bookmarks: (level, heading, page)


@dataclass(kw_only=True, frozen=True)
class Catalogue:
    """What a PDF says of itself, read without a page: its page count, its own title and its top bookmarks (both
    empty when it has none)."""

    pages: int
    title: str = ""
    outline: Outline = ()


class PageReader(Protocol):
    """A parser whose pages can be read apart (in worker processes, ``crag.ingest.workers``) and joined: PyMuPDF's.
    ``catalogue`` opens the file: a ``PDFError`` when it cannot be read or is over the page cap."""

    def catalogue(self, path: Path) -> Catalogue: ...

    def read_pages(
        self, path: Path, pages: Sequence[int] | None = None, on_page: PageProgress | None = None
    ) -> PagesRead: ...

    def parsed(self, path: Path, parts: Sequence[PagesRead]) -> ParsedPDF: ...


class PDFError(CragError):
    """A file that cannot be parsed. The message says why and what to do; the other files still index."""


class Parser(ABC):
    name: str
    version: str

    @abstractmethod
    def parse(self, path: Path, pages: Sequence[int] | None = None, on_page: PageProgress | None = None) -> ParsedPDF:
        """Parse the given 1-based pages (all when None). Raises ``PDFError`` for a file it cannot read."""
