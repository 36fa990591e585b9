"""Parse -> chunk -> embed, for the files a sync (re)indexes: ``index_files``.

Sequential (the default): each file parsed, then chunked, then embedded; the next one waits.

Pipelined (opt-in): a parser thread reads the files page by page and chunks each page as it comes, into
a bounded queue; this thread embeds the chunks in batches and hands a file to the index once its last
chunk is embedded. On 2 cores it gains little (``python -m crag.bench.build``): 0.81x the sequential
speed at first, 1.03x once the layout parser's threads stopped spinning (``layout_sessions`` in
ingest.pymupdf), because the parser and the embedder each keep both cores busy alone. It stays for
machines with more cores than one stage can use, and the benchmark.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from crag.config import Settings
from crag.errors import BuildCancelled
from crag.ingest.base import Parser, PDFError
from crag.ingest.chunking import Chunker
from crag.models import Embedder, count_tokens
from crag.store import index_text
from crag.types import Block, Chunk, FileResult, OnProgress, ParsedPDF, Progress

EMBED_BATCH = 64  # chunks embedded in one call: enough to sort by length and fill the embedder's batches
QUEUE_PAGES = 16  # pages the parser may run ahead of the embedder: bounds what a slow embedder holds in memory
AddToIndex = Callable[[Sequence[Chunk], Sequence[Sequence[float]]], None]


@dataclass(frozen=True)
class Planned:
    """A file the build parses, with what the manifest records of it."""

    path: Path
    name: str  # relative to the files folder
    hash: str
    size: int = 0
    mtime_ns: int = 0


@dataclass
class Built:
    results: list[FileResult] = field(default_factory=list)
    stages: dict[str, float] = field(default_factory=lambda: {"parse": 0.0, "chunk": 0.0, "embed": 0.0, "write": 0.0})
    pages: int = 0  # pages parsed of the files indexed


def index_files(
    plan: Sequence[Planned],
    parser: Parser,
    embedder: Embedder,
    add: AddToIndex,
    settings: Settings,
    report: OnProgress,
    pipelined: bool = False,
) -> Built:
    """Index the planned files through ``add``; every file gets a result, a failure never stops the others.
    Stage seconds are the time each stage was busy: pipelined, they overlap."""
    if pipelined:
        return _Pipeline(plan, parser, embedder, add, settings, report).run()
    built = Built()
    for index, item in enumerate(plan, start=1):
        _sequential_file(item, index, len(plan), parser, embedder, add, settings, report, built)
    return built


def _chunker(item: Planned, settings: Settings, embedder: Embedder) -> Chunker:
    return Chunker(
        item.name, item.hash, count_tokens, settings.chunk_tokens, settings.chunk_overlap, embedder.max_tokens
    )


def _failure(item: Planned, parser: Parser, exc: Exception, seconds: float, pages: int = 0) -> FileResult:
    error = str(exc) if isinstance(exc, PDFError) else f"{item.name}: could not be parsed ({type(exc).__name__}: {exc})"
    return _record(item, FileResult(item.name, "failed", pages, seconds=seconds, error=error), parser.version)


def _record(item: Planned, result: FileResult, parser_version: str) -> FileResult:
    return replace(result, hash=item.hash, size=item.size, mtime_ns=item.mtime_ns, parser_version=parser_version)


def _indexed(item: Planned, parsed: ParsedPDF, chunks: int, seconds: float) -> FileResult:
    result = FileResult(item.name, "indexed", parsed.pages, chunks, seconds, warnings=parsed.warnings)
    return _record(item, replace(result, parser=parsed.parser), parsed.parser_version)


def _labelled(chunks: Sequence[Chunk], parsed: ParsedPDF) -> list[Chunk]:
    return [replace(c, parser=parsed.parser, parser_version=parsed.parser_version) for c in chunks]


def _no_text(item: Planned) -> PDFError:
    return PDFError(f"{item.name}: no text found to index.")


def _since(start: float) -> float:
    return round(time.perf_counter() - start, 3)


# ---------------------------------------------------------------------------------------------
# One after the other


def _sequential_file(
    item: Planned,
    index: int,
    count: int,
    parser: Parser,
    embedder: Embedder,
    add: AddToIndex,
    settings: Settings,
    report: OnProgress,
    built: Built,
) -> None:
    start = time.perf_counter()

    def on_page(done: int, total: int, stage: str = "parsing") -> None:
        report(Progress(stage, item.name, index, count, done, total))

    report(Progress("parsing", item.name, index, count))
    try:
        parsed = parser.parse(item.path, on_page=on_page)
    except BuildCancelled:
        raise  # the whole build stops; it is not this file's failure
    except Exception as exc:  # noqa: BLE001 - a parser bug on one file must not stop the build
        built.stages["parse"] += _since(start)
        built.results.append(_failure(item, parser, exc, _since(start)))
        return
    built.stages["parse"] += _since(start)
    mark = time.perf_counter()
    chunker = _chunker(item, settings, embedder)
    try:
        chunks = _labelled(chunker.add(parsed.blocks) + chunker.finish(), parsed)
    except Exception as exc:  # noqa: BLE001 - a chunker bug on one file must not stop the build either
        built.results.append(_failure(item, parser, exc, _since(start), parsed.pages))
        return
    built.stages["chunk"] += _since(mark)
    if not chunks:
        built.results.append(_failure(item, parser, _no_text(item), _since(start), parsed.pages))
        return
    mark = time.perf_counter()
    vectors: list[list[float]] = []
    for start_at in range(0, len(chunks), EMBED_BATCH):
        report(Progress("embedding", item.name, index, count, start_at, len(chunks)))
        vectors += embedder.embed_documents([index_text(c) for c in chunks[start_at : start_at + EMBED_BATCH]])
    built.stages["embed"] += _since(mark)
    mark = time.perf_counter()
    add(chunks, vectors)
    built.stages["write"] += _since(mark)
    built.results.append(_indexed(item, parsed, len(chunks), _since(start)))
    built.pages += parsed.pages


# ---------------------------------------------------------------------------------------------
# Pipelined


class _Stopped(Exception):
    """The building thread stopped the parser thread (it failed, or the build was cancelled)."""


class _Forward:
    """Progress from two threads as one bar that never moves back. An event behind the last one shown is
    replaced by that one, and still passed on: a cancelled build stops at the next event, whichever thread."""

    def __init__(self, report: OnProgress) -> None:
        self._report = report
        self._lock = threading.Lock()
        self._last: Progress | None = None

    def __call__(self, progress: Progress) -> None:
        with self._lock:
            if self._last is not None and progress.fraction < self._last.fraction:
                progress = self._last
            self._last = progress
            self._report(progress)


@dataclass
class _File:
    item: Planned
    index: int
    chunks: list[Chunk] = field(default_factory=list)
    vectors: list[Any] = field(default_factory=list)
    parsed: ParsedPDF | None = None
    seconds: float = 0.0


class _Pipeline:
    def __init__(
        self,
        plan: Sequence[Planned],
        parser: Parser,
        embedder: Embedder,
        add: AddToIndex,
        settings: Settings,
        report: OnProgress,
    ) -> None:
        self.plan, self.parser, self.embedder, self.add, self.settings = plan, parser, embedder, add, settings
        self.report = _Forward(report)
        self.events: queue.Queue[tuple] = queue.Queue(maxsize=QUEUE_PAGES)
        self.stop = threading.Event()
        self.built = Built()
        self.files: dict[int, _File] = {}
        self.waiting: list[tuple[_File, Chunk]] = []  # chunked, not embedded yet
        self.parsed_all = False

    # -- the parser thread -------------------------------------------------------------------

    def _put(self, event: tuple) -> None:
        while True:
            try:
                self.events.put(event, timeout=0.1)
                return
            except queue.Full:
                if self.stop.is_set():
                    raise _Stopped from None

    def _parse_all(self) -> None:
        try:
            for index, item in enumerate(self.plan, start=1):
                self._parse_file(index, item)
            self._put(("end",))
        except _Stopped:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the building thread, which raises it
            with contextlib.suppress(_Stopped):
                self._put(("error", exc))

    def _parse_file(self, index: int, item: Planned) -> None:
        start = time.perf_counter()
        count = len(self.plan)
        chunker = _chunker(item, self.settings, self.embedder)
        aside = [0.0]  # seconds of the parse spent chunking and waiting for the embedder

        def on_page(done: int, total: int, stage: str = "parsing") -> None:
            if self.stop.is_set():
                raise _Stopped
            self.report(Progress(stage, item.name, index, count, done, total))

        def on_blocks(blocks: Sequence[Block]) -> None:
            mark = time.perf_counter()
            chunks = chunker.add(blocks)
            self.built.stages["chunk"] += time.perf_counter() - mark
            if chunks:
                self._put(("chunks", index, chunks))
            aside[0] += time.perf_counter() - mark

        self._put(("file", index, item))
        self.report(Progress("parsing", item.name, index, count))
        try:
            parsed = self.parser.parse_into(item.path, on_blocks, on_page=on_page)
        except (BuildCancelled, _Stopped):
            raise
        except Exception as exc:  # noqa: BLE001 - a parser bug on one file must not stop the build
            self.built.stages["parse"] += time.perf_counter() - start - aside[0]
            self._put(("failed", index, _failure(item, self.parser, exc, _since(start))))
            return
        self.built.stages["parse"] += time.perf_counter() - start - aside[0]
        mark = time.perf_counter()
        rest = chunker.finish()
        self.built.stages["chunk"] += time.perf_counter() - mark
        if rest:
            self._put(("chunks", index, rest))
        self._put(("parsed", index, parsed, _since(start)))

    # -- this thread -------------------------------------------------------------------------

    def run(self) -> Built:
        thread = threading.Thread(target=self._parse_all, name="crag-parse", daemon=True)
        thread.start()
        try:
            while not self.parsed_all:
                self._take(self.events.get())
                while not self.parsed_all:  # whatever else is ready, without waiting
                    try:
                        self._take(self.events.get_nowait())
                    except queue.Empty:
                        break
                if len(self.waiting) >= EMBED_BATCH:
                    self._embed(self.waiting[:EMBED_BATCH])
                self._hand_over()
            while self.waiting:  # the parser is done: the last chunks, with their progress
                self._embed(self.waiting[:EMBED_BATCH], tail=True)
                self._hand_over()
        finally:
            self.stop.set()
            thread.join(timeout=5)  # it stops at its next page; it never writes, so no need to wait longer
        return self.built

    def _take(self, event: tuple) -> None:
        kind = event[0]
        if kind == "error":
            raise event[1]
        if kind == "end":
            self.parsed_all = True
        elif kind == "file":
            self.files[event[1]] = _File(event[2], event[1])
        elif kind == "chunks":
            file = self.files[event[1]]
            file.chunks += event[2]
            self.waiting += [(file, chunk) for chunk in event[2]]
        elif kind == "failed":
            self.built.results.append(event[2])
            file = self.files.pop(event[1])
            self.waiting = [(f, c) for f, c in self.waiting if f is not file]
        elif kind == "parsed":
            file = self.files[event[1]]
            file.parsed, file.seconds = event[2], event[3]

    def _embed(self, batch: list[tuple[_File, Chunk]], tail: bool = False) -> None:
        if tail:
            file = batch[0][0]
            done = len(file.vectors)
            self.report(Progress("embedding", file.item.name, file.index, len(self.plan), done, len(file.chunks)))
        mark = time.perf_counter()
        vectors = self.embedder.embed_documents([index_text(chunk) for _, chunk in batch])
        self.built.stages["embed"] += time.perf_counter() - mark
        for (file, _), vector in zip(batch, vectors, strict=True):
            file.vectors.append(vector)
        del self.waiting[: len(batch)]

    def _hand_over(self) -> None:
        """Files parsed whose every chunk is embedded go to the index, in order."""
        for index in sorted(self.files):
            file = self.files[index]
            if file.parsed is None or len(file.vectors) < len(file.chunks):
                return
            del self.files[index]
            if not file.chunks:
                failed = _failure(file.item, self.parser, _no_text(file.item), file.seconds, file.parsed.pages)
                self.built.results.append(failed)
                continue
            mark = time.perf_counter()
            self.add(_labelled(file.chunks, file.parsed), file.vectors)
            self.built.stages["write"] += time.perf_counter() - mark
            self.built.results.append(_indexed(file.item, file.parsed, len(file.chunks), file.seconds))
            self.built.pages += file.parsed.pages
