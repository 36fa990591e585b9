"""What both index backends share: the generation record, chunk (de)serialisation, errors, rank fusion."""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from crag.errors import BackendUnavailable, CragError
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


class IndexUnavailable(BackendUnavailable):
    """The Chroma server that holds the index does not answer (or refuses us): a backend that is down."""


def index_text(chunk: Chunk) -> str:
    """What gets embedded and matched: the heading path gives a chunk the context of its section."""
    return f"{chunk.section}\n{chunk.text}" if chunk.section else chunk.text


@dataclass(frozen=True)
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
    return [ScoredChunk(chunks[i], s) for i, s in sorted(scores.items(), key=lambda kv: -kv[1])]
