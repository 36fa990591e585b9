"""Parse -> chunk -> embed, for the files a sync (re)indexes: ``index_files``.

Each file is parsed, then chunked, then embedded; the next one waits. The stages do not overlap: on 2 cores the
parser and the embedder each keep both cores busy alone, so a parser thread feeding the embedder gains about 3%.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from crag.config import Settings
from crag.errors import BuildCancelled
from crag.ingest.base import Parser, PDFError
from crag.ingest.chunking import Chunker
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
    for index, item in enumerate(plan, start=1):
        _index_file(item, index, len(plan), parser, embedder, add, settings, report, built)
        report(Progress("finished", item.name, index, len(plan), result=built.results[-1]))
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
    result = FileResult(
        item.name, "indexed", parsed.pages, chunks, seconds, warnings=parsed.warnings, ocr_pages=parsed.ocr_pages
    )
    return _record(item, replace(result, parser=parsed.parser), parsed.parser_version)


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
