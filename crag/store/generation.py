"""A generation of the index: written by a ``GenerationWriter``, opened for queries by an ``IndexReader``.

Both work on either backend. A backend (the embedded ``Store``, the ``ServerStore``) creates the
collection through its client, finishes a writer's ``commit`` and loads what a reader needs (``_open``).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from crag.errors import Remedy
from crag.overview import Overview, overview
from crag.scope import EVERYTHING, Scope, resolve
from crag.store.common import (
    Generation,
    Mode,
    RebuildNeeded,
    blocked_is_said,
    fuse_top,
    inaccessible,
    index_text,
    new_generation_id,
)
from crag.store.lexical import LexicalIndex
from crag.store.scoped import ScopeView, VectorCache
from crag.terms import TermStats, Vocabulary
from crag.text import document_language, lexical_tokens
from crag.types import Chunk, FileResult, ScoredChunk

WRITE_BATCH = 1000  # records per Chroma request; a server refuses batches over ~5000
SCOPES_KEPT = 64  # resolved scopes a reader keeps (their rows and masks; the vectors are shared), at most


@dataclass(frozen=True)
class Opened:
    """What a backend loads for one generation."""

    chunks: list[Chunk]  # in the order they were written: the lexical index's rows
    collection: Any
    lexical: LexicalIndex | None
    manifest: list[FileResult]


class Backend(Protocol):
    @property
    def client(self) -> Any: ...  # a Chroma client

    @property
    def where(self) -> str: ...  # "in chroma_db" or "on the Chroma server at ...": for messages

    def _open(self, generation: Generation) -> Opened: ...


def chunk_tokens(chunk: Chunk) -> list[str]:
    """What BM25 indexes of a chunk (jieba words for Chinese, stemmed English words)."""
    return lexical_tokens(index_text(chunk))


def build_lexical(chunks: Sequence[Chunk], tokens: Sequence[Sequence[str] | None] = ()) -> LexicalIndex | None:
    """BM25 over the chunks, in order. ``tokens`` may hold each chunk's tokens, already cut (None: cut now)."""
    if not chunks:
        return None
    cut = tokens or [None] * len(chunks)
    return LexicalIndex.build([t if t is not None else chunk_tokens(c) for c, t in zip(chunks, cut, strict=True)])


class GenerationWriter:
    """A generation being built. Nothing is visible to queries until ``commit``."""

    def __init__(self, store: Backend, embedder: str, dimension: int, chunking: dict[str, Any]) -> None:
        self.store = store
        self.id = new_generation_id()
        self.embedder, self.dimension, self.chunking = embedder, dimension, chunking
        self._prepare()
        # The collection describes itself too, so it can be checked without the pointer.
        metadata = {"hnsw:space": "cosine", "embedder": embedder, **{k: str(v) for k, v in chunking.items()}}
        with blocked_is_said(store.where):
            self.collection = store.client.create_collection(self.id, metadata=metadata, embedding_function=None)
        self.chunks: list[Chunk] = []
        # The lexical index to commit, when it comes made (an imported archive's); else it is built from the chunks.
        self.lexical: LexicalIndex | None = None

    def _prepare(self) -> None:
        """Whatever the backend needs before the collection exists."""

    def _metadatas(self, chunks: Sequence[Chunk], first: int) -> list[dict[str, Any]]:
        """Per-chunk metadata; ``first`` is the position of ``chunks[0]`` in the generation."""
        return [{"file": c.file} for c in chunks]

    def add(self, chunks: Sequence[Chunk], embeddings: Sequence[Sequence[float]] | np.ndarray) -> None:
        if not chunks:
            return
        for start in range(0, len(chunks), WRITE_BATCH):
            part = chunks[start : start + WRITE_BATCH]
            with blocked_is_said(self.store.where):  # a full disk: the build stops, the index that answers stays
                self.collection.add(
                    ids=[c.id for c in part],
                    embeddings=np.asarray(embeddings[start : start + WRITE_BATCH], dtype=np.float32),
                    documents=[c.text for c in part],
                    metadatas=self._metadatas(part, len(self.chunks) + start),
                )
        self.chunks.extend(chunks)

    def carry(self, reader: IndexReader, file: str, as_file: str = "") -> int:
        """Copy an unchanged file's chunks and vectors from the active generation: no parsing, no embedding.
        ``as_file``: the file's name now, when it was moved or renamed (its chunks keep their ids: they are named
        after its content)."""
        chunks = [c for c in reader.chunks if c.file == file]
        if chunks:
            vectors = reader.vectors([c.id for c in chunks])
            self.add([replace(c, file=as_file) for c in chunks] if as_file else chunks, vectors)
        return len(chunks)

    def abort(self) -> None:
        """Remove what this writer wrote, never committed (an import refused halfway): the index that answers stays,
        and nothing is left for the next build to collect. A failure here leaves a leftover that the next build
        removes."""
        with suppress(Exception):
            self.store.client.delete_collection(self.id)
        self._discard()

    def _discard(self) -> None:
        """Whatever the backend wrote besides the collection."""

    def generation(self, manifest: list[FileResult]) -> Generation:
        return Generation(
            id=self.id,
            built_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            embedder=self.embedder,
            dimension=self.dimension,
            chunking=self.chunking,
            files=sum(1 for m in manifest if m.status in ("indexed", "unchanged")),
            chunks=len(self.chunks),
        )

    def commit(self, manifest: list[FileResult]) -> Generation:
        """Make this generation the active one, complete, in one step."""
        raise NotImplementedError


class IndexReader:
    """One generation, opened for queries. Checked against its manifest before it answers."""

    def __init__(self, store: Backend, generation: Generation) -> None:
        self.generation = generation
        self.where = store.where
        opened = store._open(generation)
        self.chunks, self.collection, self._bm25 = opened.chunks, opened.collection, opened.lexical
        self.manifest = opened.manifest
        expected = {m.file: m.chunks for m in opened.manifest if m.status in ("indexed", "unchanged")}
        actual: dict[str, int] = {}
        for chunk in self.chunks:
            actual[chunk.file] = actual.get(chunk.file, 0) + 1
        if expected != actual or generation.chunks != len(self.chunks):
            raise RebuildNeeded(
                f"The index {store.where} disagrees with its manifest (files or chunk counts differ): "
                "rebuild the knowledge base."
            )
        try:
            count = self.collection.count()
        except Exception as exc:  # noqa: BLE001 - chromadb raises its own types for a missing collection
            if said := inaccessible(exc, store.where):
                raise said from None
            raise RebuildNeeded(f"The index {store.where} is damaged ({exc}): rebuild the knowledge base.") from None
        if count != len(self.chunks):
            raise RebuildNeeded(
                f"The index {store.where} is inconsistent ({count} vectors for "
                f"{len(self.chunks)} chunks): rebuild the knowledge base."
            )
        self.by_id = {c.id: c for c in self.chunks}
        self.n_docs = len(self.chunks)
        self._df: dict[str, int] | None = None
        self._vocabulary: Vocabulary | None = None
        self._languages: dict[str, str] | None = None
        # Resolved scopes, the last asked last; None for a scope that holds every chunk (searched as unscoped).
        self._views: OrderedDict[tuple[str, ...], ScopeView | None] = OrderedDict()
        self._views_lock = threading.Lock()
        self._overviews: dict[str, Overview | None] = {}
        self._by_file: dict[str, list[Chunk]] | None = None
        self._vectors = VectorCache(self.chunks, self.vectors)

    def scoped(self, scope: Scope, files_dir: Path | None = None) -> ScopeView | None:
        """The scope resolved against this generation (``crag.scope.resolve`` raises for one it does not hold);
        None for every document, or for a scope that holds every chunk. ``files_dir``: for the message of a folder
        that is in the files folder but not indexed yet."""
        if not scope:
            return None
        with self._views_lock:
            if scope.paths in self._views:
                self._views.move_to_end(scope.paths)
                return self._views[scope.paths]
        files = resolve(scope, self.manifest, files_dir)
        rows = np.flatnonzero([chunk.file in files for chunk in self.chunks])
        view = (
            ScopeView(scope, files, rows, self.chunks, self._bm25, self._vectors) if len(rows) < self.n_docs else None
        )
        with self._views_lock:
            self._views[scope.paths] = view
            if len(self._views) > SCOPES_KEPT:
                self._views.popitem(last=False)
        return view

    def stats(self, scope: Scope = EVERYTHING) -> TermStats:
        """The term statistics of a scope: the near-miss check judges a question against its documents alone."""
        return self.scoped(scope) or self

    def doc_frequency(self, token: str) -> int:
        """In how many chunks a lexical token occurs: the index's own IDF, read off the BM25 matrix."""
        if self._df is None:
            self._df = self._bm25.doc_frequencies() if self._bm25 else {}
        return self._df.get(token, 0)

    @property
    def vocabulary(self) -> Vocabulary:
        """Every chunk, prepared for finding a term in any form (built on first use: a near-miss check needs it)."""
        if self._vocabulary is None:
            self._vocabulary = Vocabulary([index_text(c) for c in self.chunks])
        return self._vocabulary

    def file_languages(self, scope: Scope = EVERYTHING) -> dict[str, str]:
        """Each file's language (of the scope's files): ``zh``, ``en`` or ``mixed``, judged passage by passage."""
        if self._languages is None:
            passages: dict[str, list[str]] = {}
            for chunk in self.chunks:
                passages.setdefault(chunk.file, []).append(chunk.text)
            self._languages = {file: document_language(texts) for file, texts in passages.items()}
        view = self.scoped(scope)
        return {f: lang for f, lang in self._languages.items() if f in view.files} if view else self._languages

    def overview(self, file: str) -> Overview | None:
        """What one document is, for questions about the whole of it (``crag.overview``), made once per generation
        from its chunks and its manifest entry; None for a file this generation does not hold."""
        with self._views_lock:
            if self._by_file is None:  # grouped once: a question about many documents reads each once
                self._by_file = {}
                for chunk in self.chunks:
                    self._by_file.setdefault(chunk.file, []).append(chunk)
            if file not in self._overviews:
                record = next((m for m in self.manifest if m.file == file), None)
                self._overviews[file] = overview(file, self._by_file.get(file, []), record)
            return self._overviews[file]

    def save_lexical(self, folder: Path) -> bool:
        """Write the generation's lexical index (BM25) into ``folder``, as the embedded index keeps it; False when it
        has none (no chunks)."""
        if self._bm25 is None:
            return False
        self._bm25.save(folder)
        return True

    def vectors(self, ids: Sequence[str]) -> list[list[float]]:
        """The stored vectors of these chunks, in order."""
        by_id: dict[str, Any] = {}
        for start in range(0, len(ids), WRITE_BATCH):
            with blocked_is_said(self.where):
                got = self.collection.get(ids=list(ids[start : start + WRITE_BATCH]), include=["embeddings"])
            by_id.update(zip(got["ids"], got["embeddings"], strict=True))
        return [by_id[i] for i in ids]

    def check_embedder(self, embedder: str) -> None:
        if embedder != self.generation.embedder:
            raise RebuildNeeded(
                f"Rebuild needed: the index was built with embeddings from {self.generation.embedder}, "
                f"but the app now uses {embedder}.",
                remedy=Remedy.FULL_REBUILD,
            )

    def dense(self, vector: Sequence[float], n: int, scope: Scope = EVERYTHING) -> list[ScoredChunk]:
        """The ``n`` chunks of the scope closest to ``vector`` (``crag.store.scoped`` says how a scope is searched)."""
        view = self.scoped(scope)
        if view is not None and view.n_docs * 2 >= self.n_docs:  # most of the index: its graph, asked deeper
            wanted = min(n, view.n_docs)
            inside = [
                h for h in self._nearest(vector, n + n * self.n_docs // view.n_docs) if h.chunk.file in view.files
            ]
            if len(inside) >= wanted:
                return inside[:wanted]
        if view is not None:
            return [ScoredChunk(chunk=self.chunks[row], score=score) for row, score in view.dense(vector, n)]
        return self._nearest(vector, n)

    def _nearest(self, vector: Sequence[float], n: int) -> list[ScoredChunk]:
        """The HNSW graph's ``n`` nearest chunks, in Chroma."""
        if not self.chunks:
            return []
        got = self.collection.query(
            query_embeddings=[list(vector)], n_results=min(n, len(self.chunks)), include=["distances"]
        )
        return [
            ScoredChunk(chunk=self.by_id[i], score=1.0 - float(d))
            for i, d in zip(got["ids"][0], got["distances"][0], strict=True)
        ]

    def lexical(self, query: str, n: int, scope: Scope = EVERYTHING) -> list[ScoredChunk]:
        if self._bm25 is None:
            return []
        view = self.scoped(scope)
        mask = view.mask if view else None
        return [
            ScoredChunk(chunk=self.chunks[row], score=score)
            for row, score in self._bm25.retrieve(lexical_tokens(query), n, mask)
        ]

    def search(
        self,
        query: str,
        vector: Sequence[float] | None,
        k: int,
        mode: Mode = "hybrid",
        dense_weight: float = 1.0,
        scope: Scope = EVERYTHING,
    ) -> list[ScoredChunk]:
        """The top ``k`` chunks of the scope (every chunk by default): the scope filters both halves before their
        top k (``crag.store.scoped``)."""
        if mode == "dense":
            return self.dense(vector or [], k, scope)
        if mode == "lexical":
            return self.lexical(query, k, scope)
        pool = max(4 * k, 20)
        legs = [self.dense(vector or [], pool, scope), self.lexical(query, pool, scope)]
        return fuse_top(legs, [dense_weight, 1.0], k)
