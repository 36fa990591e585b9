"""CRAG step 1, retrieval: top-k chunks from the active index, which the retriever follows across rebuilds.

The index keeps the embedder it was built with: only a full rebuild chooses another. When that embedder cannot be
had (an index built with Ollama's bge-m3, Ollama down; or with MiniLM, the former built-in embedder, no longer
installed), the retriever searches the lexical (BM25) half alone and says so; the built-in embedder then scores text
for grading and refinement, never against the index's vectors."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import replace

from crag.analysis import Analysis
from crag.config import Settings
from crag.errors import CragError, Remedy
from crag.models import (
    Embedder,
    EmbedderUnavailable,
    build_embedder,
    embedder_named,
    local_embedder,
)
from crag.overview import Overview
from crag.scope import EVERYTHING, Scope, UnknownScope
from crag.sections import Section, SectionIndex, SectionIndexes, sections
from crag.store import POINTER_MAX_AGE, IndexReader, Mode, RebuildNeeded, index_text, open_store
from crag.terms import TermStats
from crag.text import cjk_share
from crag.tuning import TUNING
from crag.types import ScoredChunk


class Retriever:
    def __init__(self, settings: Settings, embedder: Embedder, missing: EmbedderUnavailable | None = None) -> None:
        self.settings = settings
        self.embedder = embedder
        # Why the index's own embedder is missing, with the ways out: retrieval is lexical meanwhile.
        self.missing = missing
        self.store = open_store(settings)
        self._reader: IndexReader | None = None
        self._sections = SectionIndexes()

    @property
    def lexical_only(self) -> str:
        """The note for an answer found without the index's embedder ("" when it is at hand)."""
        return str(self.missing) if self.missing else ""

    def current(self) -> IndexReader | None:
        """The generation that answers now, opened (None when nothing is built)."""
        # Asked on every query: on a Chroma server a recent answer is trusted, so a switch by a build
        # elsewhere is followed within POINTER_MAX_AGE seconds without a request per query.
        active = self.store.active(max_age=POINTER_MAX_AGE)
        if active is None:
            self._reader = None
        elif self._reader is None or self._reader.generation.id != active.id:
            reader = self.store.reader()
            if reader is None:  # the index was removed since the pointer was read: nothing answers
                self._reader = None
                return None
            if self.missing and reader.generation.embedder == self.embedder.name:
                self.missing = None  # rebuilt with the embedder at hand: its dense half answers again
            if not self.missing:
                reader.check_embedder(self.embedder.name)
            self._reader = reader
        return self._reader

    def moved(self) -> bool:
        """Whether the index now answers with another embedder than this retriever's: a full rebuild made elsewhere
        (the app, ``crag index --rebuild``, another server) chose another. Its questions would only raise
        ``RebuildNeeded``: whoever holds the pipeline opens it anew, with that embedder. An index whose own embedder
        is missing has not moved (its lexical half answers meanwhile), nor has one that cannot be read (its questions
        say so)."""
        try:
            active = self.store.active(max_age=POINTER_MAX_AGE)
        except CragError:
            return False
        known = (self.embedder.name, self.missing.embedder if self.missing else None)
        return active is not None and active.embedder not in known

    def check_scope(self, scope: Scope) -> None:
        """Raise ``UnknownScope`` (listing the knowledge bases) unless the index holds passages in ``scope``."""
        if not scope:
            return
        reader = self.current()
        if reader is None:
            raise UnknownScope(
                "Nothing is indexed yet, so no folder can be asked: leave the scope out, or build the knowledge base.",
                remedy=Remedy.BUILD,
            )
        reader.scoped(scope, self.settings.files_dir)

    def anchor(self, analysis: Analysis, hits: list[ScoredChunk], scope: Scope = EVERYTHING) -> list[ScoredChunk]:
        """``hits`` and, for each term of the question they miss, the best passage of the scope that mentions it."""
        reader = self.current()
        if reader is None:
            return hits
        return anchor(analysis, hits, lambda query, n: reader.lexical(query, n, scope))

    def term_stats(self, scope: Scope = EVERYTHING) -> TermStats | None:
        """Document frequencies of the scope in the index that answers now (None when nothing is built)."""
        try:
            reader = self.current()
        except RebuildNeeded:
            return None
        return reader.stats(scope) if reader else None

    def file_languages(self, scope: Scope = EVERYTHING) -> dict[str, str]:
        """Each indexed file's language, of the scope's files (empty when nothing is built)."""
        try:
            reader = self.current()
        except RebuildNeeded:
            return {}
        return reader.file_languages(scope) if reader else {}

    def sections(self, question: str, scope: Scope, skip: Callable[[Section], bool]) -> list[Section]:
        """The sections of the scope closest to the question (``crag.sections``): by their titles and first lines,
        and by the passages under them a deeper search finds; [] when nothing is built. The generation's section
        index is built on first need, with the embedder that grades."""
        try:
            reader = self.current()
        except RebuildNeeded:
            return []
        if reader is None:
            return []
        index = self._sections.of(
            reader.generation.id, lambda: SectionIndex(sections(reader.chunks, reader.manifest), self.embedder)
        )
        view = reader.scoped(scope)
        files = view.files if view else None
        found = [h.chunk for h in self.retrieve(question, TUNING.suggestions.pool, scope=scope)]
        return index.closest(question, self.embedder.embed([question])[0], files, skip, found)

    def overviews(self, files: Sequence[str]) -> list[Overview]:
        """What each of these documents is (title, opening sentences, outline), for the ones the index holds."""
        reader = self.current()
        return [o for f in files if (o := reader.overview(f))] if reader else []

    def retrieve(self, question: str, k: int, mode: Mode = "hybrid", scope: Scope = EVERYTHING) -> list[ScoredChunk]:
        """The top ``k`` chunks of the scope (every chunk by default), filtered before the top k."""
        reader = self.current()
        if reader is None:
            self.check_scope(scope)  # a scope of an index that has nothing yet is refused, and says why
            return []
        mode = "lexical" if self.missing else mode
        vector = self.embedder.embed([question])[0] if mode != "lexical" else None
        # An English-only embedder places a Chinese question at random: its vote counts only for
        # the non-Chinese part of the question (names, code, Latin terms).
        weight = 1.0 if self.embedder.multilingual else 1.0 - cjk_share(question)
        try:
            hits = reader.search(question, vector, k, mode, weight, scope)
        except Exception:
            # A rebuild may swap generations and drop the old one between our check and our query:
            # then the new generation answers. Any other failure is real. The pointer is read afresh.
            active = self.store.active()
            if active is None or active.id == reader.generation.id:
                raise
            reader = self.current()
            if reader is None:
                raise
            hits = reader.search(question, vector, k, mode, weight, scope)
        if hits and not self.missing:
            # Grading embeds what was indexed, and the index has those vectors already. Only a saving: a
            # generation swapped out meanwhile just means they are embedded again.
            with contextlib.suppress(Exception):
                vectors = reader.vectors([h.chunk.id for h in hits])
                self.embedder.remember([index_text(h.chunk) for h in hits], vectors)
        return hits


# Corrective retrieval for names. A Chinese question about an English manual matches Chinese passages on its many
# Chinese words, and the one passage that names the English term falls out of the top k. A specific term that the
# index holds but no hit mentions is searched for again (``TUNING.retrieval.anchored`` terms at most): the lexical
# hits for the question that mention it (for the term alone when none does), ``TUNING.retrieval.anchor_depth``
# deep. The passage found is graded with the others, but the term check still counts the term as missing: found
# only by a word, it cannot make the action Correct.
def _first(ranked: list[ScoredChunk], seen: set[str], mentioned: Callable[[str], bool]) -> ScoredChunk | None:
    return next((h for h in ranked if h.chunk.id not in seen and mentioned(index_text(h.chunk))), None)


def anchor(
    analysis: Analysis, hits: list[ScoredChunk], lexical: Callable[[str, int], list[ScoredChunk]]
) -> list[ScoredChunk]:
    own = [h for h in hits if not h.from_history] or hits  # what the question found by its own words
    check = analysis.near_miss([index_text(h.chunk) for h in own])
    if check.unknown or not check.missing:  # unknown: a near miss, Incorrect whatever else is found
        return hits
    seen = {h.chunk.id for h in hits}
    by_question = lexical(analysis.text, TUNING.retrieval.anchor_depth)  # searched once for all the terms
    found = []
    for term in check.missing[: TUNING.retrieval.anchored]:
        mentioned = analysis.mentioned_by(term)
        if hit := _first(by_question, seen, mentioned) or _first(
            lexical(term, TUNING.retrieval.anchor_depth), seen, mentioned
        ):
            seen.add(hit.chunk.id)
            found.append(replace(hit, anchor=term))
    return [*hits, *found]


def index_embedder(settings: Settings, rebuild: bool = False) -> Embedder:
    """The embedder for this index: an existing index keeps the one it was built with, unless the settings name
    another kind (``CRAG_EMBED_BACKEND=local`` for an index on Ollama: then questions say a full rebuild is needed).
    A full rebuild chooses afresh, which is how an index moves to Ollama's bge-m3 once it is pulled, or to the
    built-in embedder. Raises ``EmbedderUnavailable`` when the index's embedder cannot be had now."""
    try:
        active = None if rebuild else open_store(settings).active()
    except RebuildNeeded:
        active = None
    if active is not None and settings.embed_backend in ("auto", active.embedder.split(":")[0]):
        own = embedder_named(settings, active.embedder)
        if own is not None:
            return own
    return build_embedder(settings)


def open_retriever(settings: Settings) -> Retriever:
    """The retriever of the active index; lexical only, and saying why, when the index's embedder is missing."""
    try:
        return Retriever(settings, index_embedder(settings))
    except EmbedderUnavailable as missing:
        return Retriever(settings, local_embedder(settings), missing)
