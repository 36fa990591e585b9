"""Parse -> chunk -> embed, for the files a sync (re)indexes: ``index_files``.

Every file takes one path: its parse is a stream of parts in page order, each chunked as it comes. With PyMuPDF,
worker processes open every file and parse its pages ahead (``crag.ingest.workers``), however few, and the parts are
the ones they hand back, each part's chunks embedded while the workers read the next; a file or part a worker is
stuck on fails its file alone, and a cancel reaches the build while it waits for a worker. A parser that cannot go
to a worker (MinerU's, a server's work) parses the file in this process, a stream of one part, embedded once it is
chunked; so do the files left when the workers die. With workers the stages overlap: "parse" is the time from a
file's start until its last page came back, chunking and embedding the first pages meanwhile, so pages per parse
second stay a parse rate."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar, cast

import pymupdf

from crag.config import Settings
from crag.errors import BuildCancelled
from crag.ingest.base import Catalogue, PageReader, PagesRead, Parser, PDFError
from crag.ingest.chunking import Chunker
from crag.ingest.workers import ParseAhead
from crag.models import Embedder, count_tokens
from crag.store import index_text
from crag.types import Block, Chunk, FileResult, OnProgress, ParsedPDF, Progress

EMBED_BATCH = 64  # chunks embedded in one call: enough to sort by length and fill the embedder's batches
AddToIndex = Callable[[Sequence[Chunk], Sequence[Sequence[float]]], None]
_T = TypeVar("_T")


@dataclass(kw_only=True, frozen=True)
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
    # So far, for the build's time left (``Progress``): pages to read, read, given to the chunker; passages made and
    # embedded. A file that fails is counted as read as far as it was.
    pages_total: int = 0
    pages_read: int = 0
    pages_chunked: int = 0
    passages: int = 0
    embedded: int = 0


@dataclass(kw_only=True, frozen=True)
class BuildContext:
    """What every file of one build shares: its parser, embedder and index, where progress goes, and what is built."""

    parser: Parser
    embedder: Embedder
    add: AddToIndex
    settings: Settings
    report: OnProgress
    count: int  # files planned
    built: Built = field(default_factory=Built)

    def say(self, progress: Progress) -> None:
        """Report where the build is, with its counts so far."""
        b = self.built
        self.report(
            replace(
                progress,
                pages_total=b.pages_total,
                pages_read=b.pages_read,
                passages=b.passages,
                pages_chunked=b.pages_chunked,
                embedded=b.embedded,
                embed_seconds=b.stages["embed"],
            )
        )

    def timed(self, stage: str, work: Callable[..., _T], *args: object) -> _T:
        """``work(*args)``, its seconds added to the stage's."""
        mark = time.perf_counter()
        done = work(*args)
        self.built.stages[stage] += _since(mark)
        return done


PAGE_COUNT_WAIT = 5.0  # seconds a build waits at most for its files' page counts, for its time left


def index_files(
    plan: Sequence[Planned],
    parser: Parser,
    embedder: Embedder,
    add: AddToIndex,
    settings: Settings,
    report: OnProgress,
) -> Built:
    """Index the planned files through ``add``; every file gets a result, a failure never stops the others."""
    ctx = BuildContext(parser=parser, embedder=embedder, add=add, settings=settings, report=report, count=len(plan))
    ahead = ParseAhead.start(parser, [item.path for item in plan], settings.parse_part_timeout)
    # The pages to read, for the time left: as the workers count them (a PDF that hangs MuPDF hangs a worker, never
    # the build), or here when no worker reads them (MinerU parses here anyway). Corrected as each file is read.
    counts = ahead.page_counts(PAGE_COUNT_WAIT) if ahead is not None else {}
    planned = [counts[item.path] if item.path in counts else _page_count(item.path, ahead) for item in plan]
    ctx.built.pages_total = sum(planned)
    try:
        for index, item in enumerate(plan, start=1):
            before = ctx.built.pages_read
            if ahead is not None and not _index_file(ctx, item, index, _FromWorkers(ctx, item, index, ahead)):
                _workers_done(ahead, embedder)  # the workers died: this file and the rest parse here
                ahead = None
                ctx.built.pages_read = before  # its pages are read again
            if ahead is None:
                _index_file(ctx, item, index, _InProcess(ctx, item, index))
            ctx.built.pages_total += ctx.built.pages_read - before - planned[index - 1]  # as read, failed or not
            ctx.say(
                Progress(
                    stage="finished",
                    file=item.name,
                    file_index=index,
                    file_count=len(plan),
                    result=ctx.built.results[-1],
                )
            )
    finally:
        if ahead is not None:
            _workers_done(ahead, embedder)
    return ctx.built


def _workers_done(ahead: ParseAhead, embedder: Embedder) -> None:
    """The workers let go (``ParseAhead.close``), and the embedder on every core again (it embeds on one while they
    read): for the files left, when they died, and for the questions to come, however the build ended."""
    ahead.close()
    embedder.use_threads()


def _page_count(path: Path, ahead: ParseAhead | None) -> int:
    """The file's pages, for the build's time left, where no worker counts them; 0 where the workers have not yet
    (the file is counted once it is read), or when it cannot be opened (its parse says why)."""
    if ahead is not None:
        return 0
    try:
        with pymupdf.open(path) as doc:
            return int(doc.page_count)
    except Exception:  # noqa: BLE001 - only an estimate
        return 0


def _chunker(item: Planned, ctx: BuildContext) -> Chunker:
    settings = ctx.settings
    return Chunker(
        item.name, item.hash, count_tokens, settings.chunk_tokens, settings.chunk_overlap, ctx.embedder.max_tokens
    )


def _failure(item: Planned, parser: Parser, exc: Exception, seconds: float, pages: int = 0) -> FileResult:
    error = str(exc) if isinstance(exc, PDFError) else f"{item.name}: could not be parsed ({type(exc).__name__}: {exc})"
    return _record(
        item, FileResult(file=item.name, status="failed", pages=pages, seconds=seconds, error=error), parser.version
    )


def _record(item: Planned, result: FileResult, parser_version: str) -> FileResult:
    return replace(result, hash=item.hash, size=item.size, mtime_ns=item.mtime_ns, parser_version=parser_version)


def _indexed(item: Planned, parsed: ParsedPDF, opened: Catalogue, chunks: int, seconds: float) -> FileResult:
    result = FileResult(
        file=item.name,
        status="indexed",
        pages=parsed.pages,
        chunks=chunks,
        seconds=seconds,
        warnings=parsed.warnings,
        ocr_pages=parsed.ocr_pages,
        title=opened.title,
        outline=opened.outline,
    )
    return _record(item, replace(result, parser=parsed.parser), parsed.parser_version)


def _labelled(chunks: Sequence[Chunk], parsed: ParsedPDF) -> list[Chunk]:
    return [replace(c, parser=parsed.parser, parser_version=parsed.parser_version) for c in chunks]


def _no_text(item: Planned) -> PDFError:
    return PDFError(f"{item.name}: no text found to index.")


def _since(start: float) -> float:
    return round(time.perf_counter() - start, 3)


class _WorkersGone(Exception):
    """The parse workers died (killed, or out of memory): this file and the rest parse in this process."""


class _Parse:
    """One file's parse as a stream of parts in page order, each a tuple of blocks, then ``parsed()``, the file they
    make. ``pages``: the pages read so far; ``seconds``: from the first part asked for until the last came back, or
    the parse failed. ``ahead``: the workers reading the next parts meanwhile, if any."""

    ahead: ParseAhead | None = None

    def __init__(self, ctx: BuildContext, item: Planned, index: int) -> None:
        self.ctx, self.item, self.index = ctx, item, index
        self.pages = 0
        self.seconds = 0.0
        self._read = 0  # pages said read, added to the build's count
        self._shown = Progress(stage="parsing", file=item.name, file_index=index, file_count=ctx.count)

    def __iter__(self) -> Iterator[tuple[Block, ...]]:
        raise NotImplementedError

    def parsed(self) -> ParsedPDF:
        raise NotImplementedError

    def catalogue(self) -> Catalogue:
        """The file's title and bookmarks (and page count), once it is parsed."""
        raise NotImplementedError

    def _say(self, stage: str, done: int, total: int) -> None:
        """A page on the bar; the last said is kept, to be said again while the next part is awaited."""
        if stage == "parsing" and done > self._read:
            self.ctx.built.pages_read += done - self._read
            self._read = done
        self._shown = Progress(
            stage=stage,
            file=self.item.name,
            file_index=self.index,
            file_count=self.ctx.count,
            page=done,
            page_count=total,
        )
        self.ctx.say(self._shown)


class _InProcess(_Parse):
    """The file parsed in this process: a stream of one part, the whole file, its pages on the bar as they are read."""

    _parsed: ParsedPDF

    def __iter__(self) -> Iterator[tuple[Block, ...]]:
        start = time.perf_counter()
        try:
            self._parsed = self.ctx.parser.parse(self.item.path, on_page=self._say_page)
        finally:
            self.seconds = _since(start)
        self.pages = self._parsed.pages
        yield self._parsed.blocks

    def parsed(self) -> ParsedPDF:
        return self._parsed

    def catalogue(self) -> Catalogue:
        """Read here, as the file was: only a parser that cannot go to a worker, or a build whose workers died."""
        from crag.ingest.pymupdf import read_outline  # loaded already: MinerU's parser falls back on PyMuPDF's

        try:
            with pymupdf.open(self.item.path) as doc:
                title, outline = read_outline(doc)
        except Exception:  # noqa: BLE001 - an outline only helps; the parser has read the file already
            return Catalogue(pages=self._parsed.pages)
        return Catalogue(pages=self._parsed.pages, title=title, outline=outline)

    def _say_page(self, done: int, total: int, stage: str = "parsing") -> None:
        self._say(stage, done, total)


class _FromWorkers(_Parse):
    """The file's parts as the workers hand them back, each part's pages on the bar when it comes."""

    ahead: ParseAhead

    def __init__(self, ctx: BuildContext, item: Planned, index: int, ahead: ParseAhead) -> None:
        super().__init__(ctx, item, index)
        self.ahead = ahead
        self.parts: list[PagesRead] = []

    def __iter__(self) -> Iterator[tuple[Block, ...]]:
        start = time.perf_counter()
        try:
            # While a part is awaited the progress is said again: a cancelled build raises there, not after the part.
            for part in self.ahead.parts(self.item.path, waiting=lambda: self.ctx.say(self._shown)):
                self.seconds = _since(start)
                self.parts.append(part)
                self.pages += len(part.stages)
                self._show(part)
                yield part.blocks
        except BrokenProcessPool as exc:
            raise _WorkersGone from exc
        except Exception:
            self.seconds = _since(start)
            raise

    def parsed(self) -> ParsedPDF:
        # ParseAhead.start takes parsers that read pages apart only
        return cast("PageReader", self.ctx.parser).parsed(self.item.path, self.parts)

    def catalogue(self) -> Catalogue:
        return self.ahead.catalogue(self.item.path)

    def _show(self, part: PagesRead) -> None:
        """The part's pages, as parsing in this process says them: a page OCR read as "ocr", then as parsed."""
        for n, stage in enumerate(part.stages, start=self.pages - len(part.stages) + 1):
            if stage == "ocr":
                self._say("ocr", n, part.page_count)
            self._say("parsing", n, part.page_count)


def _index_file(ctx: BuildContext, item: Planned, index: int, stream: _Parse) -> bool:
    """One file from its parse's stream of parts: each part is chunked as it comes and, while workers read the next
    parts, its chunks embedded meanwhile. False, with nothing recorded, when the workers are gone."""
    start, built = time.perf_counter(), ctx.built
    ctx.say(Progress(stage="parsing", file=item.name, file_index=index, file_count=ctx.count))
    chunker, chunks, chunked = _chunker(item, ctx), [], 0
    vectors: list[list[float]] = []
    try:
        for blocks in stream:
            chunks += _chunked(ctx, chunker.add, blocks)
            built.pages_chunked, chunked = built.pages_chunked + stream.pages - chunked, stream.pages
            if stream.ahead is not None:
                vectors += _embed(ctx, chunks, len(vectors), stream.ahead)
        chunks += _chunked(ctx, chunker.finish)
        parsed = stream.parsed()
    except BuildCancelled:
        raise  # the whole build stops; it is not this file's failure
    except _WorkersGone:
        return False
    except Exception as exc:  # noqa: BLE001 - a parser or chunker bug on one file must not stop the build
        built.stages["parse"] += stream.seconds
        built.results.append(_failure(item, ctx.parser, exc, _since(start), stream.pages))
        return True
    built.stages["parse"] += stream.seconds
    if not chunks:
        built.results.append(_failure(item, ctx.parser, _no_text(item), _since(start), parsed.pages))
        return True

    def say(at: int) -> None:
        ctx.say(
            Progress(
                stage="embedding",
                file=item.name,
                file_index=index,
                file_count=ctx.count,
                page=at,
                page_count=len(chunks),
            )
        )

    vectors += _embed(ctx, chunks, len(vectors), stream.ahead, say)
    ctx.timed("write", ctx.add, _labelled(chunks, parsed), vectors)
    built.results.append(_indexed(item, parsed, stream.catalogue(), len(chunks), _since(start)))
    built.pages += parsed.pages
    return True


def _chunked(ctx: BuildContext, work: Callable[..., list[Chunk]], *args: object) -> list[Chunk]:
    made = ctx.timed("chunk", work, *args)
    ctx.built.passages += len(made)
    return made


def _embed(
    ctx: BuildContext,
    chunks: Sequence[Chunk],
    embedded: int,
    ahead: ParseAhead | None,
    say: Callable[[int], None] | None = None,
) -> list[list[float]]:
    """Vectors of the chunks past ``embedded``, in batches of ``EMBED_BATCH``. While the workers read (no ``say``):
    whole batches only (but the build's first), under the parse's progress. Once the file is parsed: every batch left,
    each said before it is embedded. With workers, on one thread while they read (see ``crag.ingest.workers``), on
    every core after."""
    vectors: list[list[float]] = []
    # The build's first passages are embedded as soon as they are made, a whole batch or not: from then on its time left
    # has an embedding rate to go by (``crag.jobs.Pace``).
    least = 1 if say or not ctx.built.embedded else EMBED_BATCH
    while len(chunks) - embedded - len(vectors) >= least:
        at = embedded + len(vectors)
        if say is not None:
            say(at)
        if ahead is not None:
            ctx.embedder.use_threads(1 if ahead.busy() else 0)
        batch = ctx.timed("embed", ctx.embedder.embed_documents, [index_text(c) for c in chunks[at : at + EMBED_BATCH]])
        vectors += batch
        ctx.built.embedded += len(batch)
    return vectors
