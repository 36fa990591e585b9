"""Parsing in worker processes, ahead of the build: ``ParseAhead``.

The build chunks and embeds a file's first pages while a worker reads the next ones. Processes, not threads:
PyMuPDF is not thread-safe, and the layout model builds each page's features in Python, holding the GIL, so a
parser thread beside the embedder gains next to nothing. Pages go to the workers in parts of ``PAGES_PER_PART``
(progress comes back part by part), all of them queued at the start, so a worker never waits for the embedder.

How many workers: one per core, up to ``MAX_WORKERS``, each running the layout model on one thread. A page's
features are Python on one core, and the model's tensors are small, so pages side by side beat threads within a
page: two one-thread workers on two cores parse faster than one worker on two threads. While they read, the build
embeds on one thread (``busy``): three single-threaded processes share two cores well, where torch's two threads
each waited for the other whenever a worker held its core. The figures are in docs/benchmarks.md (measured design
choices). Each worker holds a copy of the layout model (about 300 MB).

A page can hang MuPDF or the layout model in C code, where no exception reaches it. So each part has a time
limit from the moment a worker takes it (``CRAG_PARSE_PART_TIMEOUT``): pebble's pool then stops that worker
(SIGTERM, then SIGKILL) and starts another, which takes the next parts, and the part's file fails alone. While
the build waits for a part it calls ``waiting`` a few times a second, so a cancelled build stops at once, and
``close`` stops the workers, one stuck on a page too.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from pathlib import Path

from pebble import ProcessExpired, ProcessFuture, ProcessPool

from crag.config import cap_threads, cpu_threads
from crag.ingest.base import PageReader, PagesRead, PDFError

PAGES_PER_PART = 8
# Fewer pages are parsed in this process: a worker's start (importing PyMuPDF and loading its layout model, 1 to 2 s)
# would cost more than the overlap gains.
MIN_PAGES = 24
POLL_SECONDS = 0.2  # how long a cancel waits to be seen while the build waits for a part

MAX_WORKERS = 4  # past that, another copy of the layout model costs more memory than its pages gain time
_parser: PageReader | None = None  # the worker's parser, made once by _start

Parts = list[tuple[list[int], ProcessFuture]]


def _start(parser: bytes) -> None:
    """A worker's start: its engines run on one thread. The parser is unpickled after the cap is set: that imports
    PyMuPDF, which makes the layout model."""
    global _parser
    cap_threads(1)
    _parser = pickle.loads(parser)


def _read(path: Path, pages: Sequence[int]) -> PagesRead:
    assert _parser is not None  # _start made it, in every worker
    return _parser.read_pages(path, pages)


def workers() -> int:
    return min(cpu_threads(), MAX_WORKERS)


def _parts(path: Path, max_pages: int | None) -> list[list[int]] | PDFError:
    """The file's pages in parts, or why it cannot be read: unopenable, or over the page cap. Such a file's reason
    is known here, the message the parser would give, so none of its parts is queued to fail in a worker."""
    from crag.ingest.pymupdf import open_pdf

    try:
        with open_pdf(path, max_pages) as doc:
            count = doc.page_count
    except PDFError as exc:
        return exc
    return [list(range(s, min(s + PAGES_PER_PART, count + 1))) for s in range(1, count + 1, PAGES_PER_PART)]


def _pages(pages: Sequence[int]) -> str:
    return f"page {pages[0]}" if len(pages) == 1 else f"pages {pages[0]}-{pages[-1]}"


def _timed_out(path: Path, pages: Sequence[int], timeout: float) -> PDFError:
    return PDFError(
        f"{path.name}: {_pages(pages)} could not be read: the parser was still on them after {timeout:g} s and was "
        "stopped, so this file is left out (the others still build). If these pages are only slow (large scans read "
        "with OCR), raise CRAG_PARSE_PART_TIMEOUT; otherwise print or export the file to a new PDF, or split those "
        "pages off, and rebuild."
    )


def _died(path: Path, pages: Sequence[int], exc: ProcessExpired) -> PDFError:
    return PDFError(
        f"{path.name}: {_pages(pages)} could not be read: the parser's worker process stopped (exit code "
        f"{exc.exitcode}; out of memory, or a crash in MuPDF). Rebuild to try again; if it fails again, print or "
        "export the file to a new PDF and rebuild."
    )


class ParseAhead:
    """The files' pages queued to worker processes at the start; ``parts(path)`` yields a file's in order.

    Use ``ParseAhead.start``, which gives None where parsing in this process is better: a parser without
    ``read_pages`` (MinerU is a server's work), few pages, or a parser that cannot be sent to a process."""

    def __init__(
        self, parser: object, paths: Sequence[Path], parts: dict[Path, list[list[int]] | PDFError], timeout: float
    ) -> None:
        self._pool = ProcessPool(
            workers(),
            initializer=_start,
            initargs=(pickle.dumps(parser),),
            context=get_context("spawn"),  # not fork: the app and the API build from a thread of a threaded process
        )
        self._timeout = timeout
        self._queued: dict[Path, Parts | PDFError] = {}
        for path in paths:
            pages = parts[path]
            if isinstance(pages, PDFError):
                self._queued[path] = pages
            else:
                self._queued[path] = [(p, self._pool.schedule(_read, (path, p), timeout=timeout)) for p in pages]
        self._all = [future for queued in self._queued.values() if isinstance(queued, list) for _, future in queued]
        self._closed = False

    @classmethod
    def start(cls, parser: object, paths: Sequence[Path], timeout: float) -> ParseAhead | None:
        """``timeout``: seconds a worker may spend on one part before it is stopped and the part's file fails."""
        if not hasattr(parser, "read_pages") or cpu_threads() < 2:
            return None
        parts = {path: _parts(path, getattr(parser, "max_pages", None)) for path in paths}
        if sum(len(pages) for part in parts.values() if isinstance(part, list) for pages in part) < MIN_PAGES:
            return None
        try:
            pickle.dumps(parser)
        except Exception:  # noqa: BLE001 - an engine made in this process (a test's fake OCR) stays in it
            return None
        return cls(parser, paths, parts, timeout)

    def busy(self) -> bool:
        """Whether the workers still have pages to read. Once every page is read they are let go, their layout
        models with them, before the end of the build, when the index being written takes the most memory."""
        if all(future.done() for future in self._all):
            self.close()
            return False
        return True

    def parts(self, path: Path, waiting: Callable[[], None] = lambda: None) -> Iterator[PagesRead]:
        """The file's parts in page order, as the workers finish them; a part's exception is raised here, a
        ``PDFError`` for a part that ran out of time. ``waiting`` is called while a part is awaited: it may raise
        (a cancelled build). The file's parts not begun are dropped when it fails."""
        queued = self._queued.pop(path)
        if isinstance(queued, PDFError):
            raise queued
        try:
            for pages, future in queued:
                yield self._result(path, pages, future, waiting)
        finally:
            for _, future in queued:
                if not future.running():  # one in a worker's hands ends in a moment; stopping it costs a restart
                    future.cancel()

    def _result(self, path: Path, pages: list[int], future: ProcessFuture, waiting: Callable[[], None]) -> PagesRead:
        while not wait([future], timeout=POLL_SECONDS).done:
            if not self._pool.active:  # workers died holding no part (at their start): the rest parse here
                raise BrokenProcessPool("the parse workers could not start")
            waiting()
        exc = future.exception()
        if isinstance(exc, TimeoutError):  # the pool stopped the worker; a new one has taken the next parts
            raise _timed_out(path, pages, self._timeout)
        if isinstance(exc, ProcessExpired):
            raise _died(path, pages, exc)
        return future.result()

    def close(self) -> None:
        """The workers are stopped now, one in the middle of a part too (SIGTERM, then SIGKILL a few seconds
        later): a cancelled build, or one whose worker hangs on a page, leaves no process behind."""
        if self._closed:
            return
        self._closed = True
        self._pool.stop()
        self._pool.join()
        for future in self._all:
            future.cancel()

    def __enter__(self) -> ParseAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
