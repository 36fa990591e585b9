"""Parsing in worker processes: ``ParseAhead``. Every page a build reads with PyMuPDF is read in a worker.

A page can hang MuPDF or the layout model in C code, where no exception reaches it, and so can opening a damaged
file. So nothing of a file is read in the build's process: a worker opens it first (its page count, title and
bookmarks: ``Catalogue``), then reads its pages in parts of ``PAGES_PER_PART``, and each of these tasks has a time
limit from the moment a worker takes it (``CRAG_PARSE_PART_TIMEOUT``): pebble's pool then stops that worker (SIGTERM,
then SIGKILL) and starts another, which takes the next task, and the file fails alone. While the build waits for a
worker it calls ``waiting`` a few times a second, so a cancelled build stops at once, and ``close`` stops the
workers, one stuck on a page too. Processes, not threads: a thread stuck in C code cannot be stopped, and PyMuPDF
is not thread-safe.

The build chunks and embeds a file's first pages while a worker reads the next ones. Every file's catalogue is
queued at the start, and a file's parts as soon as its catalogue is back, in the build's order, so a worker never
waits for the embedder. The layout model builds each page's features in Python, holding the GIL, so a parser thread
beside the embedder would gain next to nothing.

How many workers: one per core, up to ``MAX_WORKERS``, each running the layout model on one thread. A page's
features are Python on one core, and the model's tensors are small, so pages side by side beat threads within a
page: two one-thread workers on two cores parse faster than one worker on two threads. While they read, the build
embeds on one thread (``busy``): three single-threaded processes share two cores well, where torch's two threads
each waited for the other whenever a worker held its core. The figures are in docs/benchmarks.md (measured design
choices). Each worker holds a copy of the layout model (about 300 MB).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from pathlib import Path

from pebble import ProcessExpired, ProcessFuture, ProcessPool

from crag.config import cap_threads, cpu_threads
from crag.ingest.base import Catalogue, PageReader, PagesRead, PDFError

PAGES_PER_PART = 8
POLL_SECONDS = 0.2  # how long a cancel waits to be seen while the build waits for a worker

MAX_WORKERS = 4  # past that, another copy of the layout model costs more memory than its pages gain time
_parser: PageReader | None = None  # the worker's parser, made once by _start

Parts = list[tuple[list[int], ProcessFuture]]


def _start(parser: bytes) -> None:
    """A worker's start: its engines run on one thread. The parser is unpickled after the cap is set: that imports
    PyMuPDF, which makes the layout model."""
    global _parser
    cap_threads(1)
    _parser = pickle.loads(parser)


def _catalogue(path: Path) -> Catalogue:
    assert _parser is not None  # _start made it, in every worker
    return _parser.catalogue(path)


def _read(path: Path, pages: Sequence[int]) -> PagesRead:
    assert _parser is not None
    return _parser.read_pages(path, pages)


def workers() -> int:
    return min(cpu_threads(), MAX_WORKERS)


def _parts(pages: int) -> list[list[int]]:
    return [list(range(s, min(s + PAGES_PER_PART, pages + 1))) for s in range(1, pages + 1, PAGES_PER_PART)]


def _pages(pages: Sequence[int]) -> str:
    return f"page {pages[0]}" if len(pages) == 1 else f"pages {pages[0]}-{pages[-1]}"


def _timed_out(path: Path, pages: Sequence[int], timeout: float) -> PDFError:
    if not pages:  # its catalogue: the file could not even be opened in time
        return PDFError(
            f"{path.name}: could not be opened: the parser was still reading its page count and bookmarks after "
            f"{timeout:g} s and was stopped, so this file is left out (the others still build). Print or export the "
            "file to a new PDF and rebuild; if it is only slow to open (a very large file), raise "
            "CRAG_PARSE_PART_TIMEOUT."
        )
    return PDFError(
        f"{path.name}: {_pages(pages)} could not be read: the parser was still on them after {timeout:g} s and was "
        "stopped, so this file is left out (the others still build). If these pages are only slow (large scans read "
        "with OCR), raise CRAG_PARSE_PART_TIMEOUT; otherwise print or export the file to a new PDF, or split those "
        "pages off, and rebuild."
    )


def _died(path: Path, pages: Sequence[int], exc: ProcessExpired) -> PDFError:
    what = f"{_pages(pages)} could not be read" if pages else "could not be opened"
    return PDFError(
        f"{path.name}: {what}: the parser's worker process stopped (exit code {exc.exitcode}; out of memory, or a "
        "crash in MuPDF). Rebuild to try again; if it fails again, print or export the file to a new PDF and rebuild."
    )


class ParseAhead:
    """Every file's catalogue and pages, queued to worker processes; ``parts(path)`` yields a file's in order.

    Use ``ParseAhead.start``, which gives None where the parser cannot go to a worker: a parser without
    ``read_pages`` (MinerU is a server's work), or one that cannot be sent to a process (a test's fake)."""

    def __init__(self, parser: object, paths: Sequence[Path], timeout: float) -> None:
        self._pool = ProcessPool(
            workers(),
            initializer=_start,
            initargs=(pickle.dumps(parser),),
            context=get_context("spawn"),  # not fork: the app and the API build from a thread of a threaded process
        )
        self._timeout = timeout
        self._catalogues = {path: self._pool.schedule(_catalogue, (path,), timeout=timeout) for path in paths}
        self._all: list[ProcessFuture] = list(self._catalogues.values())
        self._unqueued = list(paths)  # files whose parts wait for their catalogue, in the build's order
        self._queued: dict[Path, Parts | BaseException] = {}
        self._opened: dict[Path, Catalogue] = {}
        self._closed = False

    @classmethod
    def start(cls, parser: object, paths: Sequence[Path], timeout: float) -> ParseAhead | None:
        """``timeout``: seconds a worker may spend on one task (a file's catalogue, or a part of its pages) before
        it is stopped and the file fails."""
        if not paths or not hasattr(parser, "read_pages"):
            return None
        try:
            pickle.dumps(parser)
        except Exception:  # noqa: BLE001 - an engine made in this process (a test's fake OCR) stays in it
            return None
        return cls(parser, paths, timeout)

    def catalogue(self, path: Path) -> Catalogue:
        """The file's page count, title and bookmarks, as its worker read them before its pages."""
        return self._opened[path]

    def busy(self) -> bool:
        """Whether the workers still have files to open or pages to read. Once every page is read they are let go,
        their layout models with them, before the end of the build, when the index being written takes the most
        memory."""
        self._queue()
        if not self._unqueued and all(future.done() for future in self._all):
            self.close()
            return False
        return True

    def parts(self, path: Path, waiting: Callable[[], None] = lambda: None) -> Iterator[PagesRead]:
        """The file's parts in page order, as the workers finish them; a task's exception is raised here, a
        ``PDFError`` for one that ran out of time. ``waiting`` is called while a worker is awaited: it may raise
        (a cancelled build). The file's parts not begun are dropped when it fails."""
        while path not in self._queued:
            self._await(self._catalogues[self._unqueued[0]], waiting)
        queued = self._queued.pop(path)
        if isinstance(queued, BaseException):
            raise queued
        try:
            for pages, future in queued:
                self._await(future, waiting)
                exc = future.exception()
                if exc is not None:
                    raise self._failure(path, pages, exc)
                yield future.result()
        finally:
            for _, future in queued:
                if not future.running():  # one in a worker's hands ends in a moment; stopping it costs a restart
                    future.cancel()

    def _queue(self) -> None:
        """The parts of the files whose catalogue is back queued, in the build's order (up to the first file whose
        catalogue is still awaited); a file that cannot be opened has its reason instead."""
        while self._unqueued and self._catalogues[self._unqueued[0]].done():
            path = self._unqueued.pop(0)
            exc = self._catalogues[path].exception()
            if exc is not None:
                self._queued[path] = self._failure(path, [], exc)
            elif not self._pool.active:
                self._queued[path] = BrokenProcessPool("the parse workers stopped")
            else:
                self._opened[path] = self._catalogues[path].result()
                parts = [
                    (p, self._pool.schedule(_read, (path, p), timeout=self._timeout))
                    for p in _parts(self._opened[path].pages)
                ]
                self._all += [future for _, future in parts]
                self._queued[path] = parts

    def _await(self, future: ProcessFuture, waiting: Callable[[], None]) -> None:
        """Until ``future`` is done; the parts of files whose catalogue comes back meanwhile are queued at once."""
        while True:
            self._queue()
            if future.done():
                return
            if not self._pool.active:  # workers died holding no task (at their start): the rest parse here
                raise BrokenProcessPool("the parse workers could not start")
            head = [self._catalogues[self._unqueued[0]]] if self._unqueued else []
            if not wait([future, *head], timeout=POLL_SECONDS, return_when=FIRST_COMPLETED).done:
                waiting()

    def _failure(self, path: Path, pages: Sequence[int], exc: BaseException) -> BaseException:
        """What a task that failed means for its file; no ``pages`` for its catalogue."""
        if isinstance(exc, TimeoutError):  # the pool stopped the worker; a new one has taken the next tasks
            return _timed_out(path, pages, self._timeout)
        if isinstance(exc, ProcessExpired):
            return _died(path, pages, exc)
        return exc

    def close(self) -> None:
        """The workers are stopped now, one in the middle of a task too (SIGTERM, then SIGKILL a few seconds
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
