"""Parse -> chunk -> embed, for the files a sync (re)indexes: ``index_files``.

With PyMuPDF and enough pages, worker processes parse every file's pages ahead (``crag.ingest.workers``) while
this process chunks and embeds the parts they hand back, in order; a part a worker is stuck on fails its file alone,
and a cancel reaches the build while it waits for a part. Otherwise each file is parsed, then chunked,
then embedded, and the next one waits. With workers the stages overlap: "parse" is the time from a file's start
until its last page came back, embedding the first pages meanwhile, so pages per parse second stay a parse rate.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import cast

import pymupdf

from crag.config import Settings
from crag.errors import BuildCancelled
from crag.ingest.base import PageReader, Parser, PDFError
from crag.ingest.chunking import Chunker
from crag.ingest.workers import ParseAhead
from crag.models import Embedder, count_tokens
from crag.store import index_text
from crag.types import Chunk, FileResult, OnProgress, ParsedPDF, Progress

EMBED_BATCH = 64  # chunks embedded in one call: enough to sort by length and fill the embedder's batches
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
) -> Built:
    """Index the planned files through ``add``; every file gets a result, a failure never stops the others."""
    built = Built()
    ahead = ParseAhead.start(parser, [item.path for item in plan], settings.parse_part_timeout)
    try:
        for index, item in enumerate(plan, start=1):
            if ahead is not None and not _index_file_ahead(
                item, index, len(plan), ahead, parser, embedder, add, settings, report, built
            ):
                ahead.close()  # a worker died (killed, or out of memory): this file and the rest parse here
                ahead = None
            if ahead is None:
                _index_file(item, index, len(plan), parser, embedder, add, settings, report, built)
            report(Progress("finished", item.name, index, len(plan), result=built.results[-1]))
    finally:
        if ahead is not None:
            ahead.close()
            embedder.use_threads()  # every core again, for the questions to come, however the build ended
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
    title, outline = read_outline(item.path)
    result = FileResult(
        item.name,
        "indexed",
        parsed.pages,
        chunks,
        seconds,
        warnings=parsed.warnings,
        ocr_pages=parsed.ocr_pages,
        title=title,
        outline=outline,
    )
    return _record(item, replace(result, parser=parsed.parser), parsed.parser_version)


OUTLINE_LEVELS = 2  # bookmark levels kept: an overview lists the top ones
OUTLINE_KEPT = 300
_NO_TITLE = re.compile(r"^(?:untitled|microsoft word|title)\b|\.(?:docx?|tex|dvi|pdf|odt|indd)$", re.IGNORECASE)


def read_outline(path: Path) -> tuple[str, tuple[tuple[int, str, int], ...]]:
    """A PDF's own title and the top levels of its bookmarks, from its catalogue (no page is read); nothing when
    it has none or they cannot be read: questions about the whole document then use the headings found."""
    try:
        with pymupdf.open(path) as doc:
            toc, title = doc.get_toc(simple=True), (doc.metadata or {}).get("title") or ""
    except Exception:  # noqa: BLE001 - an outline only helps; the parser has read the file already
        return "", ()
    title = " ".join(title.split())
    outline = tuple(
        (int(level), " ".join(str(heading).split()), int(page))
        for level, heading, page, *_ in toc
        if level <= OUTLINE_LEVELS and page > 0 and str(heading).strip()
    )
    return ("" if len(title) < 3 or _NO_TITLE.search(title) else title[:200]), outline[:OUTLINE_KEPT]


def _labelled(chunks: Sequence[Chunk], parsed: ParsedPDF) -> list[Chunk]:
    return [replace(c, parser=parsed.parser, parser_version=parsed.parser_version) for c in chunks]


def _no_text(item: Planned) -> PDFError:
    return PDFError(f"{item.name}: no text found to index.")


def _since(start: float) -> float:
    return round(time.perf_counter() - start, 3)


def _index_file(
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


def _index_file_ahead(
    item: Planned,
    index: int,
    count: int,
    ahead: ParseAhead,
    parser: Parser,
    embedder: Embedder,
    add: AddToIndex,
    settings: Settings,
    report: OnProgress,
    built: Built,
) -> bool:
    """One file from the workers' parts: each part's chunks are embedded while the workers read the next parts.
    False, with nothing recorded, when the workers are gone."""
    start = time.perf_counter()
    shown = [Progress("parsing", item.name, index, count)]

    def show(progress: Progress) -> None:
        shown[0] = progress
        report(progress)

    show(shown[0])
    chunker, parts, chunks = _chunker(item, settings, embedder), [], []
    vectors: list[list[float]] = []
    try:
        # While a part is awaited the progress is said again: a cancelled build raises there, not after the part.
        for part in ahead.parts(item.path, waiting=lambda: report(shown[0])):
            parts.append(part)
            done = sum(len(p.stages) for p in parts) - len(part.stages)
            for n, stage in enumerate(part.stages, start=done + 1):
                if stage == "ocr":  # the bar says which pages took OCR's seconds, as parsing in this process does
                    show(Progress("ocr", item.name, index, count, n, part.page_count))
                show(Progress("parsing", item.name, index, count, n, part.page_count))
            chunks += chunker.add(part.blocks)
            vectors += _embed_ready(chunks, len(vectors), embedder, built, ahead)
        built.stages["parse"] += _since(start)
        chunks += chunker.finish()
        parsed = cast("PageReader", parser).parsed(item.path, parts)  # ParseAhead takes parsers that read pages only
    except BuildCancelled:
        raise
    except BrokenProcessPool:
        return False
    except Exception as exc:  # noqa: BLE001 - a parser or chunker bug on one file must not stop the build
        built.results.append(_failure(item, parser, exc, _since(start), sum(len(p.stages) for p in parts)))
        return True
    if not chunks:
        built.results.append(_failure(item, parser, _no_text(item), _since(start), parsed.pages))
        return True
    report(Progress("embedding", item.name, index, count, len(vectors), len(chunks)))
    vectors += _embed_ready(chunks, len(vectors), embedder, built, ahead, final=True)
    mark = time.perf_counter()
    add(_labelled(chunks, parsed), vectors)
    built.stages["write"] += _since(mark)
    built.results.append(_indexed(item, parsed, len(chunks), _since(start)))
    built.pages += parsed.pages
    return True


def _embed_ready(
    chunks: Sequence[Chunk], embedded: int, embedder: Embedder, built: Built, ahead: ParseAhead, final: bool = False
) -> list[list[float]]:
    """Vectors of the chunks past ``embedded``, in batches of ``EMBED_BATCH``; the last short batch only when final.
    On one thread while the workers read (see ``crag.ingest.workers``), on every core once they are done."""
    mark = time.perf_counter()
    vectors: list[list[float]] = []
    while len(chunks) - embedded - len(vectors) >= (1 if final else EMBED_BATCH):
        at = embedded + len(vectors)
        texts = [index_text(c) for c in chunks[at : at + EMBED_BATCH]]
        embedder.use_threads(1 if ahead.busy() else 0)
        vectors += embedder.embed_documents(texts)
    built.stages["embed"] += _since(mark)
    return vectors
