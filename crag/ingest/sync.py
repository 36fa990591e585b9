"""The build: Files/ -> layout blocks -> chunks -> a new index generation.

``sync`` is incremental: new files are parsed, changed files re-parsed, deleted files dropped,
and unchanged files carried over from the active generation at the cost of a hash. Every file
gets a status and, when it fails, a reason; one bad file never stops the others.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from crag.config import Settings
from crag.errors import BuildCancelled, CragError
from crag.ingest.base import Parser, PDFError
from crag.ingest.chunking import chunk_blocks
from crag.models import Embedder, count_tokens
from crag.store import RebuildNeeded, Store, index_text, open_store
from crag.types import FileResult, OnProgress, Progress

EMBED_BATCH = 64


@dataclass(frozen=True)
class SyncReport:
    files: list[FileResult] = field(default_factory=list)
    total_chunks: int = 0
    pages_per_second: float = 0.0
    seconds: float = 0.0
    generation: str = ""
    stage_seconds: dict[str, float] = field(default_factory=dict)  # parse, chunk, embed, write

    def to_json(self) -> dict[str, Any]:
        return {
            "files": [
                {k: v for k, v in asdict(f).items() if k in ("file", "status", "pages", "chunks", "seconds", "error")}
                for f in self.files
            ],
            "total_chunks": self.total_chunks,
            "pages_per_second": self.pages_per_second,
        }


def chunking_settings(settings: Settings) -> dict[str, Any]:
    return {"chunk_tokens": settings.chunk_tokens, "chunk_overlap": settings.chunk_overlap}


def choose_parser(settings: Settings, name: str | None = None) -> Parser:
    """``CRAG_PARSER``: MinerU when configured and reachable (auto) or asked for, else PyMuPDF.
    PyMuPDF reads pages without a usable text layer with OCR (``CRAG_OCR``), MinerU's fallback too."""
    from crag.ingest.ocr import PageOCR
    from crag.ingest.pymupdf import PyMuPDFParser

    choice = name or settings.parser
    ocr = PageOCR(settings.ocr, settings.ocr_dpi) if settings.ocr != "off" else None
    fallback = PyMuPDFParser(settings.max_pages, ocr)
    if choice == "pymupdf":
        return fallback
    configured = settings.mineru_url or settings.mineru_model_path
    if choice == "mineru" and not configured:
        raise CragError("CRAG_PARSER=mineru needs CRAG_MINERU_URL (a MinerU server) or CRAG_MINERU_MODEL_PATH.")
    if not configured:
        return fallback
    from crag.ingest.mineru import MinerUParser, mineru_reachable

    if settings.mineru_url and not mineru_reachable(settings.mineru_url):
        if choice == "mineru":
            raise CragError(f"MinerU is not reachable at {settings.mineru_url}: start the server or unset CRAG_PARSER.")
        return fallback
    return MinerUParser(
        server_url=settings.mineru_url,
        model_path=settings.mineru_model_path,
        fallback=fallback,
        timeout=settings.request_timeout,
    )


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def scan(files_dir: Path) -> list[Path]:
    """Every file under the folder, hidden files and folders excluded, in a stable order."""
    if not files_dir.is_dir():
        return []
    return sorted(
        p
        for p in files_dir.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(files_dir).parts)
    )


def sync(
    settings: Settings,
    embedder: Embedder,
    *,
    rebuild: bool = False,
    parser: Parser | None = None,
    on_progress: OnProgress | None = None,
) -> SyncReport:
    """Bring the index in line with the files folder. Raises ``BuildInProgress`` if a build runs."""
    started = time.perf_counter()
    report = on_progress or (lambda p: None)
    store = open_store(settings)
    parser = parser or choose_parser(settings)
    chunking = chunking_settings(settings)
    with store.build_lock():
        try:
            store.collect_garbage()
        except RebuildNeeded:
            store.discard()  # damaged beyond use: this build starts from scratch
            store.collect_garbage()
        report(Progress("scanning"))
        previous = _previous(store, embedder, parser, chunking, rebuild)
        old_by_file = {m.file: m for m in previous[1]} if previous else {}
        # Files already indexed come first, so a new copy of one is the duplicate, not the original.
        paths = sorted(scan(settings.files_dir), key=lambda p: _relative(p, settings) not in old_by_file)

        results: list[FileResult] = []
        plan: list[tuple[Path, str, str]] = []  # (path, relative name, hash) to parse
        carried: list[tuple[str, FileResult]] = []
        seen_hashes: dict[str, str] = {}
        for path in paths:
            name = _relative(path, settings)
            if path.suffix.lower() != ".pdf":
                results.append(FileResult(name, "skipped", error="not a PDF: only .pdf files are indexed"))
                continue
            digest = file_hash(path)
            if digest in seen_hashes:
                results.append(FileResult(name, "skipped", hash=digest, error=f"same content as {seen_hashes[digest]}"))
                continue
            seen_hashes[digest] = name
            old = old_by_file.get(name)
            if (
                old
                and old.hash == digest
                and old.status in ("indexed", "unchanged", "failed")
                and not (
                    # a file another parser version failed on is tried again: OCR reads the scans it refused
                    old.status == "failed" and old.parser_version != parser.version
                )
            ):
                carried.append((name, old))
            else:
                plan.append((path, name, digest))

        current = {r.file for r in results} | {n for n, _ in carried} | {n for _, n, _ in plan}
        removed = [FileResult(f, "removed") for f in old_by_file if f not in current]
        if previous and not plan and not removed and not rebuild:
            # Nothing changed: no new generation, the cost was the hashes.
            results += [_unchanged(old) for _, old in carried]
            return _finish(results, previous[0].generation.chunks, 0, started, previous[0].generation.id, report)

        writer = store.writer(embedder.name, embedder.dimension, chunking)
        for name, old in carried:
            if old.status == "failed":
                results.append(_unchanged(old))
            else:
                writer.carry(previous[0], name)
                results.append(_unchanged(old))
        pages_parsed = 0
        stages = {"parse": 0.0, "chunk": 0.0, "embed": 0.0, "write": 0.0}
        for index, (path, name, digest) in enumerate(plan, start=1):
            result, spent = _index_file(
                path, name, digest, parser, embedder, writer, settings, index, len(plan), report
            )
            results.append(result)
            if result.status == "indexed":
                pages_parsed += result.pages
            for stage, seconds in spent.items():
                stages[stage] += seconds
        report(Progress("writing", file_count=len(plan)))
        write_started = time.perf_counter()
        manifest = [r for r in sorted(results, key=lambda r: r.file) if r.status != "removed"]
        gen = writer.commit(manifest)
        stages["write"] += time.perf_counter() - write_started
        results += removed
        pps = pages_parsed / stages["parse"] if stages["parse"] else 0.0
        return _finish(results, gen.chunks, pps, started, gen.id, report, stages)


def _relative(path: Path, settings: Settings) -> str:
    return path.relative_to(settings.files_dir).as_posix()


def _previous(store: Store, embedder: Embedder, parser: Parser, chunking: dict, rebuild: bool):
    """The active generation, when its files can be carried over into the next one."""
    if rebuild:
        return None
    try:
        reader = store.reader()
        if reader is None:
            return None
        reader.check_embedder(embedder.name)
    except RebuildNeeded:
        return None  # a damaged or incompatible index is rebuilt from scratch
    if reader.generation.chunking != chunking:
        return None
    manifest = [m for m in store.manifest() if m.parser in (parser.name, "")]
    return reader, manifest


def _unchanged(old: FileResult) -> FileResult:
    return replace(old, status="failed" if old.status == "failed" else "unchanged", seconds=0.0)


def _index_file(
    path: Path,
    name: str,
    digest: str,
    parser: Parser,
    embedder: Embedder,
    writer: Any,
    settings: Settings,
    index: int,
    count: int,
    report: OnProgress,
) -> tuple[FileResult, dict[str, float]]:
    """Parse, chunk and embed one file. Returns its result and the seconds spent in each stage."""
    start = time.perf_counter()

    def on_page(done: int, total: int, stage: str = "parsing") -> None:
        report(Progress(stage, name, index, count, done, total))

    report(Progress("parsing", name, index, count))
    try:
        parsed = parser.parse(path, on_page=on_page)
    except BuildCancelled:
        raise  # the whole build stops; it is not this file's failure
    except Exception as exc:  # noqa: BLE001 - a parser bug on one file must not stop the build
        error = str(exc) if isinstance(exc, PDFError) else f"{name}: could not be parsed ({type(exc).__name__}: {exc})"
        failed = FileResult(
            name, "failed", seconds=_since(start), error=error, hash=digest, parser_version=parser.version
        )
        return failed, {"parse": _since(start)}
    spent = {"parse": _since(start)}
    mark = time.perf_counter()
    chunks = chunk_blocks(parsed, name, digest, count_tokens, settings.chunk_tokens, settings.chunk_overlap)
    spent["chunk"] = _since(mark)
    if not chunks:
        error = f"{name}: no text found to index."
        failed = FileResult(
            name, "failed", parsed.pages, seconds=_since(start), hash=digest, error=error, parser_version=parser.version
        )
        return failed, spent
    mark = time.perf_counter()
    vectors: list[list[float]] = []
    for start_at in range(0, len(chunks), EMBED_BATCH):
        report(Progress("embedding", name, index, count, start_at, len(chunks)))
        vectors += embedder.embed([index_text(c) for c in chunks[start_at : start_at + EMBED_BATCH]])
    spent["embed"] = _since(mark)
    mark = time.perf_counter()
    writer.add(chunks, vectors)
    spent["write"] = _since(mark)
    result = FileResult(
        name,
        "indexed",
        parsed.pages,
        len(chunks),
        _since(start),
        warnings=parsed.warnings,
        hash=digest,
        parser=parsed.parser,
        parser_version=parsed.parser_version,
    )
    return result, spent


def _since(start: float) -> float:
    return round(time.perf_counter() - start, 3)


def _finish(results, chunks, pps, started, generation, report, stages=None) -> SyncReport:
    report(Progress("done"))
    return SyncReport(
        files=sorted(results, key=lambda r: r.file),
        total_chunks=chunks,
        pages_per_second=round(pps, 2),
        seconds=round(time.perf_counter() - started, 3),
        generation=generation,
        stage_seconds={k: round(v, 3) for k, v in (stages or {}).items()},
    )
