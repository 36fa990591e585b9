"""Question in, streamed answer out.

This is the thin end-to-end slice: generation from the chat model with no retrieval yet. The CRAG
stages (retrieve, grade, decide, refine, search, generate) slot in ahead of ``generate``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from pydantic_ai import Agent
from pydantic_ai.models import Model

from crag.config import Settings
from crag.models import BackendInfo, Embedder, build_chat_model, build_embedder, resolve_backend
from crag.store import Mode, Store, cjk_share
from crag.types import Answer, ScoredChunk

ANSWER_INSTRUCTIONS = (
    "You are a careful assistant. Answer the question briefly and accurately. "
    "Reply in the language of the question. If you do not know, say so instead of guessing."
)


class Retriever:
    """CRAG step 1: top-k chunks from the active index, which it follows across rebuilds."""

    def __init__(self, settings: Settings, embedder: Embedder) -> None:
        self.settings = settings
        self.embedder = embedder
        self.store = Store(settings.chroma_dir)
        self._reader = None

    def _current(self):
        active = self.store.active()
        if active is None:
            self._reader = None
        elif self._reader is None or self._reader.generation.id != active.id:
            reader = self.store.reader()
            reader.check_embedder(self.embedder.name)
            self._reader = reader
        return self._reader

    def retrieve(self, question: str, k: int, mode: Mode = "hybrid") -> list[ScoredChunk]:
        reader = self._current()
        if reader is None:
            return []
        vector = self.embedder.embed([question])[0] if mode != "lexical" else None
        # An English-only embedder places a Chinese question at random: its vote counts only for
        # the non-Chinese part of the question (names, code, Latin terms).
        weight = 1.0 if self.embedder.multilingual else 1.0 - cjk_share(question)
        return reader.search(question, vector, k, mode, dense_weight=weight)


def open_retriever(settings: Settings) -> Retriever:
    active = Store(settings.chroma_dir).active()
    return Retriever(settings, build_embedder(settings, prefer=active.embedder if active else None))


@dataclass
class Pipeline:
    """Everything a question needs, built once and reused for every question."""

    settings: Settings
    model: Model
    backend: BackendInfo

    @classmethod
    def from_settings(cls, settings: Settings) -> Pipeline:
        backend = resolve_backend(settings)
        return cls(settings, build_chat_model(settings, backend), backend)

    def stream(self, question: str) -> AnswerStream:
        return AnswerStream(self, question)

    def ask(self, question: str) -> Answer:
        stream = self.stream(question)
        for _ in stream:
            pass
        return stream.answer


class AnswerStream:
    """Iterate to get the answer's text as it is generated; ``answer`` is set when it ends."""

    def __init__(self, pipeline: Pipeline, question: str) -> None:
        self._pipeline = pipeline
        self._question = question
        self.answer: Answer | None = None
        self.parts: list[str] = []

    @property
    def text(self) -> str:
        """The text generated so far, complete or not."""
        return "".join(self.parts)

    def __iter__(self) -> Iterator[str]:
        p = self._pipeline
        agent = Agent(p.model, instructions=ANSWER_INSTRUCTIONS)
        start = time.perf_counter()
        first_token: float | None = None
        result = agent.run_stream_sync(self._question, model_settings={"max_tokens": p.settings.max_answer_tokens})
        for delta in result.stream_text(delta=True, debounce_by=None):
            if first_token is None:
                first_token = time.perf_counter() - start
            self.parts.append(delta)
            yield delta
        usage = result.usage
        total = time.perf_counter() - start
        self.answer = Answer(
            text=self.text.strip(),
            backend=p.backend.name,
            model=p.backend.model,
            llm_calls=usage.requests,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            timings={"first_token": round(first_token or total, 3), "generate": round(total, 3)},
        )
