"""One scope of an opened generation: its rows, its own term statistics, and exact dense search over its vectors.

Both halves of the index filter before the top k, so k passages come from the scope:

- lexical: the one BM25 index with a weight mask (``LexicalIndex.retrieve``), 1 for the scope's rows and 0 for the
  rest. It costs what an unscoped search costs, keeps the whole index's IDF (a passage scores the same in any scope
  that holds it), and serves any union of folders and files. One BM25 index per folder would search a small folder
  faster, but would hold every passage once per folder above it, give other scores (its own IDF), and need merging
  for a scope of several folders or of single files (docs/benchmarks.md has the figures);
- dense: the cosine of the question with each of the scope's vectors, in memory, exact. Chroma's own filter
  (``where``) runs its HNSW graph with an allow-list: the fewer passages a scope holds, the more of the graph it
  walks, and at 100,000 passages one folder took 90 to 350 ms a query where an unscoped query takes 2 ms
  (``python -m crag.bench.scope --chroma-where`` measures it). The scope's vectors are fetched from Chroma once,
  by id, on its first question.

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

Vectors = Callable[[Sequence[str]], list[Any]]  # chunk ids -> their stored vectors, in order


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
        vectors: Vectors,
    ) -> None:
        self.scope = scope
        self.files = files
        self.rows = rows
        self.n_docs = len(rows)
        self.mask = np.zeros(len(chunks), dtype=np.float32)
        self.mask[rows] = 1.0
        self._chunks, self._lexical, self._fetch = chunks, lexical, vectors
        self._df: dict[str, int] = {}
        self._vocabulary: Vocabulary | None = None
        self._matrix: np.ndarray | None = None
        self._lock = threading.Lock()

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
        matrix = self._vectors()
        query = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(query))
        if not len(matrix) or not norm:
            return []
        scores = matrix @ (query / norm)
        n = min(n, len(scores))
        best = np.argpartition(-scores, n - 1)[:n]
        best = best[np.argsort(-scores[best], kind="stable")]
        return [(int(self.rows[i]), float(scores[i])) for i in best]

    def _vectors(self) -> np.ndarray:
        """The scope's vectors, unit length, fetched from the index on first use (one fetch per scope)."""
        with self._lock:
            if self._matrix is None:
                ids = [self._chunks[row].id for row in self.rows]
                matrix = np.asarray(self._fetch(ids), dtype=np.float32).reshape(len(ids), -1)
                norms = np.linalg.norm(matrix, axis=1, keepdims=True)
                self._matrix = matrix / np.where(norms > 0, norms, 1.0)
            return self._matrix
