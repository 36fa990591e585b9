"""CRAG step 1, retrieval: top-k chunks from the active index, which the retriever follows across rebuilds."""

from __future__ import annotations

import contextlib

from crag.config import Settings
from crag.models import Embedder, build_embedder
from crag.store import POINTER_MAX_AGE, IndexReader, Mode, RebuildNeeded, index_text, open_store
from crag.text import cjk_share
from crag.types import ScoredChunk


class Retriever:
    def __init__(self, settings: Settings, embedder: Embedder) -> None:
        self.settings = settings
        self.embedder = embedder
        self.store = open_store(settings)
        self._reader: IndexReader | None = None

    def _current(self) -> IndexReader | None:
        # Asked on every query: on a Chroma server a recent answer is trusted, so a switch by a build
        # elsewhere is followed within POINTER_MAX_AGE seconds without a request per query.
        active = self.store.active(max_age=POINTER_MAX_AGE)
        if active is None:
            self._reader = None
        elif self._reader is None or self._reader.generation.id != active.id:
            reader = self.store.reader()
            reader.check_embedder(self.embedder.name)
            self._reader = reader
        return self._reader

    def term_stats(self) -> IndexReader | None:
        """Document frequencies of the index that answers now (None when nothing is built)."""
        try:
            return self._current()
        except RebuildNeeded:
            return None

    def retrieve(self, question: str, k: int, mode: Mode = "hybrid") -> list[ScoredChunk]:
        reader = self._current()
        if reader is None:
            return []
        vector = self.embedder.embed([question])[0] if mode != "lexical" else None
        # An English-only embedder places a Chinese question at random: its vote counts only for
        # the non-Chinese part of the question (names, code, Latin terms).
        weight = 1.0 if self.embedder.multilingual else 1.0 - cjk_share(question)
        try:
            hits = reader.search(question, vector, k, mode, dense_weight=weight)
        except Exception:
            # A rebuild may swap generations and drop the old one between our check and our query:
            # then the new generation answers. Any other failure is real. The pointer is read afresh.
            active = self.store.active()
            if active is None or active.id == reader.generation.id:
                raise
            reader = self._current()
            hits = reader.search(question, vector, k, mode, dense_weight=weight)
        if hits:
            # Grading embeds what was indexed, and the index has those vectors already. Only a saving: a
            # generation swapped out meanwhile just means they are embedded again.
            with contextlib.suppress(Exception):
                vectors = reader.vectors([h.chunk.id for h in hits])
                self.embedder.remember([index_text(h.chunk) for h in hits], vectors)
        return hits


def index_embedder(settings: Settings, rebuild: bool = False) -> Embedder:
    """The embedder for this index: an existing index keeps the one it was built with (in auto mode);
    a full rebuild chooses afresh, which is how an index moves to Ollama's bge-m3 once it is pulled."""
    try:
        active = None if rebuild else open_store(settings).active()
    except RebuildNeeded:
        active = None
    return build_embedder(settings, prefer=active.embedder if active else None)


def open_retriever(settings: Settings) -> Retriever:
    return Retriever(settings, index_embedder(settings))
