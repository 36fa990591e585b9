"""The documents' sections by their titles, offered under an answer not found for sure: the manual's own words.

A newcomer asks in everyday words ("get rid of the little arrow icons") what a manual titles in its own ("Navigation
symbols"); no embedder bridges the two, but the user does, once shown the titles nearby. The sections of a scope are
its PDF bookmarks, or the headings the parser found where a file has none. The ones closest to a question, by the
index's embedder over their titles and by BM25 over their titles and first lines, are offered with their document
and page, and their words may be asked with instead.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from crag.models import Embedder
from crag.store.common import RRF_K
from crag.store.lexical import LexicalIndex
from crag.text import lexical_tokens
from crag.tuning import TUNING
from crag.types import Chunk, FileResult, Source, Suggestion

_SUGGESTIONS = TUNING.suggestions
_LEAD_CHARS = 200  # of a section's first lines, read with its title by BM25
# A section's number, or a title that names no section: "2.3 ", "A.1 ", "第三章 ", "Contents", "Index".
_NUMBER = re.compile(
    r"^\s*(?:(?:chapter|section|appendix|part)\s+)?(?:\d+(?:\.\d+)*\.?|[A-Z]\.(?:\d+\.?)*|[IVX]+\.?(?=\s+[A-Z]))\s+"
    r"|^第.{1,3}[章节部篇]\s*",
    re.IGNORECASE,
)
_NO_SECTION = re.compile(r"^(?:table of )?contents$|^index$|^目\s*录$|^索\s*引$|^preface$|^前\s*言$", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class Section:
    file: str
    title: str  # as the document writes it, numbered or not
    page: int  # where it starts, 1-based
    lead: str  # its first lines


def ask_words(title: str) -> str:
    """A title's words to ask with: without its number ("2.3 Navigation symbols" → "Navigation symbols")."""
    return _NUMBER.sub("", title).strip() or title.strip()


def sections(chunks: Sequence[Chunk], manifest: Sequence[FileResult]) -> list[Section]:
    """Each file's sections: its PDF bookmarks, and the headings its passages sit under where the bookmarks end (the
    index keeps their top levels only: a manual's "Logscale" is a heading four levels down)."""
    by_file: dict[str, list[Chunk]] = {}
    for chunk in chunks:
        by_file.setdefault(chunk.file, []).append(chunk)
    outlines = {m.file: m.outline for m in manifest}
    found: list[Section] = []
    for file, held in by_file.items():
        marks = [(title, page) for _, title, page in outlines.get(file) or ()]
        named = {" ".join(ask_words(title).split()).casefold() for title, _ in marks}
        pairs = marks + [(t, p) for t, p in _headings(held) if " ".join(ask_words(t).split()).casefold() not in named]
        found += [
            Section(file=file, title=" ".join(title.split()), page=page, lead=_lead(held, title, page))
            for title, page in dict.fromkeys(pairs)
            if title.strip() and not _NO_SECTION.match(ask_words(title))
        ]
    return found


def _headings(chunks: Sequence[Chunk]) -> list[tuple[str, int]]:
    """The deepest heading above each passage, with the page it first appears on."""
    seen: dict[str, int] = {}
    for chunk in chunks:
        leaf = chunk.section.split(" > ")[-1].strip() if chunk.section else ""
        if leaf and chunk.pages and leaf not in seen:
            seen[leaf] = chunk.pages[0]
    return list(seen.items())


def _lead(chunks: Sequence[Chunk], title: str, page: int) -> str:
    """The first lines under a section: its first passage, or the first one on its page."""
    under = next((c for c in chunks if title in c.section), None)
    on_page = next((c for c in chunks if page in c.pages), None)
    chosen = under or on_page
    return " ".join(chosen.text.split())[:_LEAD_CHARS] if chosen else ""


def _unit(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms == 0, 1.0, norms)


class SectionIndex:
    """A generation's sections, their titles embedded and their titles and leads indexed by BM25, built once."""

    def __init__(self, found: Sequence[Section], embedder: Embedder) -> None:
        self.sections = list(found)
        titles = [ask_words(s.title) for s in self.sections]
        # A manual's title is often a bare command ("Logscale"): embedded with its first lines, it means what they say.
        said = [f"{t}: {s.lead}" for t, s in zip(titles, self.sections, strict=True)]
        self.vectors = _unit(np.asarray(embedder.embed(said), dtype=np.float32)) if said else np.zeros((0, 1))
        # A section by its file and title, as a passage's heading names it (the first, of a title said twice).
        self._headed: dict[tuple[str, str], int] = {}
        for i, (s, t) in enumerate(zip(self.sections, titles, strict=True)):
            self._headed.setdefault((s.file, " ".join(t.split()).casefold()), i)
        self.lexical = (
            None
            if not titles
            else LexicalIndex.build(
                [lexical_tokens(f"{t} {s.lead}") for t, s in zip(titles, self.sections, strict=True)]
            )
        )

    def closest(
        self,
        question: str,
        vector: Sequence[float],
        files: Iterable[str] | None,
        skip: Callable[[Section], bool],
        found: Sequence[Chunk] = (),
    ) -> list[Section]:
        """The sections of ``files`` (every file: None) closest to the question, best first, at most
        ``TUNING.suggestions.offered``; those ``skip`` says the answer shows already are left out. A section is
        close when its title and first lines mean much the same (cosine at least ``TUNING.suggestions.cosine``) or
        share a word of the question, or when a passage under it is among those a deeper search for the question
        ``found``, in their order; the three rankings are fused."""
        if not self.sections:
            return []
        inside = set(files) if files is not None else None
        allowed = [inside is None or s.file in inside for s in self.sections]
        cosines = self.vectors @ _unit(np.asarray([vector], dtype=np.float32))[0]
        dense = [i for i in np.argsort(-cosines) if allowed[i] and cosines[i] >= _SUGGESTIONS.cosine]
        mask = np.asarray(allowed, dtype=np.float32)
        lexical = (
            [row for row, _ in self.lexical.retrieve(lexical_tokens(question), _SUGGESTIONS.pool, mask)]
            if self.lexical
            else []
        )
        under = [i for c in found if (i := self._under(c)) is not None and allowed[i]]
        votes: dict[int, float] = {}
        for ranking in (dense[: _SUGGESTIONS.pool], lexical, list(dict.fromkeys(under))):
            for rank, i in enumerate(ranking, start=1):
                votes[int(i)] = votes.get(int(i), 0.0) + 1.0 / (RRF_K + rank)
        ranked = sorted(votes, key=lambda i: (-votes[i], i))
        chosen = [self.sections[i] for i in ranked if not skip(self.sections[i])]
        return chosen[: _SUGGESTIONS.offered]

    def _under(self, chunk: Chunk) -> int | None:
        """The section a passage sits under: its deepest heading, in its file."""
        leaf = chunk.section.split(" > ")[-1].strip()
        return self._headed.get((chunk.file, " ".join(ask_words(leaf).split()).casefold())) if leaf else None


def shown_by(sources: Sequence[Source]) -> Callable[[Section], bool]:
    """Whether an answer's sources show a section already: a source from its file, under its title or on its page."""

    def shown(section: Section) -> bool:
        return any(
            s.file == section.file and (ask_words(section.title) in s.section or section.page in s.pages)
            for s in sources
        )

    return shown


def suggestion(section: Section) -> Suggestion:
    return Suggestion(title=ask_words(section.title), file=section.file, page=section.page)


class SectionIndexes:
    """The section index of the generation that answers, built on first need and kept until another answers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._built: tuple[str, SectionIndex] | None = None

    def of(self, generation: str, build: Callable[[], SectionIndex]) -> SectionIndex:
        with self._lock:
            if self._built is None or self._built[0] != generation:
                self._built = (generation, build())
            return self._built[1]
