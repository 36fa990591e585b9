"""The embedded index: a local folder that one machine's processes share.

Layout of ``chroma_db/``::

    ACTIVE.json              which generation answers queries, and how it was built
    chroma/                  Chroma's PersistentClient: one collection per generation
    generations/<id>/        chunks.jsonl, manifest.json, bm25/ of that generation
    build.lock               held by the one build that may run at a time

A build writes a new generation beside the active one and swaps ``ACTIVE.json`` (``os.replace``)
only when everything is on disk. A build that is cancelled, crashes or is killed leaves the
active generation untouched; its leftovers are removed by the next build.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from crag.store.chroma import embedded_client, forget_embedded
from crag.store.common import BuildInProgress, Generation, RebuildNeeded, chunk_from_json, chunk_to_json
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
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class Store:
    """The ``chroma_db/`` folder (embedded Chroma). ``ServerStore`` is the same interface over a Chroma server."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.active_path = root / "ACTIVE.json"
        self.generations = root / "generations"
        self._client: Any = None

    @property
    def where(self) -> str:
        return f"in {self.root}"

    @property
    def client(self) -> Any:
        if self._client is None:
            self.root.mkdir(parents=True, exist_ok=True)
            try:
                self._client = embedded_client(self.root / "chroma")
            except Exception as exc:  # noqa: BLE001 - chromadb raises its own types for a damaged database
                raise RebuildNeeded(
                    f"The index in {self.root} is damaged ({exc}): rebuild the knowledge base."
                ) from None
        return self._client

    def discard(self) -> None:
        """Drop a damaged index so the next build starts clean. The index is derived data: the PDFs
        are never touched, and a rebuild recreates everything."""
        self._client = None
        forget_embedded()
        for path in (self.root / "chroma", self.generations):
            shutil.rmtree(path, ignore_errors=True)
        self.active_path.unlink(missing_ok=True)

    def active(self, max_age: float = 0.0) -> Generation | None:
        """The generation that answers. ``max_age`` lets a server-backed store answer from a recent read;
        here the pointer is a local file, always read afresh."""
        try:
            data = json.loads(self.active_path.read_text(encoding="utf-8"))
            return Generation(**data)
        except FileNotFoundError:
            return None
        except (ValueError, TypeError) as exc:
            raise RebuildNeeded(
                f"The index pointer {self.active_path} is damaged ({exc}): rebuild the index."
            ) from None

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
        with (self.root / "build.lock").open("a+") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.seek(0)
                holder = fh.read().strip() or "another process"
                raise BuildInProgress(
                    f"A knowledge-base build is already running ({holder}): wait for it to finish."
                ) from None
            fh.seek(0)
            fh.truncate()
            fh.write(f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}")
            fh.flush()
            try:
                yield
            finally:
                fh.truncate(0)
                fcntl.flock(fh, fcntl.LOCK_UN)

    def collect_garbage(self) -> list[str]:
        """Remove generations that are not active: leftovers of builds that died. Call under the lock."""
        gen = self.active()
        keep = gen.id if gen else None
        removed = []
        for collection in self.client.list_collections():
            name = collection if isinstance(collection, str) else collection.name
            if name.startswith("gen-") and name != keep:
                self.client.delete_collection(name)
                removed.append(name)
        if self.generations.exists():
            for folder in self.generations.iterdir():
                if folder.name != keep:
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
        return _verified[key]

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
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RebuildNeeded(f"The index in {self.root} is damaged ({exc}): rebuild the knowledge base.") from None
        except Exception as exc:  # noqa: BLE001 - chromadb raises its own types for a missing collection
            raise RebuildNeeded(f"The index in {self.root} is damaged ({exc}): rebuild the knowledge base.") from None
        return Opened(chunks, collection, lexical, manifest)


_verified: dict[tuple, str | None] = {}


def read_manifest(folder: Path) -> list[FileResult]:
    """A generation's per-file records."""
    return [FileResult.from_json(m) for m in json.loads((folder / "manifest.json").read_text(encoding="utf-8"))]


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
        self.folder.mkdir(parents=True)

    def commit(self, manifest: list[FileResult]) -> Generation:
        """Write the lexical index and the manifest, then make this generation the active one."""
        with (self.folder / "chunks.jsonl").open("w", encoding="utf-8") as fh:
            for chunk in self.chunks:
                fh.write(json.dumps(chunk_to_json(chunk), ensure_ascii=False) + "\n")
        lexical = build_lexical(self.chunks)
        if lexical is not None:
            lexical.save(self.folder / "bm25")
        entries = [dataclasses.asdict(m) for m in manifest]
        (self.folder / "manifest.json").write_text(json.dumps(entries, ensure_ascii=False, indent=1), "utf-8")
        gen = self.generation(manifest)
        previous = self.store.active()
        _write_json_atomic(self.store.active_path, dataclasses.asdict(gen))  # the swap
        if previous and previous.id != self.id:
            self.store.client.delete_collection(previous.id)
            shutil.rmtree(self.store.generations / previous.id, ignore_errors=True)
        return gen
