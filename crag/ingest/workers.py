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

How many workers: one to open the files and read a build of few pages (``FEW_PAGES``), kept for the next build
(``KEEP_SECONDS``), since a worker's start costs more than a few pages take. Past that, one per core, up to
``MAX_WORKERS``, each running the layout model on one thread, let go once every page is read. A page's features are
Python on one core, and the model's tensors are small, so pages side by side beat threads within a page: two
one-thread workers on two cores parse faster than one worker on two threads. While they read, the build
embeds on one thread (``busy``): three single-threaded processes share two cores well, where torch's two threads
each waited for the other whenever a worker held its core. The figures are in docs/benchmarks.md (measured design
choices). Each worker holds a copy of the layout model (300 to 500 MB once it has read a page).
"""

from __future__ import annotations

import pickle
import threading
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
# A build of fewer pages reads them on one worker, and leaves it to the next build for KEEP_SECONDS: a worker's start
# (PyMuPDF and its layout model, 2 to 3 s) costs more than a small build's pages take. A build of more pages has a
# worker per core, let go once its pages are read, before the index being written takes the most memory.
FEW_PAGES = 24
KEEP_SECONDS = 120.0
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


def _new_pool(parser: bytes) -> ProcessPool:
    return ProcessPool(
        1,  # one to open the files and read a small build's pages; ParseAhead adds the others when there are more
        initializer=_start,
        initargs=(parser,),
        context=get_context("spawn"),  # not fork: the app and the API build from a thread of a threaded process
    )


def _grow(pool: ProcessPool, size: int) -> None:
    """Have ``size`` workers in the pool: pebble starts the ones missing within a tenth of a second, and they take
    tasks from the same queue. Its pool has no public way to grow; its version is pinned (requirements.txt) and
    tests/test_build_speed.py checks that the workers come."""
    pool._context.workers = size
    pool._pool_manager.worker_manager.workers_number = size


def _stop(pool: ProcessPool) -> None:
    """Its workers stopped now, one in the middle of a task too (SIGTERM, then SIGKILL a few seconds later)."""
    pool.stop()
    pool.join()


class _Kept:
    """The pool a small build leaves to the next build with the same parser, until ``KEEP_SECONDS`` pass."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ProcessPool | None = None
        self._parser = b""
        self._timer: threading.Timer | None = None

    def take(self, parser: bytes) -> ProcessPool:
        """The kept pool if it serves this parser and is alive, else a new one."""
        with self._lock:
            pool, same = self._pool, self._parser == parser
            self._forget()
        if pool is not None and same and pool.active:
            return pool
        if pool is not None:  # another parser's (the settings changed), or its worker died
            _stop(pool)
        return _new_pool(parser)

    def keep(self, pool: ProcessPool, parser: bytes) -> None:
        timer = threading.Timer(KEEP_SECONDS, self.let_go, args=(pool,))
        timer.daemon = True
        with self._lock:
            before = self._pool
            self._forget()
            self._pool, self._parser, self._timer = pool, parser, timer
        timer.start()
        if before is not None:  # another build's, kept meanwhile: one is enough
            _stop(before)

    def let_go(self, pool: ProcessPool | None = None) -> None:
        """The kept pool stopped (only if it is still ``pool``, when given)."""
        with self._lock:
            kept = self._pool
            if kept is None or (pool is not None and kept is not pool):
                return
            self._forget()
        _stop(kept)

    def _forget(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._pool, self._parser, self._timer = None, b"", None


_kept = _Kept()


def let_go() -> None:
    """Stop the worker a small build left for the next one, if any: a test's way to see every process gone."""
    _kept.let_go()


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

    def __init__(self, parser: bytes, paths: Sequence[Path], timeout: float) -> None:
        self._parser = parser  # pickled, as the workers receive it
        self._pool = _kept.take(parser)
        self._pages = 0  # of the files opened so far
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
            sent = pickle.dumps(parser)
        except Exception:  # noqa: BLE001 - an engine made in this process (a test's fake OCR) stays in it
            return None
        return cls(sent, paths, timeout)

    def catalogue(self, path: Path) -> Catalogue:
        """The file's page count, title and bookmarks, as its worker read them before its pages."""
        return self._opened[path]

    def page_counts(self, within: float) -> dict[Path, int]:
        """The page count of each file whose catalogue is back, waiting up to ``within`` seconds for them all: the
        catalogues are the workers' first tasks, so they come back at once unless a file hangs or they start slowly."""
        futures = list(self._catalogues.items())
        wait([f for _, f in futures], timeout=within)
        return {
            path: future.result().pages
            for path, future in futures
            if future.done() and not future.cancelled() and future.exception() is None
        }

    def busy(self) -> bool:
        """Whether the workers still have files to open or pages to read. Once every page is read they are let go
        (``close``), a big build's layout models with them, before the end of the build, when the index being written
        takes the most memory."""
        if self._closed:
            return False
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
                few = self._pages < FEW_PAGES
                self._pages += self._opened[path].pages
                if few and self._pages >= FEW_PAGES:
                    _grow(self._pool, workers())
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
        """The workers let go: kept for the next build when this one read few pages and left none of them at work,
        else stopped now, one in the middle of a task too: a cancelled build, or one whose worker hangs on a page,
        leaves no process behind."""
        if self._closed:
            return
        self._closed = True
        idle = not self._unqueued and all(future.done() for future in self._all)
        if idle and self._pages < FEW_PAGES and self._pool.active:
            _kept.keep(self._pool, self._parser)
            return
        _stop(self._pool)
        for future in self._all:
            future.cancel()

    def __enter__(self) -> ParseAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
