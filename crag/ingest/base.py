"""The parser interface. Every parser turns one PDF into layout blocks in reading order."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from crag.errors import CragError
from crag.types import Block, ParsedPDF

OnBlocks = Callable[[Sequence[Block]], None]


class PageProgress(Protocol):
    """Progress of one file, for progress bars: ``on_page(done, count)`` after each page, and
    ``on_page(j, count, "ocr")`` before page j is read with OCR, which takes seconds, not milliseconds."""

    def __call__(self, done: int, count: int, stage: str = "parsing", /) -> None: ...


class PDFError(CragError):
    """A file that cannot be parsed. The message says why and what to do; the other files still index."""


class Parser(ABC):
    name: str
    version: str

    @abstractmethod
    def parse(self, path: Path, pages: Sequence[int] | None = None, on_page: PageProgress | None = None) -> ParsedPDF:
        """Parse the given 1-based pages (all when None). Raises ``PDFError`` for a file it cannot read."""

    def parse_into(
        self,
        path: Path,
        on_blocks: OnBlocks | None,
        pages: Sequence[int] | None = None,
        on_page: PageProgress | None = None,
    ) -> ParsedPDF:
        """``parse``, handing each page's blocks to ``on_blocks`` as soon as they are read, so a build chunks
        and embeds them while the next pages are parsed. Parsers that read page by page override it; this
        default hands the whole file over at its end."""
        parsed = self.parse(path, pages, on_page)
        if on_blocks is not None:
            on_blocks(parsed.blocks)
        return parsed
