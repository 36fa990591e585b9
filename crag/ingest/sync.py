"""The build: Files/ -> layout blocks -> chunks -> a new index generation.

``sync`` is incremental: new files are parsed, changed files re-parsed, deleted files dropped, files
that failed tried again, and unchanged files carried over from the active generation, under their new name when
they were moved or renamed (the same content: nothing is read or embedded again). A file whose
size and modification time match the manifest is not even read; another is hashed, and carried over
when its content did not change. Every file gets a status and, when it fails, a reason; one bad file
never stops the others. The parsing, chunking and embedding are in ``build``.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from crag.config import Settings
from crag.errors import CragError, Remedy
from crag.files import scan
from crag.ingest.base import Parser
from crag.ingest.build import Built, Planned, index_files
from crag.ingest.chunking import CHUNKER_VERSION
from crag.models import Embedder
from crag.store import Generation, IndexReader, RebuildNeeded, Store, open_store
from crag.types import Chunk, FileResult, OnProgress, Progress

log = logging.getLogger(__name__)
SETTLED_NS = 2_000_000_000  # a file's modification time is trusted once this old (2 s)
HELD = ("indexed", "unchanged")  # statuses of files whose passages the index holds
PARSER_RANK = {"pymupdf": 0, "mineru": 1}  # MinerU reads layout, tables and equations better


class EmbedderMismatch(CragError):
    """An incremental build was given another embedder than the index's."""


@dataclass(kw_only=True, frozen=True)
class SyncReport:
    files: list[FileResult] = field(default_factory=list)
    total_chunks: int = 0
    pages_per_second: float = 0.0
    seconds: float = 0.0
    generation: str = ""
    stage_seconds: dict[str, float] = field(default_factory=dict)  # parse, chunk, embed, write
    notes: tuple[str, ...] = ()  # what the build found and did besides the files: an index it could not read, moved

    def to_json(self) -> dict[str, Any]:
        return {
            "files": [
                {k: v for k, v in asdict(f).items() if k in ("file", "status", "pages", "chunks", "seconds", "error")}
                for f in self.files
            ],
            "total_chunks": self.total_chunks,
            "pages_per_second": self.pages_per_second,
            **({"notes": list(self.notes)} if self.notes else {}),  # only when there is something to say
        }


def chunking_settings(settings: Settings, embedder: Embedder) -> dict[str, Any]:
    """What the chunks depend on; a change makes the next sync a full rebuild. The embedder's window is one:
    chunks are cut to fit it."""
    return {
        "chunk_tokens": settings.chunk_tokens,
        "chunk_overlap": settings.chunk_overlap,
        "max_tokens": embedder.max_tokens,
        "chunker": CHUNKER_VERSION,
    }


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
        max_pages=settings.max_pages,
    )


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sync(
    settings: Settings,
    embedder: Embedder,
    *,
    rebuild: bool = False,
    parser: Parser | None = None,
    on_progress: OnProgress | None = None,
) -> SyncReport:
    """Bring the index in line with the files folder. Raises ``BuildInProgress`` if a build runs, and
    ``IndexInaccessible`` when the index is locked, the disk full or permissions refuse it: then nothing changed, and
    the index that answered still does. ``rebuild``: every file parsed and embedded anew; the generation that
    answered is removed only after the new one is committed, as after any build."""
    started = time.perf_counter()
    report = on_progress or (lambda p: None)
    store = open_store(settings)
    parser = parser or choose_parser(settings)
    chunking = chunking_settings(settings, embedder)
    with store.build_lock():
        notes = _clear_leftovers(store)
        if not rebuild:
            _same_embedder(store, embedder)
        report(Progress(stage="scanning"))
        previous = _previous(store, embedder, chunking, rebuild)
        survey = _survey(settings, parser, previous)
        staging = _Staging(store, embedder, chunking, previous.reader if previous else None, survey)
        built = index_files(survey.plan, parser, embedder, staging.add, settings, report)
        if previous and staging.writer is None and not (rebuild or survey.changed):
            # Nothing changed (files that failed before failed again): no new generation, the cost was the hashes.
            return _finish(_results(survey, built), previous.reader.generation, 0.0, started, report, notes=notes)
        generation = _commit(staging, survey, built, report)
        stages = built.stages | staging.stages
        notes += tuple(
            f"{old} was moved to {new}: its passages were kept, nothing was read again."
            for new, old in survey.moved.items()
        )
        return _finish(_results(survey, built), generation, _parse_rate(built), started, report, stages, notes)


def _clear_leftovers(store: Store) -> tuple[str, ...]:
    """Remove what earlier builds left. An index whose Chroma folder or pointer cannot be read answers nothing: it is
    moved aside, never deleted (the note says where), and this build starts anew. A lock, a full disk or permissions
    raise ``IndexInaccessible`` from here, with the index as it was."""
    try:
        store.collect_garbage()
    except RebuildNeeded as damage:
        note = store.set_aside(damage)
        log.warning("%s", note)
        return (note,)
    return ()


def _same_embedder(store: Store, embedder: Embedder) -> None:
    """An incremental build adds to the index with the embedder it was built with, or not at all: vectors of two
    embedders cannot be compared, and re-embedding every file is for a full rebuild, which the user asks for."""
    try:
        active = store.active()
    except RebuildNeeded:
        return  # damaged beyond use: rebuilt from scratch
    if active is not None and active.embedder != embedder.name:
        how = "start Ollama: `ollama serve`" if active.embedder.startswith("ollama:") else "CRAG_EMBED_BACKEND=auto"
        raise EmbedderMismatch(
            f"The knowledge base was built with {active.embedder} embeddings, and this build would embed with "
            f"{embedder.name}: an incremental build never mixes embedders. Either make {active.embedder} available "
            f"again ({how}), or run a full rebuild, which re-embeds every file with {embedder.name}.",
            remedy=Remedy.FULL_REBUILD,
        )


class _Previous(NamedTuple):
    """The generation that answers, and its manifest: the files a build can carry over."""

    reader: IndexReader
    manifest: list[FileResult]


def _previous(store: Store, embedder: Embedder, chunking: dict, rebuild: bool) -> _Previous | None:
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
    return _Previous(reader, store.manifest())


@dataclass(kw_only=True)
class _Survey:
    """The files folder against the generation that answers: what is parsed, carried over, skipped or gone."""

    results: list[FileResult] = field(default_factory=list)  # skipped, unreadable, duplicates
    plan: list[Planned] = field(default_factory=list)
    carried: list[FileResult] = field(default_factory=list)
    # Failed last time with the same content: tried again, in case the fault was passing.
    retried: set[str] = field(default_factory=set)
    removed: list[FileResult] = field(default_factory=list)
    moved: dict[str, str] = field(default_factory=dict)  # a file's name now: its name in the manifest
    found: list[str] = field(default_factory=list)  # files imported without their PDF, whose PDF is there now

    @property
    def changed(self) -> bool:
        """Whether the folder changed: a file removed, moved, new, changed or found (not only failed files tried
        again)."""
        return bool(self.removed or self.moved or self.found or {p.name for p in self.plan} - self.retried)


def _survey(settings: Settings, parser: Parser, previous: _Previous | None) -> _Survey:
    """Every file of the folder hashed (unless its size and time match), its duplicates skipped, and the rest carried
    over or planned; the files of the manifest no longer there are removed."""
    old_by_file = {m.file: m for m in previous.manifest} if previous else {}
    survey = _Survey()
    seen_hashes: dict[str, str] = {}
    for path in _indexed_first(settings, old_by_file):
        name = _relative(path, settings)
        if path.suffix.lower() != ".pdf":
            survey.results.append(
                FileResult(file=name, status="skipped", error="not a PDF: only .pdf files are indexed")
            )
            continue
        old = old_by_file.get(name)
        item = _hashed(path, name, old)
        if isinstance(item, FileResult):
            survey.results.append(item)
        elif item.hash in seen_hashes:
            survey.results.append(_duplicate(item, seen_hashes[item.hash]))
        else:
            seen_hashes[item.hash] = name
            _carry_or_plan(item, old, parser, survey)
    current = {r.file for r in survey.results} | {c.file for c in survey.carried} | {p.name for p in survey.plan}
    survey.removed = _gone([m for f, m in old_by_file.items() if f not in current], survey, parser)
    return survey


def _gone(gone: list[FileResult], survey: _Survey, parser: Parser) -> list[FileResult]:
    """The files of the manifest no longer in the folder: removed, unless moved or renamed (a new file with the same
    content takes over its passages, read and embedded once only) or detached (imported without its PDF: kept)."""
    held = {old.hash: old for old in gone if old.status in HELD and old.hash and _keeps(old, parser)}
    for item in [p for p in survey.plan if p.hash in held]:
        old = held.pop(item.hash)
        survey.plan.remove(item)
        survey.carried.append(replace(old, file=item.name, size=item.size, mtime_ns=item.mtime_ns, detached=False))
        survey.moved[item.name] = old.file
    kept = [old for old in gone if old.detached and old.status in HELD and old.file not in survey.moved.values()]
    survey.carried += kept
    left = {old.file for old in kept} | set(survey.moved.values())
    return [FileResult(file=old.file, status="removed") for old in gone if old.file not in left]


def _indexed_first(settings: Settings, old_by_file: dict[str, FileResult]) -> list[Path]:
    """The folder's files, those already indexed first: a new copy of one is the duplicate, not the original."""
    return sorted(scan(settings.files_dir), key=lambda p: _relative(p, settings) not in old_by_file)


def _relative(path: Path, settings: Settings) -> str:
    return path.relative_to(settings.files_dir).as_posix()


def _hashed(path: Path, name: str, old: FileResult | None) -> Planned | FileResult:
    """The file with its hash, or its failure when it cannot be read."""
    try:
        return _look(path, name, old)
    except OSError as exc:
        error = f"{name}: cannot be read ({exc.strerror}). Check the file's permissions, then rebuild."
        return FileResult(file=name, status="failed", error=error)


def _look(path: Path, name: str, old: FileResult | None) -> Planned:
    """The file's hash, read only when its size or modification time differ from the manifest's."""
    stat = path.stat()
    if old and old.hash and old.mtime_ns and (old.size, old.mtime_ns) == (stat.st_size, stat.st_mtime_ns):
        digest = old.hash
    else:
        digest = file_hash(path)
    # A time this close to now may be shared with a change still to come (coarse file system clocks): not
    # recorded, so the next sync reads the file rather than trust it.
    settled = time.time_ns() - stat.st_mtime_ns > SETTLED_NS
    return Planned(path=path, name=name, hash=digest, size=stat.st_size, mtime_ns=stat.st_mtime_ns if settled else 0)


def _duplicate(item: Planned, original: str) -> FileResult:
    dup = FileResult(file=item.name, status="skipped", error=f"same content as {original}")
    return replace(dup, hash=item.hash, size=item.size, mtime_ns=item.mtime_ns)


def _carry_or_plan(item: Planned, old: FileResult | None, parser: Parser, survey: _Survey) -> None:
    """An indexed file with the same content keeps its chunks; any other is parsed."""
    if old and old.hash == item.hash and old.status in HELD and _keeps(old, parser):
        survey.carried.append(replace(old, size=item.size, mtime_ns=item.mtime_ns, detached=False))
        if old.detached:
            survey.found.append(old.file)
    else:
        survey.plan.append(item)
        if old and old.hash == item.hash and old.status == "failed":
            survey.retried.add(item.name)


def _keeps(old: FileResult, parser: Parser) -> bool:
    """An unchanged file keeps its chunks whichever parser made them, unless a better one is at hand now:
    files MinerU parsed stay while it is down and PyMuPDF stands in, and files PyMuPDF parsed meanwhile
    are parsed again once MinerU is back."""
    return PARSER_RANK.get(old.parser, 0) >= PARSER_RANK.get(parser.name, 0)


class _Staging:
    """The next generation, begun when the build first has something to write (a new file's chunks, or at
    its end), with the unchanged files carried over then: a sync that only tried failed files again, and saw
    them fail again, leaves the index as it was."""

    def __init__(self, store: Store, embedder: Embedder, chunking: dict, reader: Any, survey: _Survey):
        self.store, self.embedder, self.chunking, self.reader = store, embedder, chunking, reader
        self.carried, self.moved = survey.carried, survey.moved
        self.writer: Any = None
        self.stages = {"carry": 0.0}

    def open(self) -> Any:
        if self.writer is None:
            mark = time.perf_counter()
            self.writer = self.store.writer(self.embedder.name, self.embedder.dimension, self.chunking)
            for old in self.carried:
                was = self.moved.get(old.file)
                self.writer.carry(self.reader, was or old.file, as_file=old.file if was else "")
            self.stages["carry"] += time.perf_counter() - mark
        return self.writer

    def add(self, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]]) -> None:
        self.open().add(chunks, vectors)


def _commit(staging: _Staging, survey: _Survey, built: Built, report: OnProgress) -> Generation:
    """The new generation, begun now if no file began it, with its manifest: committed, it answers."""
    report(Progress(stage="writing", file_count=len(survey.plan)))
    mark = time.perf_counter()
    writer = staging.open()
    manifest = [r for r in sorted(_results(survey, built), key=lambda r: r.file) if r.status != "removed"]
    generation = writer.commit(manifest)
    built.stages["write"] += time.perf_counter() - mark
    return generation


def _results(survey: _Survey, built: Built) -> list[FileResult]:
    """Every file's result: skipped or unreadable, built, carried over unchanged, removed."""
    return survey.results + built.results + [_unchanged(old) for old in survey.carried] + survey.removed


def _parse_rate(built: Built) -> float:
    return built.pages / built.stages["parse"] if built.stages["parse"] else 0.0


def _unchanged(old: FileResult) -> FileResult:
    return replace(old, status="unchanged", seconds=0.0)


def _finish(results, generation, pps, started, report, stages=None, notes=()) -> SyncReport:
    report(Progress(stage="done"))
    return SyncReport(
        notes=notes,
        files=sorted(results, key=lambda r: r.file),
        total_chunks=generation.chunks,
        pages_per_second=round(pps, 2),
        seconds=round(time.perf_counter() - started, 3),
        generation=generation.id,
        stage_seconds={k: round(v, 3) for k, v in (stages or {}).items()},
    )
