"""Parsing in worker processes, ahead of the build: ``ParseAhead``.

The build chunks and embeds a file's first pages while a worker reads the next ones. Processes, not threads:
PyMuPDF is not thread-safe, and the layout model builds each page's features in Python, holding the GIL, so a
parser thread beside the embedder gained 3 %. Pages go to the workers in parts of ``PAGES_PER_PART`` (progress
comes back part by part), all of them queued at the start, so a worker never waits for the embedder.

How many workers: one per core, up to ``MAX_WORKERS``, each running the layout model on one thread. A page's
features are Python on one core, and the model's tensors are small, so pages side by side beat threads within a
page: parsing the benchmark corpus alone took 42 s with two one-thread workers, 56 s with one two-thread worker
and 78 s with one one-thread worker, on 2 cores. While they read, the build embeds on one thread (``busy``):
three single-threaded processes share two cores well, where torch's two threads each waited for the other
whenever a worker held its core (the whole build: 83 s with two embedding threads throughout, 70 s with one
while the workers read and two after). Each worker holds a copy of the layout model (about 300 MB).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from crag.config import cap_threads, cpu_threads
from crag.ingest.base import PagesRead, PDFError

PAGES_PER_PART = 8
# Fewer pages are parsed in this process: a worker's start (importing PyMuPDF and loading its layout model, 1 to 2 s)
# would cost more than the overlap gains.
MIN_PAGES = 24

MAX_WORKERS = 4  # past that, another copy of the layout model costs more memory than its pages gain time
_parser = None  # the worker's parser, made once by _start


def _start(parser: bytes) -> None:
    """A worker's start: its engines run on one thread. The parser is unpickled after the cap is set: that imports
    PyMuPDF, which makes the layout model."""
    global _parser
    cap_threads(1)
    _parser = pickle.loads(parser)


def _read(path: Path, pages: Sequence[int] | None) -> PagesRead:
    return _parser.read_pages(path, pages)  # type: ignore[union-attr]


def workers() -> int:
    return min(cpu_threads(), MAX_WORKERS)


def _parts(path: Path) -> list[list[int]] | None:
    """The file's pages in parts; None when it cannot be opened (a worker then raises the reason, as ``parse``)."""
    from crag.ingest.pymupdf import page_sizes

    try:
        count = len(page_sizes(path))
    except PDFError:
        return None
    return [list(range(s, min(s + PAGES_PER_PART, count + 1))) for s in range(1, count + 1, PAGES_PER_PART)]


class ParseAhead:
    """The files' pages queued to worker processes at the start; ``parts(path)`` yields a file's in order.

    Use ``ParseAhead.start``, which gives None where parsing in this process is better: a parser without
    ``read_pages`` (MinerU is a server's work), few pages, or a parser that cannot be sent to a process."""

    def __init__(self, parser: object, paths: Sequence[Path], parts: dict[Path, list[list[int]] | None]) -> None:
        spawn = get_context("spawn")  # not fork: the app and the API build from a thread of a threaded process
        self._pool = ProcessPoolExecutor(
            workers(), mp_context=spawn, initializer=_start, initargs=(pickle.dumps(parser),)
        )
        self._queued: dict[Path, list[Future]] = {}
        for path in paths:
            self._queued[path] = [self._pool.submit(_read, path, pages) for pages in parts[path] or [None]]
        self._all = [future for futures in self._queued.values() for future in futures]

    @classmethod
    def start(cls, parser: object, paths: Sequence[Path]) -> ParseAhead | None:
        if not hasattr(parser, "read_pages") or cpu_threads() < 2:
            return None
        parts = {path: _parts(path) for path in paths}
        if sum(len(pages) for part in parts.values() for pages in part or ()) < MIN_PAGES:
            return None
        try:
            pickle.dumps(parser)
        except Exception:  # noqa: BLE001 - an engine made in this process (a test's fake OCR) stays in it
            return None
        return cls(parser, paths, parts)

    def busy(self) -> bool:
        """Whether the workers still have pages to read. Once every page is read they are let go, their layout
        models with them, before the end of the build, when the index being written takes the most memory."""
        if all(future.done() for future in self._all):
            self.close()
            return False
        return True

    def parts(self, path: Path) -> Iterator[PagesRead]:
        """The file's parts in page order, as the workers finish them; a part's exception is raised here."""
        for future in self._queued.pop(path):
            yield future.result()

    def close(self) -> None:
        """Parts not begun are dropped; a worker finishes the part in hand (a second or so) and exits."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> ParseAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
