"""A parser for tests of the build's parse workers: its pages are instant text, except one page of one file, on
which it hangs as a page stuck in MuPDF's C code would: forever, deaf to SIGTERM; page 0 is the file's catalogue (a
file that hangs MuPDF when it is opened). Its own module, importable by the spawned workers, and light (PyMuPDF
counts the pages, no layout model is made), so a tiny part time limit is safe."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

import pymupdf

from crag.ingest.base import Catalogue, PagesRead, Parser, PDFError
from crag.types import Block, ParsedPDF


def calls(log: Path) -> list[tuple[int, str, int]]:
    """(worker pid, file, first page) of every call of a ``StuckParser`` logging to ``log``: page 0 for a catalogue."""
    lines = (log / "calls").read_text().split("\n") if (log / "calls").exists() else []
    return [(int(pid), name, int(page)) for pid, name, page in (line.split() for line in lines if line)]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class StuckParser(Parser):
    """``catalogue`` and ``read_pages`` leave a line in ``log`` for every call (``pid file first-page``, page 0 for the
    catalogue) and, when one hangs, the file ``log/stuck`` holding the pid of the worker that hangs."""

    name = "pymupdf"
    version = "stuck 1"

    def __init__(self, log: Path, stuck_file: str = "", stuck_page: int = 0, max_pages: int | None = None) -> None:
        self.log, self.stuck_file, self.stuck_page, self.max_pages = log, stuck_file, stuck_page, max_pages

    def parse(self, path: Path, pages: Sequence[int] | None = None, on_page=None) -> ParsedPDF:
        with pymupdf.open(path) as doc:
            every = range(1, doc.page_count + 1)
        return self.parsed(path, [self.read_pages(path, pages or every)])

    def catalogue(self, path: Path) -> Catalogue:
        self._call(path, [0])
        with pymupdf.open(path) as doc:
            pages = doc.page_count
        if self.max_pages is not None and pages > self.max_pages:
            raise PDFError(f"{path.name}: {pages} pages, over the cap")
        return Catalogue(pages=pages, title=f"The {path.stem} manual")

    def read_pages(self, path: Path, pages: Sequence[int], on_page=None) -> PagesRead:
        self._call(path, pages)
        if self.max_pages is not None and max(pages) > self.max_pages:  # as the old build saw it: part by part
            raise PDFError(f"{path.name}: refused in a worker")
        blocks = tuple(
            Block(
                type="text",
                text=f"Page {n} of {path.stem} says that the widget needs {n} cores.",
                page=n,
                bbox=(72, 72, 500, 90),
                order=0,
            )
            for n in pages
        )
        return PagesRead(blocks=blocks, warnings=(), stages=("parsing",) * len(pages), blank=0, page_count=0)

    def _call(self, path: Path, pages: Sequence[int]) -> None:
        with (self.log / "calls").open("a") as fh:
            fh.write(f"{os.getpid()} {path.name} {pages[0]}\n")
        if path.name == self.stuck_file and self.stuck_page in pages:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            (self.log / "stuck").write_text(str(os.getpid()))
            while True:
                time.sleep(60)

    def parsed(self, path: Path, parts: Sequence[PagesRead]) -> ParsedPDF:
        blocks = tuple(b for part in parts for b in part.blocks)
        return ParsedPDF(
            blocks=blocks, pages=sum(len(part.stages) for part in parts), parser=self.name, parser_version=self.version
        )


class NoWorkerParser(StuckParser):
    """One whose parse workers cannot start: it unpickles only in the process that made it, as a worker that dies at
    its start (out of memory, or killed) would leave the build."""

    def __init__(self, log: Path) -> None:
        super().__init__(log)
        self.made_in = os.getpid()

    def __setstate__(self, state: dict) -> None:
        if state["made_in"] != os.getpid():
            raise RuntimeError("this worker cannot start")
        self.__dict__.update(state)
