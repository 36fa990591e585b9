"""What both index backends share: the generation record, chunk (de)serialisation, errors, rank fusion."""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from crag.errors import BackendUnavailable, CragError
from crag.store.chroma import blocked
from crag.types import Chunk, ScoredChunk

Mode = Literal["dense", "lexical", "hybrid"]
RRF_K = 60  # the usual reciprocal-rank-fusion constant: damps the head without flattening it


class RebuildNeeded(CragError):
    """The index cannot answer with the current settings."""


class BuildInProgress(CragError):
    """Another build holds the lock. ``job`` names it when it is a job of this process."""

    def __init__(self, message: str, job: str = "") -> None:
        super().__init__(message)
        self.job = job


class ChromaUnreadable(RebuildNeeded):
    """Chroma cannot read its folder (a damaged database, or one another Chroma version wrote). The next build moves
    the folder aside and starts a new one: it is never deleted. ``detail``: what Chroma said."""

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(message)
        self.detail = detail


class IndexUnavailable(BackendUnavailable):
    """The Chroma server that holds the index does not answer (or refuses us): a backend that is down."""


class Blocked(StrEnum):
    """Why the index cannot be used now, though nothing is wrong with what it holds."""

    LOCKED = "locked"
    DISK_FULL = "disk full"
    DENIED = "denied"  # permissions, a read-only folder
    DISK_ERROR = "disk error"


class IndexInaccessible(IndexUnavailable):
    """The index cannot be read or written now (``kind`` says why). Nothing is set aside or rebuilt: the index that
    answers stays, and answers again once the cause is gone."""

    def __init__(self, kind: Blocked, where: str, detail: str) -> None:
        super().__init__(_blocked_message(kind, where, detail))
        self.kind = kind


def _blocked_message(kind: Blocked, where: str, detail: str) -> str:
    fix = {
        Blocked.LOCKED: "another program holds its database (a second copy of the app or of `python -m crag`, or a "
        "tool that has chroma.sqlite3 open): close it, then try again",
        Blocked.DISK_FULL: "the disk is full: free some space, then try again",
        Blocked.DENIED: "this user may not read or write it (or the folder is read-only): fix the folder's "
        "permissions or set CRAG_CHROMA_DIR to a writable folder, then try again",
        Blocked.DISK_ERROR: "the disk failed a read or a write: check the disk, then try again",
    }[kind]
    return (
        f"The index {where} cannot be used now ({detail}): {fix}. Nothing was deleted: the knowledge base that "
        "answered before answers again once this is fixed."
    )


def inaccessible(exc: BaseException, where: str) -> IndexInaccessible | None:
    """``exc`` as ``IndexInaccessible`` when it says the index is locked, the disk full or access denied; else None."""
    kind = blocked(exc)
    return IndexInaccessible(Blocked(kind), where, str(exc)[:300]) if kind else None


@contextmanager
def blocked_is_said(where: str) -> Iterator[None]:
    """Chroma's and the disk's failures that say nothing about what the index holds (a lock, a full disk, permissions)
    raised as ``IndexInaccessible``, with what to do; any other failure as it is."""
    try:
        yield
    except CragError:
        raise
    except Exception as exc:
        if (said := inaccessible(exc, where)) is None:
            raise
        raise said from None


def index_text(chunk: Chunk) -> str:
    """What gets embedded and matched: the heading path gives a chunk the context of its section."""
    return f"{chunk.section}\n{chunk.text}" if chunk.section else chunk.text


@dataclass(frozen=True, kw_only=True)
class Generation:
    """The generation that answers queries, and how it was built."""

    id: str
    built_at: str
    embedder: str
    dimension: int
    chunking: dict[str, Any]
    files: int
    chunks: int


def new_generation_id() -> str:
    """Sortable by time, unique across machines; also the name of the generation's Chroma collection."""
    return f"gen-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


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


def fuse(rankings: Sequence[Sequence[ScoredChunk]], weights: Sequence[float] | None = None) -> list[ScoredChunk]:
    """Reciprocal rank fusion: each list votes weight/(RRF_K + rank) for its chunks."""
    scores: dict[str, float] = {}
    chunks: dict[str, Chunk] = {}
    for ranking, weight in zip(rankings, weights or [1.0] * len(rankings), strict=True):
        for rank, hit in enumerate(ranking, start=1):
            scores[hit.chunk.id] = scores.get(hit.chunk.id, 0.0) + weight / (RRF_K + rank)
            chunks[hit.chunk.id] = hit.chunk
    return [ScoredChunk(chunk=chunks[i], score=s) for i, s in sorted(scores.items(), key=lambda kv: -kv[1])]


def fuse_top(rankings: Sequence[Sequence[ScoredChunk]], weights: Sequence[float], k: int) -> list[ScoredChunk]:
    """The top ``k`` of ``fuse``, where the best hit of each leg with a full vote is always one (when ``k`` is at
    least the number of such legs; a smaller ``k`` keeps the fused best of them). A passage that only one leg can
    find is otherwise outvoted by passages both legs rank middling: a Chinese question about an English manual shares
    no words with the passage that answers it, which the multilingual dense leg ranks first, while BM25 ranks the
    passages that repeat a name of the question ("bzip2") and the dense leg ranks them lower down. A leg with a
    partial vote (an English-only embedder on a Chinese question) is not trusted that far."""
    fused = fuse(rankings, weights)
    bests = {ranking[0].chunk.id for ranking, weight in zip(rankings, weights, strict=True) if ranking and weight >= 1}
    chosen = [h for h in fused if h.chunk.id in bests]
    chosen += [h for h in fused if h.chunk.id not in bests][: max(0, k - len(chosen))]
    return sorted(chosen, key=lambda h: -h.score)[:k]
