"""The parser interface. Every parser turns one PDF into layout blocks in reading order."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path

from crag.errors import CragError
from crag.types import ParsedPDF

# on_page(page_done, page_count): called after each page, for progress bars.
PageProgress = Callable[[int, int], None]


class PDFError(CragError):
    """A file that cannot be parsed. The message says why and what to do; the other files still index."""


class Parser(ABC):
    name: str
    version: str

    @abstractmethod
    def parse(self, path: Path, pages: Sequence[int] | None = None, on_page: PageProgress | None = None) -> ParsedPDF:
        """Parse the given 1-based pages (all when None). Raises ``PDFError`` for a file it cannot read."""
