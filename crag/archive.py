"""A knowledge base as one file, to move to another machine without rebuilding it: ``export_archive`` writes the
generation that answers, ``import_archive`` checks an archive and commits it as a new generation.

An archive (``kb.crag``) is a zip file. Its manifest, ``crag-archive.json``, says what it is (``FORMAT``,
``VERSION``), how its index was built (the embedder and its dimension, the chunk settings with the chunker's
version, the counts) and lists every other member with its kind, size and SHA-256::

    crag-archive.json     the manifest
    index/chunks.jsonl    the passages, in the generation's order
    index/vectors.npy     their vectors: float32, a row per passage, in that order
    index/manifest.json   the per-file records: content hashes, pages, titles, outlines
    index/bm25/...        the lexical index (BM25), as the embedded index keeps it
    files/<path>          with ``--with-files``, the PDFs under their paths in the files folder

An import reads every member once, into a hidden folder beside the index (the PDFs beside the files folder),
checking its size and hash as it goes; then checks that the parts agree (a vector per passage, the passages of
each file as its record counts them, the PDFs' hashes as their records say); then writes a generation and commits
it in one step, as a build does. A refusal at any point removes what was staged and leaves the index that answers
as it was. An archive is refused for a member its manifest does not list, a path that is absolute, climbs out
with ``..`` or is a link, a size or hash that differs, a format version newer than ``VERSION``, or an embedder that
cannot be had here. Hashes find damage, not a forger: an archive is as trustworthy as whoever sent it.

More members can travel (users' feedback labels, say): give them a kind of their own, write them in
``export_archive`` and read them in ``import_archive``. An older version checks a member of a kind it does not know
against its hash and leaves it aside, with a note; raise ``VERSION`` only for a change that an older version must
refuse rather than half-understand.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import IO, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

import crag
from crag.config import Settings
from crag.errors import CragError
from crag.files import scan
from crag.models import Embedder, EmbedderUnavailable, embedder_named
from crag.store import Generation, IndexReader, Store, chunk_from_json, chunk_to_json, open_store
from crag.store.generation import WRITE_BATCH
from crag.store.lexical import LexicalIndex
from crag.types import Chunk, FileResult, OnProgress, Progress

FORMAT: Literal["crag-archive"] = "crag-archive"
VERSION = 1
LABELS = "feedback/labels.json"  # the ratings member, when there are ratings
MANIFEST = "crag-archive.json"
MANIFEST_LIMIT = 64 << 20  # bytes: a manifest lists members, it is never this long
BLOCK = 1 << 20  # bytes read or written at a time: members stream, whatever their size
HELD = ("indexed", "unchanged")  # records of files whose passages the index holds
ROOM_MARGIN = 64 << 20  # bytes left free on a disk after an import, besides what it writes
EmbedderFor = Callable[[Settings, str], Embedder | None]  # the embedder of this name, as ``embedder_named``


class ArchiveRefused(CragError):
    """An archive that cannot be written or imported; the message says why and what to do. The index that answered
    still does."""


class Kind(StrEnum):
    """What a member of an archive holds."""

    CHUNKS = "chunks"
    VECTORS = "vectors"
    RECORDS = "records"  # the per-file records (the index's manifest)
    LEXICAL = "lexical"
    PDF = "pdf"
    LABELS = "labels"  # the users' ratings of answers in this knowledge base (``crag.feedback``)


class Member(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str
    kind: str  # a ``Kind``, or one a newer version writes
    size: int = Field(ge=0)
    sha256: str = Field(min_length=64, max_length=64)


class Built(BaseModel):
    """How the archived generation was built: what an import must match."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    embedder: str
    dimension: int = Field(ge=1)
    chunking: dict[str, Any]
    built_at: str = ""
    files: int = Field(ge=0)
    chunks: int = Field(ge=0)


class Manifest(BaseModel):
    """``crag-archive.json``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    format: Literal["crag-archive"]
    version: int = Field(ge=1)
    created_at: str = ""
    crag_version: str = ""
    generation: Built
    members: list[Member]


@dataclass(frozen=True, kw_only=True)
class Exported:
    path: Path
    files: int  # documents the index holds
    chunks: int
    pdfs: int  # PDFs inside
    size: int  # bytes
    left_out: tuple[str, ...] = ()  # PDFs of the index not put in, each with why
    ratings: int = 0  # rated answers inside, with the questions and turns they were asked with


@dataclass(frozen=True, kw_only=True)
class Imported:
    """What an import committed, and how the files folder compares with the archive."""

    archive: str
    generation: str
    embedder: str
    files: int
    chunks: int
    placed: tuple[str, ...] = ()  # PDFs of the archive written into the files folder
    differs: tuple[str, ...] = ()  # in the folder with other content: the folder's copy is kept, a sync reads it
    absent: tuple[str, ...] = ()  # neither in the folder nor in the archive: sources name file and page, no image
    extra: tuple[str, ...] = ()  # PDFs of the folder the archive does not hold: a sync indexes them
    notes: tuple[str, ...] = ()

    @property
    def in_step(self) -> bool:
        """Whether the files folder holds what the index does, no more: no sync needed."""
        return not (self.differs or self.extra)


def _silent(progress: Progress) -> None:
    pass


# ---------------------------------------------------------------------------------------------
# Export


class _Hashing:
    """A binary sink that counts and hashes what goes through it."""

    def __init__(self, sink: IO[bytes]) -> None:
        self.sink, self.size, self.digest = sink, 0, hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.sink.write(data)
        self.digest.update(data)
        self.size += len(data)
        return len(data)


class _ArchiveWriter:
    def __init__(self, zf: zipfile.ZipFile) -> None:
        self.zf = zf
        self.members: list[Member] = []

    @contextmanager
    def member(self, name: str, kind: Kind, compress: bool = True) -> Iterator[_Hashing]:
        info = zipfile.ZipInfo(name, date_time=time.localtime()[:6])
        info.compress_type = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
        info.external_attr = (stat.S_IFREG | 0o644) << 16
        with self.zf.open(info, "w", force_zip64=True) as raw:
            sink = _Hashing(raw)
            yield sink
        self.members.append(Member(name=name, kind=kind, size=sink.size, sha256=sink.digest.hexdigest()))

    def index(self, reader: IndexReader) -> None:
        with self.member("index/chunks.jsonl", Kind.CHUNKS) as out:
            for chunk in reader.chunks:
                out.write((json.dumps(chunk_to_json(chunk), ensure_ascii=False) + "\n").encode())
        with self.member("index/vectors.npy", Kind.VECTORS, compress=False) as out:
            shape = (len(reader.chunks), reader.generation.dimension)
            np.lib.format.write_array_header_1_0(out, {"descr": "<f4", "fortran_order": False, "shape": shape})
            for start in range(0, len(reader.chunks), WRITE_BATCH):
                ids = [c.id for c in reader.chunks[start : start + WRITE_BATCH]]
                out.write(np.asarray(reader.vectors(ids), dtype="<f4").tobytes())
        with self.member("index/manifest.json", Kind.RECORDS) as out:
            out.write(json.dumps([asdict(m) for m in reader.manifest], ensure_ascii=False, indent=1).encode())
        with tempfile.TemporaryDirectory(prefix="crag-export-") as folder:
            if reader.save_lexical(Path(folder)):
                for path in sorted(Path(folder).iterdir()):
                    with self.member(f"index/bm25/{path.name}", Kind.LEXICAL) as out, path.open("rb") as fh:
                        shutil.copyfileobj(fh, out, BLOCK)

    def labels(self, settings: Settings) -> int:
        """The ratings kept beside the index, when there are any: they travel with the knowledge base they rate."""
        from crag.conversations import Conversations, chats_file

        if not chats_file(settings).is_file():
            return 0
        labels = Conversations(chats_file(settings)).export_labels()
        if not labels["labels"]:
            return 0
        with self.member(LABELS, Kind.LABELS) as out:
            out.write(json.dumps(labels, ensure_ascii=False).encode())
        return len(labels["labels"])

    def pdfs(self, files_dir: Path, records: Sequence[FileResult]) -> tuple[int, tuple[str, ...]]:
        """The PDFs of the index, each as the index read it; one changed since, or gone, is left out and said."""
        put, left_out = 0, []
        for record in records:
            if record.status not in HELD or record.detached:
                continue
            path = files_dir / record.file
            try:
                same = sha256_of(path) == record.hash
            except OSError as exc:
                left_out.append(f"{record.file}: cannot be read ({exc.strerror})")
                continue
            if not same:
                left_out.append(f"{record.file}: changed since it was indexed (sync first, then export again)")
                continue
            with self.member(f"files/{record.file}", Kind.PDF, compress=False) as out, path.open("rb") as fh:
                shutil.copyfileobj(fh, out, BLOCK)
            put += 1
        return put, tuple(left_out)

    def finish(self, generation: Generation) -> None:
        manifest = Manifest(
            format=FORMAT,
            version=VERSION,
            created_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            crag_version=crag.__version__,
            generation=Built(**{k: v for k, v in asdict(generation).items() if k in Built.model_fields}),
            members=self.members,
        )
        self.zf.writestr(MANIFEST, manifest.model_dump_json(indent=1), compress_type=zipfile.ZIP_DEFLATED)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def export_archive(
    settings: Settings, target: Path, *, with_files: bool = False, with_ratings: bool = False
) -> Exported:
    """Write the generation that answers into ``target`` as one archive (with its PDFs: ``with_files``; with the
    users' ratings of its answers, which hold their questions and conversations: ``with_ratings``, never by default).
    The archive appears whole or not at all: it is written beside ``target`` under a hidden name, then renamed."""
    reader = open_store(settings).reader()
    if reader is None:
        raise ArchiveRefused("Nothing to export: the knowledge base is not built yet. Build it first.")
    if not target.parent.is_dir():
        raise ArchiveRefused(f"Cannot write {target}: the folder {target.parent} does not exist.")
    part = target.with_name(f".{target.name}.{os.getpid()}.part")
    try:
        with zipfile.ZipFile(part, "w", allowZip64=True) as zf:
            out = _ArchiveWriter(zf)
            out.index(reader)
            ratings = out.labels(settings) if with_ratings else 0
            pdfs, left_out = out.pdfs(settings.files_dir, reader.manifest) if with_files else (0, ())
            out.finish(reader.generation)
        with part.open("rb") as fh:
            os.fsync(fh.fileno())
        os.replace(part, target)
    except OSError as exc:
        part.unlink(missing_ok=True)
        raise ArchiveRefused(
            f"Cannot write {target} ({exc.strerror or exc}): check that its folder is writable and has room."
        ) from None
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    held = sum(1 for m in reader.manifest if m.status in HELD)
    size = target.stat().st_size
    return Exported(
        path=target, files=held, chunks=len(reader.chunks), pdfs=pdfs, size=size, left_out=left_out, ratings=ratings
    )


# ---------------------------------------------------------------------------------------------
# Import: what the archive is


def _refused(archive: Path, why: str) -> ArchiveRefused:
    return ArchiveRefused(f"{archive.name} was not imported: {why} The knowledge base that answered still does.")


@contextmanager
def _opened(path: Path, archive: Path) -> Iterator[zipfile.ZipFile]:
    """The zip file at ``path``; ``archive``: its name in messages."""
    try:
        zf = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise ArchiveRefused(f"{archive} does not exist.") from None
    except OSError as exc:
        raise _refused(archive, f"it cannot be read ({exc.strerror or exc}).") from None
    except zipfile.BadZipFile:
        raise _refused(
            archive, "it is not a whole .crag archive (cut short, or another kind of file). Export it again."
        ) from None
    with zf:
        yield zf


def safe_name(name: str) -> bool:
    """Whether a member's name is a plain relative path that stays inside the folder it is unpacked in."""
    path = PurePosixPath(name)
    return (
        bool(name)
        and not path.is_absolute()
        and "\\" not in name
        and ":" not in path.parts[0]
        and all(part not in ("", ".", "..") for part in name.split("/"))
    )


def _entries(zf: zipfile.ZipFile, archive: Path) -> dict[str, zipfile.ZipInfo]:
    entries: dict[str, zipfile.ZipInfo] = {}
    for info in zf.infolist():
        if not safe_name(info.filename):
            raise _refused(archive, f"it holds the path {info.filename!r}, which would leave the folder it goes to.")
        if stat.S_ISLNK(info.external_attr >> 16) or info.is_dir():
            raise _refused(archive, f"it holds {info.filename!r}, a link or a folder entry, which archives never do.")
        if info.filename in entries:
            raise _refused(archive, f"it holds {info.filename!r} twice.")
        entries[info.filename] = info
    return entries


def read_manifest(zf: zipfile.ZipFile, archive: Path) -> Manifest:
    """The archive's manifest, once its entries are checked against it: safe names, each listed once, the sizes it
    gives."""
    entries = _entries(zf, archive)
    info = entries.pop(MANIFEST, None)
    if info is None or info.file_size > MANIFEST_LIMIT:
        raise _refused(archive, f"it has no {MANIFEST}: it is not an archive this app wrote.")
    try:
        data = json.loads(zf.read(info))
        if isinstance(data, dict) and isinstance(data.get("version"), int) and data["version"] > VERSION:
            raise _refused(
                archive,
                f"it was written by a newer version of this app (archive format {data['version']}; this one reads "
                f"{VERSION}). Update the app, then import it.",
            )
        manifest = Manifest.model_validate(data)
    except (ValueError, ValidationError, zipfile.BadZipFile) as exc:
        raise _refused(archive, f"its manifest {MANIFEST} is damaged ({str(exc)[:200]}). Export it again.") from None
    listed = {m.name: m for m in manifest.members}
    if len(listed) != len(manifest.members) or set(listed) != set(entries):
        odd = sorted(set(listed) ^ set(entries))[:3] or ["a member listed twice"]
        raise _refused(archive, f"its members and its manifest disagree ({', '.join(odd)}). Export it again.")
    for name, member in listed.items():
        if entries[name].file_size != member.size:
            raise _refused(archive, f"{name} is {entries[name].file_size:,} bytes, not the {member.size:,} listed.")
    return manifest


def _embedder(settings: Settings, archive: Path, built: Built, embedder_for: EmbedderFor) -> Embedder:
    """The embedder the archive's vectors were made with, at hand here; else the import is refused."""
    name = built.embedder
    try:
        embedder = embedder_for(settings, name)
    except EmbedderUnavailable as exc:
        raise _refused(archive, f"it was built with {name} embeddings, which cannot be used here now: {exc}") from None
    if embedder is None:
        raise _refused(
            archive,
            f"it was built with {name} embeddings, which this installation does not have. Import it where they "
            "are, or export it with its PDFs (--with-files) and build the knowledge base here.",
        )
    if embedder.dimension != built.dimension:
        raise _refused(
            archive, f"its vectors have {built.dimension} dimensions and {name} here makes {embedder.dimension}."
        )
    return embedder


def _room(settings: Settings, archive: Path, manifest: Manifest) -> None:
    """Refuse an import the disks cannot hold: the index staged, then written into Chroma (about twice its size
    again), and the PDFs."""
    pdfs = sum(m.size for m in manifest.members if m.kind == Kind.PDF)
    index = sum(m.size for m in manifest.members) - pdfs
    needs = {settings.chroma_dir: 3 * index, settings.files_dir: pdfs}
    by_disk: dict[int, tuple[Path, int]] = {}
    for folder, size in needs.items():
        existing = next(p for p in (folder.resolve(), *folder.resolve().parents) if p.exists())
        device = existing.stat().st_dev
        by_disk[device] = (existing, by_disk.get(device, (existing, 0))[1] + size)
    for existing, size in by_disk.values():
        free = shutil.disk_usage(existing).free
        if size + ROOM_MARGIN > free:
            raise _refused(
                archive,
                f"it needs about {(size + ROOM_MARGIN) >> 20:,} MB free on the disk of {existing}, which has "
                f"{free >> 20:,} MB. Free some space, then import it again.",
            )


# ---------------------------------------------------------------------------------------------
# Import: staged, checked, committed


@dataclass(frozen=True)
class _Loaded:
    chunks: list[Chunk]
    vectors: np.ndarray
    records: list[FileResult]
    lexical: LexicalIndex | None


@dataclass(kw_only=True)
class _Folder:
    """The files folder against the archive's records."""

    records: list[FileResult]  # as they will be committed
    place: dict[str, Path] = field(default_factory=dict)  # staged PDFs to put into the folder, by name
    differs: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)


@contextmanager
def _staged(root: Path, needed: bool = True) -> Iterator[Path]:
    """A hidden folder in ``root`` (same disk: what is staged there is moved, not copied), removed at the end."""
    if not needed:
        yield root / ".crag-import-unused"
        return
    root.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=".crag-import-", dir=root))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _copy_checked(zf: zipfile.ZipFile, member: Member, target: Path | None, archive: Path) -> None:
    """A member read once, written to ``target`` (None: read only), its size and hash checked as it goes."""
    digest, size = hashlib.sha256(), 0
    damaged = _refused(archive, f"{member.name} does not match its hash: the archive was changed or damaged.")
    try:
        with zf.open(member.name) as src, target.open("wb") if target else open(os.devnull, "wb") as dst:
            for block in iter(lambda: src.read(BLOCK), b""):
                size += len(block)
                if size > member.size:
                    raise damaged
                digest.update(block)
                dst.write(block)
    except (zipfile.BadZipFile, EOFError, ValueError) as exc:  # a CRC that fails, a stream cut short
        raise _refused(archive, f"{member.name} cannot be read ({exc}): the archive is damaged.") from None
    if size != member.size or digest.hexdigest() != member.sha256:
        raise damaged


def _extract(
    zf: zipfile.ZipFile, manifest: Manifest, index_dir: Path, pdf_dir: Path, archive: Path, report: OnProgress
) -> tuple[str, ...]:
    """Every member staged and checked; the kinds this version does not know are checked, then left aside."""
    aside = []
    for n, member in enumerate(manifest.members, start=1):
        report(Progress(stage="checking", file=member.name, file_index=n, file_count=len(manifest.members)))
        if member.kind == Kind.PDF:
            target: Path | None = pdf_dir / member.name.removeprefix("files/")
        elif member.kind in set(Kind):
            target = index_dir / member.name
        else:
            target = None
            aside.append(member.name)
        if target is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
        _copy_checked(zf, member, target, archive)
    return tuple(f"{name}: a kind of member this version does not use, left aside." for name in aside)


def _labels(settings: Settings, staged: Path) -> tuple[str, ...]:
    """The archive's ratings, added to this installation's: a rating it holds already is replaced only by a newer
    one. Ratings that cannot be read are left aside, with a note: the index they rate is imported all the same."""
    if not staged.is_file():
        return ()
    from crag.conversations import Conversations, chats_file
    from crag.feedback import BadLabels

    try:
        added = Conversations(chats_file(settings)).import_labels(json.loads(staged.read_text(encoding="utf-8")))
    except (BadLabels, ValueError, OSError) as exc:
        return (f"its ratings were left aside: {exc}",)
    return (f"{added} rating(s) of answers came with it: the Evaluate page shows them.",) if added else ()


def _load(index_dir: Path, built: Built, archive: Path) -> _Loaded:
    """The staged index, read back and checked: a vector per passage, each file's passages as its record counts
    them and named after its content."""
    folder = index_dir / "index"
    try:
        lines = (folder / "chunks.jsonl").read_text(encoding="utf-8").splitlines()
        chunks = [chunk_from_json(json.loads(line)) for line in lines]
        records = [FileResult.from_json(r) for r in json.loads((folder / "manifest.json").read_text("utf-8"))]
        vectors = np.load(folder / "vectors.npy", mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise _refused(archive, f"its index cannot be read ({str(exc)[:200]}).") from None
    problem = _disagreement(chunks, vectors, records, built)
    if problem:
        raise _refused(archive, f"its parts disagree: {problem}. Export it again.")
    lexical = None
    if (folder / "bm25").is_dir() and chunks:
        try:
            lexical = LexicalIndex.load(folder / "bm25", len(chunks))
        except Exception:  # noqa: BLE001 - bm25s raises what it meets; the lexical index is then built anew
            lexical = None
    return _Loaded(chunks, vectors, records, lexical)


def _disagreement(chunks: list[Chunk], vectors: np.ndarray, records: list[FileResult], built: Built) -> str:
    # A record names a file of the files folder, as a member's name does: never one outside it ("../widget.pdf"),
    # which placing or syncing would reach.
    if bad := next((r.file for r in records if not safe_name(r.file) or not r.file.lower().endswith(".pdf")), None):
        return f"a file is named {bad!r}, outside the files folder or no PDF"
    if any(not safe_name(c.file) for c in chunks):
        return "a passage names a file outside the files folder"
    if vectors.dtype != np.float32 or vectors.shape != (len(chunks), built.dimension):
        return f"{vectors.shape} vectors for {len(chunks)} passages of {built.dimension} dimensions"
    if len(chunks) != built.chunks or len({c.id for c in chunks}) != len(chunks):
        return f"{len(chunks)} passages where {built.chunks} were listed, or a passage twice"
    held = {r.file: r for r in records if r.status in HELD}
    counts = Counter(c.file for c in chunks)
    if counts != Counter({f: r.chunks for f, r in held.items() if r.chunks}) or len(held) != built.files:
        return "the passages of its files are not those their records count"
    if any(c.file_hash and c.file_hash != held[c.file].hash for c in chunks):
        return "a passage names another content than its file's record"
    return ""


def _folder(files_dir: Path, loaded: _Loaded, pdf_dir: Path, archive: Path) -> _Folder:
    """Each file of the archive against the files folder: there with the same content, there with another (the
    folder's copy is kept), to be placed from the archive, or absent (detached: kept without its PDF)."""
    on_disk = {p.relative_to(files_dir).as_posix(): p for p in scan(files_dir) if p.suffix.lower() == ".pdf"}
    folder = _Folder(records=[])
    for record in sorted(loaded.records, key=lambda r: r.file):
        here, staged = on_disk.get(record.file), pdf_dir / record.file
        if record.status not in HELD:
            folder.records.append(replace(record, mtime_ns=0))
        elif here is not None and sha256_of(here) == record.hash:
            st = here.stat()
            folder.records.append(replace(record, size=st.st_size, mtime_ns=st.st_mtime_ns, detached=False))
        elif here is not None:
            folder.differs.append(record.file)
            folder.records.append(replace(record, mtime_ns=0, detached=False))  # a sync hashes it, and reads it
        elif staged.is_file():
            if sha256_of(staged) != record.hash:
                raise _refused(archive, f"its PDF {record.file} is not the file its passages were read from.")
            folder.place[record.file] = staged
            folder.records.append(replace(record, detached=False))
        else:
            folder.absent.append(record.file)
            folder.records.append(replace(record, detached=True))
    held = {r.file for r in loaded.records if r.status in HELD}
    folder.extra = sorted(set(on_disk) - held)
    return folder


def _commit(
    store: Store, embedder: Embedder, built: Built, loaded: _Loaded, folder: _Folder, report: OnProgress
) -> Generation:
    """The archive's generation, written and committed; removed again if anything fails before the commit."""
    writer = store.writer(embedder.name, built.dimension, built.chunking)
    try:
        total = len(loaded.chunks)
        for start in range(0, total, WRITE_BATCH):
            report(Progress(stage="writing", page=start, page_count=total))
            end = start + WRITE_BATCH
            writer.add(loaded.chunks[start:end], np.asarray(loaded.vectors[start:end], dtype=np.float32))
        writer.lexical = loaded.lexical
        return writer.commit(folder.records)
    except BaseException:
        writer.abort()
        raise


def _place(files_dir: Path, folder: _Folder, archive: Path) -> tuple[str, ...]:
    """The archive's PDFs moved into the files folder, with the modification times their records have (so a sync
    need not read them again); never over a file that is there. Done before the commit: a PDF that cannot be put in
    its place (a file where its folder should be, a full disk) refuses the import, and those put already are taken
    back, so that no record says a PDF is there that is not. Returns what was put: the PDFs, and the folders made
    for them ("name/")."""
    placed: list[str] = []
    by_file = {r.file: r for r in folder.records}
    try:
        for name, staged in folder.place.items():
            target = files_dir / name
            if target.exists():
                continue
            made = [p for p in target.parents if p.is_relative_to(files_dir) and p != files_dir and not p.exists()]
            placed += [p.relative_to(files_dir).as_posix() + "/" for p in made]  # taken back after its PDFs
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged, target)
            placed.append(name)
            if mtime := by_file[name].mtime_ns:
                os.utime(target, ns=(mtime, mtime))
    except OSError as exc:
        _unplace(files_dir, placed)
        raise _refused(
            archive, f"its PDFs cannot be put into {files_dir} ({exc.strerror or exc}): check that folder."
        ) from None
    return tuple(placed)


def _unplace(files_dir: Path, placed: Sequence[str]) -> None:
    """Take back what an import put into the files folder (none was there before it): its PDFs, then the folders it
    made for them ("name/"), deepest first."""
    for name in sorted(placed, key=lambda n: (n.endswith("/"), -n.count("/"))):
        with contextlib.suppress(OSError):  # gone already, or a folder the user has put a file into since
            if name.endswith("/"):
                (files_dir / name).rmdir()
            else:
                (files_dir / name).unlink(missing_ok=True)


def _chunking_note(settings: Settings, built: Built, embedder: Embedder) -> tuple[str, ...]:
    from crag.ingest.sync import chunking_settings  # the parsers load with it: only once an archive is good

    here = chunking_settings(settings, embedder)
    if here == built.chunking:
        return ()
    return (
        f"The archive's passages were cut with other settings ({built.chunking}) than this installation's ({here}): "
        "they answer as they are, and the next sync reads every file again.",
    )


def import_archive(
    settings: Settings,
    archive: Path,
    *,
    embedder_for: EmbedderFor | None = None,
    on_progress: OnProgress | None = None,
    name: str = "",
) -> Imported:
    """Check ``archive`` and commit its knowledge base as a new generation, in one step. Raises ``ArchiveRefused``,
    saying why, with nothing changed. The archive's PDFs go into the files folder where it has none of that name.
    ``embedder_for``: how an embedder is had by its name (``embedder_named``, looked up when called); ``name``: the
    archive's name in messages (an upload's, saved under another)."""
    report = on_progress or _silent
    embedder_for = embedder_for or embedder_named
    path, archive = archive, Path(name) if name else archive
    with _opened(path, archive) as zf:
        manifest = read_manifest(zf, archive)
        built = manifest.generation
        embedder = _embedder(settings, archive, built, embedder_for)
        _room(settings, archive, manifest)
        store = open_store(settings)
        has_pdfs = any(m.kind == Kind.PDF for m in manifest.members)
        with (
            store.build_lock(),
            _staged(settings.chroma_dir) as index_dir,
            _staged(settings.files_dir, has_pdfs) as pdf_dir,
        ):
            aside = _extract(zf, manifest, index_dir, pdf_dir, archive, report)
            loaded = _load(index_dir, built, archive)
            folder = _folder(settings.files_dir, loaded, pdf_dir, archive)
            placed = _place(settings.files_dir, folder, archive)
            try:
                generation = _commit(store, embedder, built, loaded, folder, report)
            except BaseException:
                _unplace(settings.files_dir, placed)
                raise
            aside += _labels(settings, index_dir / LABELS)
    report(Progress(stage="done"))
    return Imported(
        archive=archive.name,
        generation=generation.id,
        embedder=embedder.name,
        files=generation.files,
        chunks=generation.chunks,
        placed=tuple(name for name in placed if not name.endswith("/")),  # the PDFs, not the folders made for them
        differs=tuple(folder.differs),
        absent=tuple(folder.absent),
        extra=tuple(folder.extra),
        notes=aside + _chunking_note(settings, built, embedder),
    )
