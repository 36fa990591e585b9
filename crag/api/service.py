"""The state behind the routes: the settings, the lazily built pipeline, the build jobs."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import suppress
from dataclasses import asdict, replace
from typing import Any

import crag
from crag.api.http import ApiError, error_code
from crag.api.schemas import BackendOut, HealthOut, IndexStats, ModelPresence, OllamaOut
from crag.config import Settings
from crag.errors import CragError
from crag.followups import History
from crag.jobs import Builds
from crag.models import BackendInfo, Embedder, close_event_loop, embedded_gguf_path, ollama_health, resolve_backend
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


class Answering:
    """An answer in the making. The question is checked here, before any response starts (a bad one is a 4xx, not
    a stream); the answer is made by a worker thread once ``events`` is iterated."""

    def __init__(
        self, pipeline: Pipeline, question: str, history: History, web: bool | None, scope: Sequence[str] = ()
    ) -> None:
        self.backend = pipeline.backend
        self._put: Callable[[Event | None], None] = lambda item: None
        self._stream = pipeline.stream(
            question, history, on_step=lambda stage: self._put(("stage", stage)), web=web, scope=scope
        )

    async def events(self) -> AsyncIterator[Event]:
        """Stages as they happen, tokens, then the end. Leaving it early (a client gone) ends the model's stream."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Event | None] = asyncio.Queue()
        stop = threading.Event()

        def put(item: Event | None) -> None:
            with suppress(RuntimeError):  # the loop has closed: nobody reads these any more
                loop.call_soon_threadsafe(events.put_nowait, item)

        self._put = put
        threading.Thread(target=self._work, args=(put, stop), name="crag-ask", daemon=True).start()
        try:
            while (item := await events.get()) is not None:
                yield item
        finally:
            stop.set()

    def _work(self, put: Callable[[Event | None], None], stop: threading.Event) -> None:
        # One thread runs the whole answer: stages arrive as they happen, not with the first token.
        stream = self._stream
        try:
            with stream:  # a client gone ends the model's stream here, not at garbage collection
                for delta in stream:
                    if stop.is_set():
                        return
                    put(("token", delta))
            put(("end", for_client(stream.answer)))
        except Exception as exc:  # noqa: BLE001 - reported to the client as the end of the answer
            put(("end", partial(stream.question, stream.text, self.backend, exc, stream.options.scope.paths)))
        finally:
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
        self.builds = Builds(settings, self._embedder_for, self._after_build)

    def pipeline(self) -> Pipeline:
        """Built on first use (it loads models) and reused. A failure is not kept: the next request retries."""
        with self._pipeline_lock:
            if self._pipeline is None:
                try:
                    self._pipeline = self.pipeline_factory(self.settings)
                except RebuildNeeded:
                    raise
                except CragError as exc:
                    raise ApiError(503, str(exc), code=error_code(exc)) from None
            return self._pipeline

    def _embedder_for(self, rebuild: bool) -> Embedder:
        loaded = self._pipeline
        if loaded is not None and not rebuild:
            return loaded.retriever.embedder
        return self.embedder_factory(self.settings, rebuild)

    def _after_build(self, embedder: Embedder) -> None:
        # A rebuild may have moved the index to another embedder: the next question opens it with that one.
        with self._pipeline_lock:
            if self._pipeline is not None and self._pipeline.retriever.embedder.name != embedder.name:
                self._pipeline = None

    # ---- /ask, /v1/chat/completions

    def answer(self, question: str, history: History, web: bool | None, scope: Sequence[str] = ()) -> Answer:
        """One answer, whole: what /ask and /v1/chat/completions send when they do not stream. ``scope``: folders
        and files to ask (none: every document); an unknown one raises ``UnknownScope``, a 400."""
        return for_client(self.pipeline().ask(question, history, web=web, scope=scope))

    def answering(self, question: str, history: History, web: bool | None, scope: Sequence[str] = ()) -> Answering:
        """One answer as events. The pipeline is loaded and the scope checked here, so a backend that is down is a
        503 and an unknown scope a 400, not a stream."""
        return Answering(self.pipeline(), question, history, web, scope)

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
            gen, index_error = None, str(exc)
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
                url=ollama.url,
                reachable=ollama.reachable,
                error=ollama.error or None,
                chat_model=ModelPresence(name=s.chat_model, present=ollama.has(s.chat_model)),
                embed_model=ModelPresence(name=s.embed_model, present=ollama.has(s.embed_model)),
            ),
            pipeline_loaded=loaded is not None,
            embedder=loaded.retriever.embedder.name if loaded else None,
            index=index,
            index_error=index_error,
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


def partial(question: str, text: str, backend: BackendInfo, exc: Exception, scope: tuple[str, ...] = ()) -> Answer:
    """The answer so far, marked incomplete, with the error: what a stream ends with when the pipeline raised."""
    if isinstance(exc, CragError):
        message = str(exc)
    else:
        log.error("answer failed mid-stream", exc_info=exc)
        message = f"The answer stopped early ({type(exc).__name__}); see the server log, then ask again."
    trace = Trace(question=question, standalone_question=question, scope=scope)
    return Answer(text.strip(), backend.name, backend.model, (), trace, complete=False, error=message)
