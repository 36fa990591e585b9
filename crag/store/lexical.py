"""The lexical half of the index: BM25 (bm25s) over jieba/English tokens. The one module that imports bm25s,
when an index is first built or loaded (not with this module: the app's first page does without it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import bm25s


class LexicalIndex:
    """BM25 over a list of token lists; rows are positions in that list."""

    def __init__(self, bm25: bm25s.BM25, size: int) -> None:
        self._bm25 = bm25
        self.size = size

    @classmethod
    def build(cls, documents: Sequence[Sequence[str]]) -> LexicalIndex:
        import bm25s

        bm25 = bm25s.BM25()
        # bm25s refuses an empty document: a chunk without lexical tokens gets one that matches nothing.
        bm25.index([list(tokens) or [""] for tokens in documents], show_progress=False)
        return cls(bm25, len(documents))

    @classmethod
    def load(cls, folder: Path, size: int) -> LexicalIndex:
        import bm25s

        return cls(bm25s.BM25.load(str(folder), mmap=False), size)

    def save(self, folder: Path) -> None:
        self._bm25.save(str(folder), show_progress=False)

    def retrieve(self, tokens: Sequence[str], n: int, mask: np.ndarray | None = None) -> list[tuple[int, float]]:
        """(row, score) of the best ``n`` rows with a positive score, best first. ``mask``: a weight per row, 1 in
        a scope and 0 outside it; rows outside score 0 before the top ``n`` are chosen, and the rest keep the
        scores (and the IDF) of the whole index."""
        if not tokens or not self.size:
            return []
        docs, scores = self._bm25.retrieve(
            [list(tokens)], k=min(n, self.size), show_progress=False, n_threads=1, weight_mask=mask
        )
        return [(int(d), float(s)) for d, s in zip(docs[0], scores[0], strict=True) if s > 0]

    def rows_with(self, token: str) -> np.ndarray:
        """The rows a token occurs in, read off the BM25 matrix (its columns are tokens)."""
        column = self._bm25.vocab_dict.get(token) if token else None
        if column is None:
            return np.empty(0, dtype=np.int64)
        indptr, indices = self._bm25.scores["indptr"], self._bm25.scores["indices"]
        return indices[indptr[column] : indptr[column + 1]]

    def doc_frequencies(self) -> dict[str, int]:
        """In how many rows each token occurs, read off the BM25 matrix (its columns are tokens)."""
        indptr = self._bm25.scores["indptr"]
        return {t: int(indptr[i + 1] - indptr[i]) for t, i in self._bm25.vocab_dict.items() if t}


def bm25_rank(
    texts: Sequence[str], tokenize: Callable[[str], list[str]], queries: Sequence[str], n: int
) -> list[list[tuple[int, float]]]:
    """A throwaway in-memory BM25 over ``texts``: (row, score) per query, best first. For baselines."""
    index = LexicalIndex.build([tokenize(t) for t in texts])
    return [index.retrieve(tokenize(query), n) for query in queries]
