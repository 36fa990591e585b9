"""The embedded index: a local folder that one machine's processes share.

Layout of ``chroma_db/``::

    ACTIVE.json              which generation answers queries, how it was built, the sizes of its files,
                             and the generation before it (kept until the next build's swap)
    chroma/                  Chroma's PersistentClient: one collection per generation
    generations/<id>/        chunks.jsonl, manifest.json, bm25/ of that generation
    build.lock               held by the one build that may run at a time (filelock)

A build writes a new generation beside the active one, syncs its files and their folders to the disk,
then swaps ``ACTIVE.json`` (``os.replace``, synced too). A build that is cancelled, crashes or is
killed leaves the active generation untouched; its leftovers are removed by the next build. A
generation whose files are missing or shorter than the pointer says (a power loss the disk did not
survive whole) gives way to the previous one, with a note that says so.

Nothing a build cannot read is deleted. A lock, a full disk or permissions say nothing about what the index
holds: they raise ``IndexInaccessible`` and the index stays as it is. A Chroma folder that Chroma cannot read
(damaged, or written by another version) is moved, with the pointer and the generations' files, to
``broken-<time>/``; a pointer that cannot be read, to ``ACTIVE.json.broken-<time>``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from crag.errors import CragError
from crag.store.chroma import blocked, embedded_client, forget_embedded
from crag.store.common import (
    Blocked,
    BuildInProgress,
    ChromaUnreadable,
    Generation,
    IndexInaccessible,
    RebuildNeeded,
    blocked_is_said,
    chunk_from_json,
    chunk_to_json,
    inaccessible,
)
from crag.store.generation import GenerationWriter, IndexReader, Opened, build_lexical
from crag.store.lexical import LexicalIndex
from crag.types import FileResult


def _write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        json.dump(data, fh, ensure_ascii=False, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _sync_dir(path.parent)


def _sync_dir(folder: Path) -> None:
    """A folder's entries (names created, renamed) on the disk, not only in the cache."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_tree(folder: Path) -> dict[str, int]:
    """Every file under ``folder``, and the folders, on the disk; the files' sizes by relative path."""
    sizes = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with path.open("rb") as fh:
                os.fsync(fh.fileno())
            sizes[path.relative_to(folder).as_posix()] = path.stat().st_size
        elif path.is_dir():
            _sync_dir(path)
    _sync_dir(folder)
    return sizes


@dataclass(frozen=True)
class Pointed:
    """A generation the pointer names, with the sizes its files had when it was written (empty: not recorded)."""

    generation: Generation
    sizes: dict[str, int]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Pointed:
        data = dict(data)
        sizes = data.pop("sizes", {})
        data.pop("previous", None)
        return cls(Generation(**data), {str(k): int(v) for k, v in sizes.items()})

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self.generation), "sizes": self.sizes}


class Store:
    """The ``chroma_db/`` folder (embedded Chroma). ``ServerStore`` is the same interface over a Chroma server."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.active_path = root / "ACTIVE.json"
        self.generations = root / "generations"
        self._client: Any = None
        self.fallback = ""  # why the previous generation answers, when the last one's files are incomplete

    @property
    def where(self) -> str:
        return f"in {self.root}"

    @property
    def client(self) -> Any:
        if self._client is None:
            folder = self.root / "chroma"
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                self._client = embedded_client(folder)
            except Exception as exc:  # noqa: BLE001 - chromadb raises its own types, or a bare InternalError
                # Without its folder, Chroma could not even make it: a read-only place, not a damaged index.
                raise self._failure(exc, "" if folder.is_dir() else Blocked.DENIED) from None
        return self._client

    def _failure(self, exc: BaseException, kind: str = "") -> CragError:
        """What a failure of Chroma's to open or list its folder means: a cause that leaves the index as it is
        (``IndexInaccessible``), or a folder Chroma cannot read (``ChromaUnreadable``, moved aside by a build)."""
        kind = blocked(exc) or kind
        if kind:
            return IndexInaccessible(Blocked(kind), self.where, str(exc)[:300])
        return ChromaUnreadable(
            f"Chroma cannot read the index in {self.root} ({str(exc)[:300]}): rebuild the knowledge base. The build "
            f"moves what it cannot read to {self.root / 'broken-<time>'}, it deletes nothing.",
            detail=str(exc)[:300],
        )

    def _collection_names(self) -> list[str]:
        """The collections in Chroma's folder: a build's first read of it, where a database it cannot read shows."""
        client = self.client
        try:
            listed = client.list_collections()
        except Exception as exc:  # noqa: BLE001 - as in ``client``
            raise self._failure(exc) from None
        return [c if isinstance(c, str) else c.name for c in listed]

    def set_aside(self, damage: RebuildNeeded) -> str:
        """Move what a build cannot read out of its way, never deleting it; what went where, for the build's report.
        Chroma's folder goes with the pointer and the generations' files (they belong together); a pointer that
        cannot be read goes alone, and the generations it named are removed once a new one is committed."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        with blocked_is_said(self.where):
            if not isinstance(damage, ChromaUnreadable):
                moved = _unique(self.active_path.with_name(f"{self.active_path.name}.broken-{stamp}"))
                self.active_path.rename(moved)
                _sync_dir(self.root)
                return (
                    f"The index pointer {self.active_path} could not be read; it was moved to {moved.name}, and this "
                    "build indexed every PDF anew."
                )
            self._client = None
            forget_embedded()  # the process's Chroma keeps the folder's database open
            moved = _unique(self.root / f"broken-{stamp}")
            moved.mkdir()
            for path in (self.root / "chroma", self.generations, self.active_path):
                if path.exists():
                    path.rename(moved / path.name)
            _sync_dir(self.root)
        return (
            f"Chroma could not read the index in {self.root} ({damage.detail}). It was moved to {moved}, not deleted, "
            f"and this build indexed every PDF anew. Once the knowledge base answers again, delete {moved.name} to "
            "free its space (or keep it for a closer look)."
        )

    def active(self, max_age: float = 0.0) -> Generation | None:
        """The generation that answers: the pointer's, or the one before it while the pointer's files are
        incomplete (``fallback`` says why). ``max_age`` lets a server-backed store answer from a recent read;
        here the pointer is a local file, always read afresh."""
        answering = self._answering()
        return answering.generation if answering else None

    def _pointer(self) -> tuple[Pointed, Pointed | None] | None:
        """The generation the pointer names and the one before it."""
        try:
            with blocked_is_said(self.where):  # permissions: said as such; the pointer is not damaged
                text = self.active_path.read_text(encoding="utf-8")
            data = json.loads(text)
            previous = data.get("previous")
            return Pointed.from_json(data), Pointed.from_json(previous) if previous else None
        except FileNotFoundError:
            return None
        except (ValueError, TypeError, AttributeError) as exc:
            raise RebuildNeeded(
                f"The index pointer {self.active_path} is damaged ({exc}): rebuild the index."
            ) from None

    def _answering(self) -> Pointed | None:
        pointer = self._pointer()
        if pointer is None:
            return None
        current, previous = pointer
        why = self._incomplete(current)
        self.fallback = ""
        if not why or previous is None or self._incomplete(previous):
            return current  # whole, or nothing better: opening it says what is wrong
        self.fallback = (
            f"The index built at {current.generation.built_at} in {self.root} is incomplete on disk ({why}), as "
            f"after a power loss just after its build: the one built at {previous.generation.built_at} answers "
            "meanwhile. Rebuild the knowledge base to bring it up to date."
        )
        return previous

    def _incomplete(self, pointed: Pointed) -> str:
        """What of a generation's files is missing or shorter than when it was written; "" when nothing is."""
        folder = self.generations / pointed.generation.id
        for name, size in pointed.sizes.items():
            try:
                found = (folder / name).stat().st_size
            except OSError:
                return f"{name} is missing"
            if found != size:
                return f"{name} has {found:,} of its {size:,} bytes"
        return ""

    def manifest(self) -> list[FileResult]:
        """Per-file records of the active generation: hash, parser, chunks, status, error."""
        gen = self.active()
        if gen is None:
            return []
        return read_manifest(self.generations / gen.id)

    @contextmanager
    def build_lock(self) -> Iterator[None]:
        """One build at a time, across processes. The OS drops the lock when its holder dies."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / "build.lock"
        lock = FileLock(path, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            holder = path.read_text(encoding="utf-8", errors="replace").strip() or "another process"
            raise BuildInProgress(
                f"A knowledge-base build is already running ({holder}): wait for it to finish."
            ) from None
        try:
            path.write_text(f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}", encoding="utf-8")
            yield
        finally:
            with suppress(OSError):
                path.write_text("", encoding="utf-8")
            lock.release()

    def collect_garbage(self) -> list[str]:
        """Remove the generations the pointer does not name (leftovers of builds that died, the one before the
        previous). Call under the lock. A pointer whose files are incomplete is moved back to the generation
        that answers in its place, so a build that finds nothing to change leaves a whole index behind."""
        answering = self._answering()
        if self.fallback and answering is not None:
            _write_json_atomic(self.active_path, answering.to_json())
            self.fallback = ""
        pointer = self._pointer()
        keep = {p.generation.id for p in pointer or () if p is not None}
        removed = []
        for name in self._collection_names():
            if name.startswith("gen-") and name not in keep:
                with blocked_is_said(self.where):
                    self.client.delete_collection(name)
                removed.append(name)
        if self.generations.exists():
            for folder in self.generations.iterdir():
                if folder.name not in keep:
                    shutil.rmtree(folder, ignore_errors=True)
                    removed.append(folder.name)
        return sorted(set(removed))

    def verify(self) -> str | None:
        """None when the active index opens and agrees with itself; else what is wrong and the fix.

        Cheap to call on every page view: the full check runs again only when the files on disk change.
        """
        try:
            gen = self.active()
        except RebuildNeeded as exc:
            return str(exc)
        if gen is None:
            return None
        watched = [self.root / "chroma" / "chroma.sqlite3", *(self.generations / gen.id).glob("*")]
        key = (str(self.root), gen.id, tuple((str(p), _stamp(p)) for p in watched))
        if key not in _verified:
            try:
                IndexReader(self, gen)
                _verified[key] = None
            except RebuildNeeded as exc:
                _verified[key] = str(exc)
        return _verified[key] or self.fallback or None

    def writer(self, embedder: str, dimension: int, chunking: dict[str, Any]) -> GenerationWriter:
        return LocalWriter(self, embedder, dimension, chunking)

    def reader(self) -> IndexReader | None:
        gen = self.active()
        return IndexReader(self, gen) if gen else None

    def _open(self, generation: Generation) -> Opened:
        folder = self.generations / generation.id
        try:
            lines = (folder / "chunks.jsonl").read_text(encoding="utf-8").splitlines()
            chunks = [chunk_from_json(json.loads(line)) for line in lines]
            collection = self.client.get_collection(generation.id)
            lexical = LexicalIndex.load(folder / "bm25", len(chunks)) if chunks else None
            manifest = read_manifest(folder)
        except CragError:
            raise
        except Exception as exc:  # noqa: BLE001 - chromadb raises its own types for a missing collection
            if said := inaccessible(exc, self.where):
                raise said from None
            raise RebuildNeeded(f"The index in {self.root} is damaged ({exc}): rebuild the knowledge base.") from None
        return Opened(chunks, collection, lexical, manifest)


_verified: dict[tuple, str | None] = {}


def read_manifest(folder: Path) -> list[FileResult]:
    """A generation's per-file records."""
    return [FileResult.from_json(m) for m in json.loads((folder / "manifest.json").read_text(encoding="utf-8"))]


def _unique(path: Path) -> Path:
    """``path``, or with a number after it when that name is taken (two builds set aside in one second)."""
    n = 1
    found = path
    while found.exists():
        n += 1
        found = path.with_name(f"{path.name}-{n}")
    return found


def _stamp(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except OSError:
        return (0, -1)
    return (st.st_mtime_ns, st.st_size)


class LocalWriter(GenerationWriter):
    """Writes the generation's files beside its collection; ``commit`` swaps ``ACTIVE.json``."""

    store: Store

    def _prepare(self) -> None:
        self.folder = self.store.generations / self.id
        with blocked_is_said(self.store.where):
            self.folder.mkdir(parents=True)

    def _discard(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def commit(self, manifest: list[FileResult]) -> Generation:
        """Write the lexical index and the manifest, sync them to the disk, then make this generation the active
        one. The generation that answered until now stays, for a pointer whose files a power loss cut short."""
        with blocked_is_said(self.store.where):  # a full disk here leaves the pointer where it was
            return self._commit(manifest)

    def _commit(self, manifest: list[FileResult]) -> Generation:
        with (self.folder / "chunks.jsonl").open("w", encoding="utf-8") as fh:
            for chunk in self.chunks:
                fh.write(json.dumps(chunk_to_json(chunk), ensure_ascii=False) + "\n")
        lexical = self.lexical or build_lexical(self.chunks)
        if lexical is not None:
            lexical.save(self.folder / "bm25")
        entries = [dataclasses.asdict(m) for m in manifest]
        (self.folder / "manifest.json").write_text(json.dumps(entries, ensure_ascii=False, indent=1), "utf-8")
        current = Pointed(self.generation(manifest), _sync_tree(self.folder))
        _sync_dir(self.store.generations)
        _sync_dir(self.store.root)
        previous = self.store._answering()
        pointer = current.to_json()
        if previous is not None and previous.generation.id != self.id:
            pointer["previous"] = previous.to_json()
        _write_json_atomic(self.store.active_path, pointer)  # the swap
        # The generation before the previous one goes: readers still on it re-read the pointer and follow.
        with suppress(Exception):  # a leftover is collected by the next build
            self.store.collect_garbage()
        return current.generation
