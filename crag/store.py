"""The index: Chroma (dense) and BM25 (lexical), written in generations and swapped atomically.

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
import secrets
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import bm25s
import chromadb
import numpy as np

from crag.errors import CragError
from crag.text import lexical_tokens
from crag.text import phrase as text_phrase
from crag.types import Chunk, FileResult, ScoredChunk

Mode = Literal["dense", "lexical", "hybrid"]
RRF_K = 60  # the usual reciprocal-rank-fusion constant: damps the head without flattening it


class RebuildNeeded(CragError):
    """The index on disk cannot answer with the current settings."""


class BuildInProgress(CragError):
    """Another build holds the lock. ``job`` names it when it is a job of this process."""

    def __init__(self, message: str, job: str = "") -> None:
        super().__init__(message)
        self.job = job


def index_text(chunk: Chunk) -> str:
    """What gets embedded and matched: the heading path gives a chunk the context of its section."""
    return f"{chunk.section}\n{chunk.text}" if chunk.section else chunk.text


# ---------------------------------------------------------------------------------------------
# Generations


@dataclass(frozen=True)
class Generation:
    """What ACTIVE.json says about the generation that answers queries."""

    id: str
    built_at: str
    embedder: str
    dimension: int
    chunking: dict[str, Any]
    files: int
    chunks: int


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


def chunk_to_json(chunk: Chunk) -> dict[str, Any]:
    return dataclasses.asdict(chunk)


def chunk_from_json(data: dict[str, Any]) -> Chunk:
    return Chunk(
        **{
            **data,
            "pages": tuple(data["pages"]),
            "bboxes": tuple(tuple(b) for b in data["bboxes"]),
            "block_types": tuple(data["block_types"]),
        }
    )


class Store:
    """The ``chroma_db/`` folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.active_path = root / "ACTIVE.json"
        self.generations = root / "generations"
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self.root.mkdir(parents=True, exist_ok=True)
            try:
                self._client = chromadb.PersistentClient(
                    path=str(self.root / "chroma"), settings=chromadb.Settings(anonymized_telemetry=False)
                )
            except Exception as exc:  # noqa: BLE001 - chromadb raises its own types for a damaged database
                raise RebuildNeeded(
                    f"The index in {self.root} is damaged ({exc}): rebuild the knowledge base."
                ) from None
        return self._client

    def discard(self) -> None:
        """Drop a damaged index so the next build starts clean. The index is derived data: the PDFs
        are never touched, and a rebuild recreates everything."""
        from chromadb.api.client import SharedSystemClient

        self._client = None
        SharedSystemClient.clear_system_cache()  # chromadb keeps one client per path per process
        for path in (self.root / "chroma", self.generations):
            shutil.rmtree(path, ignore_errors=True)
        self.active_path.unlink(missing_ok=True)

    def active(self) -> Generation | None:
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
        return GenerationWriter(self, embedder, dimension, chunking)

    def reader(self) -> IndexReader | None:
        gen = self.active()
        return IndexReader(self, gen) if gen else None


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


class GenerationWriter:
    """A generation being built. Nothing is visible to queries until ``commit``."""

    def __init__(self, store: Store, embedder: str, dimension: int, chunking: dict[str, Any]) -> None:
        self.store = store
        self.id = f"gen-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        self.embedder, self.dimension, self.chunking = embedder, dimension, chunking
        self.folder = store.generations / self.id
        self.folder.mkdir(parents=True)
        # The collection describes itself too, so it can be checked without ACTIVE.json.
        metadata = {"hnsw:space": "cosine", "embedder": embedder, **{k: str(v) for k, v in chunking.items()}}
        self.collection = store.client.create_collection(self.id, metadata=metadata, embedding_function=None)
        self.chunks: list[Chunk] = []

    def add(self, chunks: Sequence[Chunk], embeddings: Sequence[Sequence[float]]) -> None:
        if not chunks:
            return
        for start in range(0, len(chunks), 1000):
            part = chunks[start : start + 1000]
            self.collection.add(
                ids=[c.id for c in part],
                embeddings=np.asarray(embeddings[start : start + 1000], dtype=np.float32),
                documents=[c.text for c in part],
                metadatas=[{"file": c.file} for c in part],
            )
        self.chunks.extend(chunks)

    def carry(self, reader: IndexReader, file: str) -> int:
        """Copy an unchanged file's chunks and vectors from the active generation: no parsing, no embedding."""
        chunks = [c for c in reader.chunks if c.file == file]
        if chunks:
            got = reader.collection.get(ids=[c.id for c in chunks], include=["embeddings"])
            by_id = dict(zip(got["ids"], got["embeddings"], strict=True))
            self.add(chunks, [by_id[c.id] for c in chunks])
        return len(chunks)

    def commit(self, manifest: list[FileResult]) -> Generation:
        """Write the lexical index and the manifest, then make this generation the active one."""
        with (self.folder / "chunks.jsonl").open("w", encoding="utf-8") as fh:
            for chunk in self.chunks:
                fh.write(json.dumps(chunk_to_json(chunk), ensure_ascii=False) + "\n")
        if self.chunks:
            bm25 = bm25s.BM25()
            bm25.index([lexical_tokens(index_text(c)) or [""] for c in self.chunks], show_progress=False)
            bm25.save(str(self.folder / "bm25"), show_progress=False)
        entries = [dataclasses.asdict(m) for m in manifest]
        (self.folder / "manifest.json").write_text(json.dumps(entries, ensure_ascii=False, indent=1), "utf-8")
        gen = Generation(
            id=self.id,
            built_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            embedder=self.embedder,
            dimension=self.dimension,
            chunking=self.chunking,
            files=sum(1 for m in manifest if m.status in ("indexed", "unchanged")),
            chunks=len(self.chunks),
        )
        previous = self.store.active()
        _write_json_atomic(self.store.active_path, dataclasses.asdict(gen))  # the swap
        if previous and previous.id != self.id:
            self.store.client.delete_collection(previous.id)
            shutil.rmtree(self.store.generations / previous.id, ignore_errors=True)
        return gen


class IndexReader:
    """One generation, opened for queries."""

    def __init__(self, store: Store, generation: Generation) -> None:
        self.generation = generation
        folder = store.generations / generation.id
        try:
            lines = (folder / "chunks.jsonl").read_text(encoding="utf-8").splitlines()
            self.chunks = [chunk_from_json(json.loads(line)) for line in lines]
            self.collection = store.client.get_collection(generation.id)
            self.bm25 = bm25s.BM25.load(str(folder / "bm25"), mmap=False) if self.chunks else None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RebuildNeeded(f"The index in {store.root} is damaged ({exc}): rebuild the knowledge base.") from None
        except Exception as exc:  # noqa: BLE001 - chromadb raises its own types for a missing collection
            raise RebuildNeeded(f"The index in {store.root} is damaged ({exc}): rebuild the knowledge base.") from None
        expected = {m.file: m.chunks for m in read_manifest(folder) if m.status in ("indexed", "unchanged")}
        actual: dict[str, int] = {}
        for chunk in self.chunks:
            actual[chunk.file] = actual.get(chunk.file, 0) + 1
        if expected != actual or generation.chunks != len(self.chunks):
            raise RebuildNeeded(
                f"The index in {store.root} disagrees with its manifest (files or chunk counts differ): "
                "rebuild the knowledge base."
            )
        if self.collection.count() != len(self.chunks):
            raise RebuildNeeded(
                f"The index in {store.root} is inconsistent ({self.collection.count()} vectors for "
                f"{len(self.chunks)} chunks): rebuild the knowledge base."
            )
        self.by_id = {c.id: c for c in self.chunks}
        self.n_docs = len(self.chunks)
        self._df: dict[str, int] | None = None
        self._phrases: str | None = None

    def doc_frequency(self, token: str) -> int:
        """In how many chunks a lexical token occurs: the index's own IDF, read off the BM25 matrix."""
        if self._df is None:
            if self.bm25 is None:
                self._df = {}
            else:
                indptr = self.bm25.scores["indptr"]
                self._df = {t: int(indptr[i + 1] - indptr[i]) for t, i in self.bm25.vocab_dict.items() if t}
        return self._df.get(token, 0)

    def mentions(self, phrase: str) -> bool:
        """Whether any chunk contains this ``text.phrase`` (a name, an identifier)."""
        if self._phrases is None:
            self._phrases = "\n".join(text_phrase(index_text(c)) for c in self.chunks)
        return phrase in self._phrases

    def vectors(self, ids: Sequence[str]) -> list[list[float]]:
        """The stored vectors of these chunks, in order."""
        got = self.collection.get(ids=list(ids), include=["embeddings"])
        by_id = dict(zip(got["ids"], got["embeddings"], strict=True))
        return [by_id[i] for i in ids]

    def check_embedder(self, embedder: str) -> None:
        if embedder != self.generation.embedder:
            raise RebuildNeeded(
                f"Rebuild needed: the index was built with embeddings from {self.generation.embedder}, "
                f"but the app now uses {embedder}. Run a full rebuild (Rebuild knowledge base with "
                "'full rebuild', or `python -m crag index --rebuild`)."
            )

    def dense(self, vector: Sequence[float], n: int) -> list[ScoredChunk]:
        if not self.chunks:
            return []
        got = self.collection.query(
            query_embeddings=[list(vector)], n_results=min(n, len(self.chunks)), include=["distances"]
        )
        return [
            ScoredChunk(self.by_id[i], 1.0 - float(d)) for i, d in zip(got["ids"][0], got["distances"][0], strict=True)
        ]

    def lexical(self, query: str, n: int) -> list[ScoredChunk]:
        tokens = lexical_tokens(query)
        if not self.bm25 or not tokens:
            return []
        docs, scores = self.bm25.retrieve([tokens], k=min(n, len(self.chunks)), show_progress=False, n_threads=1)
        return [ScoredChunk(self.chunks[int(i)], float(s)) for i, s in zip(docs[0], scores[0], strict=True) if s > 0]

    def search(
        self, query: str, vector: Sequence[float] | None, k: int, mode: Mode = "hybrid", dense_weight: float = 1.0
    ) -> list[ScoredChunk]:
        if mode == "dense":
            return self.dense(vector or [], k)
        if mode == "lexical":
            return self.lexical(query, k)
        pool = max(4 * k, 20)
        return fuse([self.dense(vector or [], pool), self.lexical(query, pool)], [dense_weight, 1.0])[:k]


def bm25_rank(texts: Sequence[str], tokenize, queries: Sequence[str], n: int) -> list[list[tuple[int, float]]]:
    """A throwaway in-memory BM25 over ``texts``: (row, score) per query, best first. For baselines."""
    bm25 = bm25s.BM25()
    bm25.index([tokenize(t) or [""] for t in texts], show_progress=False)
    out = []
    for query in queries:
        tokens = tokenize(query)
        if not tokens:
            out.append([])
            continue
        docs, scores = bm25.retrieve([tokens], k=min(n, len(texts)), show_progress=False, n_threads=1)
        out.append([(int(d), float(s)) for d, s in zip(docs[0], scores[0], strict=True) if s > 0])
    return out


def fuse(rankings: Sequence[Sequence[ScoredChunk]], weights: Sequence[float] | None = None) -> list[ScoredChunk]:
    """Reciprocal rank fusion: each list votes weight/(RRF_K + rank) for its chunks."""
    scores: dict[str, float] = {}
    chunks: dict[str, Chunk] = {}
    for ranking, weight in zip(rankings, weights or [1.0] * len(rankings), strict=True):
        for rank, hit in enumerate(ranking, start=1):
            scores[hit.chunk.id] = scores.get(hit.chunk.id, 0.0) + weight / (RRF_K + rank)
            chunks[hit.chunk.id] = hit.chunk
    return [ScoredChunk(chunks[i], s) for i, s in sorted(scores.items(), key=lambda kv: -kv[1])]
