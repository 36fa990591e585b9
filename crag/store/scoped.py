"""One scope of an opened generation: its rows, its own term statistics, and dense search in it.

Both halves of the index filter before the top k, so k passages come from the scope:

- lexical: the one BM25 index with a weight mask (``LexicalIndex.retrieve``), 1 for the scope's rows and 0 for the
  rest. It costs what an unscoped search costs, keeps the whole index's IDF (a passage scores the same in any scope
  that holds it), and serves any union of folders and files. One BM25 index per folder would search a small folder
  faster, but would hold every passage once per folder above it, give other scores (its own IDF), and need merging
  for a scope of several folders or of single files (docs/benchmarks.md has the figures);
- dense: for a scope of less than half the index, the cosine of the question with each of the scope's vectors, in
  memory, exact; each vector is fetched from Chroma once, by id, the first time a scope holds its passage
  (``VectorCache``). Chroma's own filter (``where``) runs its HNSW graph with an allow-list, and the fewer
  passages a scope holds, the more of the graph it walks: many times an unscoped query in a large index
  (``python -m crag.bench.scope --alternatives``; docs/benchmarks.md has the figures). A wider scope asks the HNSW
  graph for more passages than it needs and keeps the scope's (``IndexReader.dense``), as approximate as an
  unscoped query and as fast; when too few of them are the scope's, the exact search answers.

The near-miss check reads the scope's statistics (``doc_frequency``, ``vocabulary``): "the documents in
`projects/alpha` never mention X" is about those documents alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from crag.scope import Scope
from crag.store.common import index_text
from crag.store.lexical import LexicalIndex
from crag.terms import Vocabulary
from crag.types import Chunk

Fetch = Callable[[Sequence[str]], list[Any]]  # chunk ids -> their stored vectors, in order
MAX_RUNS = 64  # ranges of consecutive rows read in place; a scope in more pieces has its rows gathered


class VectorCache:
    """A generation's vectors, unit length, fetched from the index by id as scopes first need them: each once, so
    the cache holds at most one copy of the index's vectors, whichever scopes are asked."""

    def __init__(self, chunks: Sequence[Chunk], fetch: Fetch) -> None:
        self._chunks, self._fetch = chunks, fetch
        self._matrix: np.ndarray | None = None  # rows not fetched yet are zeros (pages the OS has not given yet)
        self._loaded = np.zeros(len(chunks), dtype=bool)
        self._lock = threading.Lock()

    def scores(self, rows: np.ndarray, runs: Sequence[tuple[int, int]], query: np.ndarray) -> np.ndarray:
        """The cosine of a unit-length query with each of these rows; ``runs``: the rows as ranges of consecutive
        rows (a folder's files are written one after the other), read in place rather than gathered."""
        self._load(rows)
        assert self._matrix is not None
        if len(runs) <= MAX_RUNS:
            return np.concatenate([self._matrix[start:stop] @ query for start, stop in runs])
        return self._matrix[rows] @ query

    def _load(self, rows: np.ndarray) -> None:
        with self._lock:
            missing = rows[~self._loaded[rows]]
            if not len(missing):
                return
            got = np.asarray(self._fetch([self._chunks[row].id for row in missing]), dtype=np.float32)
            got = got.reshape(len(missing), -1)
            if self._matrix is None:
                self._matrix = np.zeros((len(self._chunks), got.shape[1]), dtype=np.float32)
            norms = np.linalg.norm(got, axis=1, keepdims=True)
            self._matrix[missing] = got / np.where(norms > 0, norms, 1.0)
            self._loaded[missing] = True


class ScopeView:
    """A scope of one generation, resolved to the rows (positions in the generation's chunk list) it holds. It is
    the scope's ``crag.terms.TermStats`` too."""

    def __init__(
        self,
        scope: Scope,
        files: frozenset[str],
        rows: np.ndarray,
        chunks: Sequence[Chunk],
        lexical: LexicalIndex | None,
        vectors: VectorCache,
    ) -> None:
        self.scope = scope
        self.files = files
        self.rows = rows
        self.n_docs = len(rows)
        self.mask = np.zeros(len(chunks), dtype=np.float32)
        self.mask[rows] = 1.0
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1
        starts, stops = np.concatenate(([0], breaks)), np.concatenate((breaks, [len(rows)]))
        self.runs = (
            [(int(rows[a]), int(rows[b - 1]) + 1) for a, b in zip(starts, stops, strict=True)] if len(rows) else []
        )
        self._chunks, self._lexical, self._vectors = chunks, lexical, vectors
        self._df: dict[str, int] = {}
        self._vocabulary: Vocabulary | None = None

    def doc_frequency(self, token: str) -> int:
        """In how many of the scope's chunks a lexical token occurs."""
        if token not in self._df:
            found = self._lexical.rows_with(token) if self._lexical is not None else np.empty(0, dtype=np.int64)
            self._df[token] = int(self.mask[found].sum())
        return self._df[token]

    @property
    def vocabulary(self) -> Vocabulary:
        """The scope's chunks, prepared for finding a term in any form (built on first use)."""
        if self._vocabulary is None:
            self._vocabulary = Vocabulary([index_text(self._chunks[row]) for row in self.rows])
        return self._vocabulary

    def dense(self, vector: Sequence[float], n: int) -> list[tuple[int, float]]:
        """(row, cosine) of the ``n`` chunks of the scope closest to ``vector``, best first: exact."""
        query = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(query))
        if not self.n_docs or not norm:
            return []
        scores = self._vectors.scores(self.rows, self.runs, query / norm)
        n = min(n, len(scores))
        best = np.argpartition(-scores, n - 1)[:n]
        best = best[np.argsort(-scores[best], kind="stable")]
        return [(int(self.rows[i]), float(scores[i])) for i in best]
