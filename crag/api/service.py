"""The state behind the routes: the settings, the lazily built pipeline, the build jobs."""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import asdict, replace
from typing import Any

import anyio

import crag
from crag.api.feedback import Chats
from crag.api.http import REMEDIES, ApiError, error_code, error_message
from crag.api.schemas import BackendOut, HealthOut, IndexStats, ModelPresence, OllamaOut
from crag.config import Settings, redacted_url
from crag.errors import CragError, Remedy
from crag.followups import History
from crag.jobs import Builds
from crag.markdown import api_stream
from crag.models import (
    BackendInfo,
    Embedder,
    close_event_loop,
    embedded_gguf_path,
    ollama_health,
    rebuild_offer,
    resolve_backend,
)
from crag.parts import Part
from crag.pipeline import Pipeline
from crag.scope import KnowledgeBase, knowledge_bases
from crag.store import RebuildNeeded, open_store
from crag.types import Answer, FileResult, Trace

log = logging.getLogger("crag.api")

INCOMPLETE = (
    "The model stopped before the answer was complete: ask again. If it keeps happening, whoever runs this "
    "server finds the model's error in its log."
)

PipelineFactory = Callable[[Settings], Pipeline]
EmbedderFactory = Callable[[Settings, bool], Embedder]  # (settings, rebuild) -> the embedder a build uses
Event = tuple[str, Any]  # ("stage", name) | ("token", text) | ("end", Answer): complete or not, always last
DISCONNECT_POLL_SECONDS = 0.25  # how often a whole answer looks whether its client is still there
RETRY_AFTER_SECONDS = 5  # what a request past the cap of answers at once is told to wait


class ClientGone(Exception):  # noqa: N818 - not an error: the answer's client left
    """Raised into the pipeline at its next stage once the client left: nobody waits for what follows."""


class Slot:
    """One of the answers the server makes at once (``CRAG_API_MAX_ANSWERS``), given back once, when its work ends."""

    def __init__(self, slots: threading.BoundedSemaphore) -> None:
        self._slots = slots
        self._lock = threading.Lock()
        self._held = True

    def release(self) -> None:
        with self._lock:
            if self._held:
                self._held = False
                self._slots.release()


class Answering:
    """An answer in the making. The question is checked here, before any response starts (a bad one is a 4xx, not
    a stream); the answer is made by a worker thread once ``events`` or ``whole`` is awaited. A client that leaves
    stops it at the pipeline's next stage: no more grading, web search, page fetching or writing for nobody."""

    def __init__(
        self,
        pipeline: Pipeline,
        question: str,
        history: History,
        web: bool | None,
        scope: Sequence[str] = (),
        slot: Slot | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> None:
        self.backend = pipeline.backend
        self._put: Callable[[Event | None], None] = lambda item: None
        self._stop = threading.Event()
        # ``overrides``: other ``Options`` of this question (the thresholds fitted to its scope)
        self._stream = pipeline.stream(question, history, on_step=self._step, web=web, scope=scope, **(overrides or {}))
        self._release = slot.release if slot else (lambda: None)
        # The work never started (a response that never began): the slot is given back when this is dropped.
        weakref.finalize(self, self._release)

    def _step(self, stage: str) -> None:
        if self._stop.is_set():
            raise ClientGone
        self._put(("stage", stage))

    async def events(self) -> AsyncIterator[Event]:
        """Stages as they happen, tokens, then the end. Leaving it early (a client gone) stops the answer."""
        async for kind, value in self._items():
            if kind == "failed":
                s = self._stream
                yield "end", partial(s.question, s.parts, self.backend, value, s.options.scope.paths)
            else:
                yield kind, value

    async def whole(self, disconnected: Callable[[], Awaitable[bool]]) -> Answer | None:
        """The answer, whole, or None when ``disconnected()`` said the client left first. What the pipeline
        raised is raised here, for the error handlers."""
        end: Answer | None = None
        failed: Exception | None = None
        async with anyio.create_task_group() as group:

            async def watch() -> None:
                while not await disconnected():
                    await anyio.sleep(DISCONNECT_POLL_SECONDS)
                group.cancel_scope.cancel()

            group.start_soon(watch)
            async for kind, value in self._items():
                if kind == "end":
                    end = value
                elif kind == "failed":
                    failed = value
            group.cancel_scope.cancel()
        if failed is not None:
            raise failed
        return end

    async def _items(self) -> AsyncIterator[Event]:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Event | None] = asyncio.Queue()

        def put(item: Event | None) -> None:
            with suppress(RuntimeError):  # the loop has closed: nobody reads these any more
                loop.call_soon_threadsafe(events.put_nowait, item)

        self._put = put
        threading.Thread(target=self._work, args=(put,), name="crag-ask", daemon=True).start()
        try:
            while (item := await events.get()) is not None:
                yield item
        finally:
            self._stop.set()

    def _work(self, put: Callable[[Event | None], None]) -> None:
        # One thread runs the whole answer: stages arrive as they happen, not with the first token.
        stream = self._stream
        try:
            with stream:  # a client gone ends the model's stream here, not at garbage collection
                for delta in api_stream(stream, html=True):
                    if self._stop.is_set():
                        return
                    if delta:  # "" only says the answer goes on (a sentence is being held)
                        put(("token", delta))
            assert stream.answer is not None  # a stream iterated to its end has its answer
            put(("end", for_client(stream.answer)))
        except ClientGone:
            return
        except Exception as exc:  # noqa: BLE001 - reported to the client as the end of the answer
            put(("failed", exc))
        finally:
            self._release()  # before the end is sent: a client that asks again at once finds the place free
            put(None)
            close_event_loop()  # the loop this thread's model calls made: the thread ends here


class Service:
    """State shared by the routes: the settings, the lazily built pipeline, the build jobs."""

    def __init__(self, settings: Settings, pipeline_factory: PipelineFactory, embedder_factory: EmbedderFactory):
        self.settings = settings
        self.pipeline_factory = pipeline_factory
        self.embedder_factory = embedder_factory
        self._pipeline: Pipeline | None = None
        self._pipeline_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(settings.api_max_answers)
        self.builds = Builds(settings, self._embedder_for, self._after_build)
        self.chats = Chats(settings)  # answers kept to be rated, and the thresholds fitted to a scope

    def pipeline(self) -> Pipeline:
        """Built on first use (it loads models) and reused, until a rebuild made elsewhere moves the index to another
        embedder: then built anew, with that one. A failure is not kept: the next request retries."""
        with self._pipeline_lock:
            if self._pipeline is None or self._pipeline.retriever.moved():
                self._pipeline = None  # the old one is let go: if the new one fails, the next request tries again
                try:
                    self._pipeline = self.pipeline_factory(self.settings)
                except RebuildNeeded:
                    raise
                except CragError as exc:
                    raise ApiError(503, error_message(exc), code=error_code(exc)) from None
            return self._pipeline

    def _embedder_for(self, rebuild: bool) -> Embedder:
        loaded = self._pipeline
        if loaded is not None and not rebuild and not loaded.retriever.moved():
            return loaded.retriever.embedder
        return self.embedder_factory(self.settings, rebuild)

    def _after_build(self, embedder: Embedder) -> None:
        # A rebuild may have moved the index to another embedder: the next question opens it with that one.
        with self._pipeline_lock:
            if self._pipeline is not None and self._pipeline.retriever.embedder.name != embedder.name:
                self._pipeline = None

    # ---- /ask, /v1/chat/completions

    def slot(self) -> Slot:
        """One of the answers made at once, or a 429 that says to retry: each answer holds a model, a grader and
        maybe a web search, and the machine has few cores."""
        if not self._slots.acquire(blocking=False):
            n = self.settings.api_max_answers
            raise ApiError(
                429,
                f"This server is making {n} answers already, its limit (CRAG_API_MAX_ANSWERS): ask again in "
                f"{RETRY_AFTER_SECONDS} seconds.",
                code="too_many_answers",
                headers={"Retry-After": str(RETRY_AFTER_SECONDS), "x-should-retry": "true"},
            )
        return Slot(self._slots)

    def answering(self, question: str, history: History, web: bool | None, scope: Sequence[str] = ()) -> Answering:
        """One answer, as events or whole. The pipeline is loaded and the scope checked here, so a backend that is
        down is a 503, an unknown scope a 400 and one answer too many a 429, not a stream. ``scope``: folders and
        files to ask (none: every document)."""
        pipeline = self.pipeline()
        fitted = self.chats.thresholds(scope)
        slot = self.slot()
        try:
            return Answering(pipeline, question, history, web, scope, slot, fitted)
        except BaseException:
            slot.release()
            raise

    # ---- /health, /files

    def health(self) -> dict[str, Any]:
        s = self.settings
        ollama = ollama_health(s.ollama_url)
        loaded = self._pipeline
        backend: BackendInfo | None = loaded.backend if loaded else None
        backend_error = None
        if backend is None:
            try:
                backend = resolve_backend(s, ollama)
            except CragError as exc:
                backend_error = str(exc)
        try:
            path = embedded_gguf_path(s)
            gguf = ModelPresence(name=path.name, present=path.is_file())
        except CragError:  # CRAG_EMBEDDED_GGUF names no file
            gguf = ModelPresence(name=str(s.embedded_gguf), present=False)
        index, index_error = None, None
        try:
            store = open_store(s)
            gen = store.active()
            index_error = store.fallback or None  # the previous generation answers: say why
        except CragError as exc:
            gen, index_error = None, error_message(exc)
        except OSError as exc:
            gen, index_error = None, unreadable(s, exc)
        if gen is not None:
            index = IndexStats(
                generation=gen.id, built_at=gen.built_at, embedder=gen.embedder, files=gen.files, chunks=gen.chunks
            )
        return HealthOut(
            status="ok" if backend_error is None and index_error is None else "degraded",
            version=crag.__version__,
            backend=BackendOut(name=backend.name, model=backend.model, reason=backend.reason) if backend else None,
            backend_error=backend_error,
            embedded_model=gguf,
            ollama=OllamaOut(
                url=redacted_url(ollama.url),
                reachable=ollama.reachable,
                error=ollama.error or None,
                chat_model=ModelPresence(name=s.chat_model, present=ollama.has(s.chat_model)),
                embed_model=ModelPresence(name=s.embed_model, present=ollama.has(s.embed_model)),
            ),
            pipeline_loaded=loaded is not None,
            embedder=loaded.retriever.embedder.name if loaded else None,
            index=index,
            index_error=index_error,
            index_upgrade=upgrade(gen.embedder) if gen is not None else None,
            build_running=self.builds.running,
        ).model_dump()

    def files(self) -> dict[str, Any]:
        generation, manifest = self.manifest()
        return {"generation": generation, "files": [asdict(m) for m in manifest]}

    def scopes(self) -> dict[str, Any]:
        """The knowledge bases: every folder of the index's files, and the files at the top, with their counts."""
        generation, manifest = self.manifest()
        return {"generation": generation, "scopes": [asdict(kb) for kb in knowledge_bases(manifest)]}

    def knowledge_bases(self) -> list[KnowledgeBase]:
        return knowledge_bases(self.manifest()[1])

    def manifest(self) -> tuple[str | None, list[FileResult]]:
        """The generation that answers (None when nothing is built) and its manifest."""
        store = open_store(self.settings)
        try:
            gen = store.active()
            return (gen.id, store.manifest()) if gen else (None, [])
        except (OSError, ValueError) as exc:  # a manifest that is missing or not JSON
            raise ApiError(409, unreadable(self.settings, exc)) from None


def unreadable(settings: Settings, exc: Exception) -> str:
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
    return (
        f'The index in {settings.chroma_dir} cannot be read ({why}): rebuild it with POST /index {{"rebuild": true}}.'
    )


def for_client(answer: Answer) -> Answer:
    """The answer as clients get it. A model that failed midway may have said anything in its error (an upstream
    response body, an internal host name): the log gets that, the client a message that leaks nothing."""
    if answer.complete or not answer.error:
        return answer
    log.warning("answer incomplete: %s", answer.error)
    return replace(answer, error=INCOMPLETE)


def upgrade(embedder: str) -> str | None:
    """The offer of a full rebuild to the multilingual embedder, with how (``rebuild_offer``)."""
    offer = rebuild_offer(embedder)
    return f"{offer} {REMEDIES[Remedy.FULL_REBUILD]}" if offer else None


def partial(
    question: str, parts: Sequence[Part], backend: BackendInfo, exc: Exception, scope: tuple[str, ...] = ()
) -> Answer:
    """The answer so far, marked incomplete, with the error: what a stream ends with when the pipeline raised."""
    if isinstance(exc, CragError):
        message = error_message(exc)
    else:
        log.error("answer failed mid-stream", exc_info=exc)
        message = f"The answer stopped early ({type(exc).__name__}); see the server log, then ask again."
    trace = Trace(question=question, standalone_question=question, scope=scope)
    return Answer(
        parts=tuple(parts),
        backend=backend.name,
        model=backend.model,
        sources=(),
        trace=trace,
        complete=False,
        error=message,
    )
