"""The HTTP API (``python -m crag serve``): ask, index and health over FastAPI, on the same core.

Routes call what the CLI and the UI call: ``Pipeline.stream`` for answers, ``AnswerOut`` for
their JSON, ``crag.ingest.sync`` for builds, ``Store`` for the manifest. Nothing here decides how
a question is answered or a file indexed.

- The pipeline is synchronous (llama.cpp runs in this process), so routes are plain ``def``
  functions that FastAPI runs in its thread pool, and a streamed answer is produced by a worker
  thread that feeds a queue the response drains.
- Builds run in a background thread, one at a time: a process lock answers a second request with
  409 at once, and ``sync`` still takes the store's cross-process lock, so a CLI build is not
  overrun either.
- Errors are JSON ``{"error": message}`` where the message says what to do. Unexpected failures
  are logged here and answered with a generic 500 that leaks nothing.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import queue
import re
import sys
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

import crag
import crag.ingest
from crag.config import Settings
from crag.contract import AnswerOut
from crag.errors import BackendUnavailable, ConfigError, CragError
from crag.ingest import Progress
from crag.models import (
    BackendInfo,
    Embedder,
    embedded_gguf_path,
    ollama_health,
    resolve_backend,
)
from crag.pipeline import Pipeline
from crag.retriever import index_embedder
from crag.store import BuildInProgress, RebuildNeeded, Store
from crag.types import Answer, Trace

log = logging.getLogger("crag.api")

MAX_QUESTION = 4000  # characters; far above any real question, far below a prompt that would not fit
MAX_TURN = 20_000  # characters of one history turn (an earlier answer can be long; the pipeline cuts it)
MAX_TURNS = 50
JOBS_KEPT = 50  # finished build jobs remembered for GET /index/{job}
KEEPALIVE_SECONDS = 15.0  # an SSE comment while a slow stage runs, so proxies keep the stream open

PipelineFactory = Callable[[Settings], Pipeline]
EmbedderFactory = Callable[[Settings, bool], Embedder]  # (settings, rebuild) -> the embedder a build uses


# ---------------------------------------------------------------------------------------------
# Request and response schemas (pydantic at the edge only)

# Control characters (NUL, terminal escapes) and lone surrogates (valid in JSON, not in UTF-8)
# would reach prompts and logs, or fail when the answer is encoded. Newlines and tabs stay.
_UNWANTED = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _clean(text: str) -> str:
    return _UNWANTED.sub("", text).strip()


def _non_empty(text: str) -> str:
    text = _clean(text)
    if not text:
        raise ValueError("the question is empty: send some text to ask")
    return text


class Turn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"]
    content: Annotated[str, Field(max_length=MAX_TURN), AfterValidator(_clean)]


class AskRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"question": "How much memory does the widget need?"},
                {
                    "question": "And on Windows?",
                    "history": [
                        {"role": "user", "content": "How do I install it?"},
                        {"role": "assistant", "content": "Run the installer [1]."},
                    ],
                    "web": False,
                    "stream": True,
                },
            ]
        },
    )

    question: Annotated[str, Field(min_length=1, max_length=MAX_QUESTION), AfterValidator(_non_empty)]
    history: list[Turn] = Field(
        default_factory=list, max_length=MAX_TURNS, description="Earlier turns, oldest first, for follow-ups."
    )
    web: bool | None = Field(
        None, description="Search the web when local knowledge falls short; unset: CRAG_WEB_SEARCH."
    )
    stream: bool = Field(False, description="Answer with Server-Sent Events: stage, token, then done (or error).")


class IndexRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rebuild: bool = Field(False, description="Re-parse and re-embed every file, not only new and changed ones.")


class ErrorOut(BaseModel):
    error: str = Field(description="What went wrong and what to do about it.")


class FieldError(BaseModel):
    loc: list[str]
    msg: str
    type: str


class ValidationErrorOut(ErrorOut):
    detail: list[FieldError] = Field(description="The fields at fault.")


class ProgressOut(BaseModel):
    stage: str = Field(description="starting | scanning | parsing | embedding | writing | done")
    file: str
    file_index: int = Field(description="i of 'file i/N', from 1")
    file_count: int
    page: int = Field(description="j of 'page j/M' while parsing; chunks embedded while embedding")
    page_count: int
    fraction: float


class FileResultOut(BaseModel):
    model_config = ConfigDict(extra="allow")

    file: str
    status: str = Field(description="indexed | unchanged | removed | failed | skipped")
    pages: int = 0
    chunks: int = 0
    seconds: float = 0.0
    error: str = ""


class BuildReportOut(BaseModel):
    model_config = ConfigDict(extra="allow")

    files: list[FileResultOut]
    total_chunks: int
    pages_per_second: float


class JobOut(BaseModel):
    job: str
    state: Literal["running", "done", "failed"]
    rebuild: bool
    started_at: str
    finished_at: str | None
    progress: ProgressOut
    result: BuildReportOut | None = Field(description="Per-file results when the build is done.")
    error: str | None = Field(description="Why the build failed; the previous index still answers.")


class JobCreated(BaseModel):
    job: str
    status_url: str


class ManifestEntry(BaseModel):
    model_config = ConfigDict(extra="allow")

    file: str
    status: str
    pages: int = 0
    chunks: int = 0
    error: str = ""
    warnings: list[str] = Field(default_factory=list)
    hash: str = ""
    parser: str = ""
    parser_version: str = ""


class FilesOut(BaseModel):
    generation: str | None = Field(description="The index generation that answers; null when none is built.")
    files: list[ManifestEntry]


class BackendOut(BaseModel):
    name: str
    model: str
    reason: str


class ModelPresence(BaseModel):
    name: str
    present: bool


class OllamaOut(BaseModel):
    url: str
    reachable: bool
    error: str | None
    chat_model: ModelPresence
    embed_model: ModelPresence


class IndexStats(BaseModel):
    generation: str
    built_at: str
    embedder: str
    files: int
    chunks: int


class HealthOut(BaseModel):
    status: Literal["ok", "degraded"] = Field(description="degraded: see backend_error and index_error")
    version: str
    backend: BackendOut | None = Field(description="The chat backend in use, or the one the first question will use.")
    backend_error: str | None
    embedded_model: ModelPresence = Field(description="The GGUF of the embedded backend.")
    ollama: OllamaOut
    pipeline_loaded: bool
    embedder: str | None = Field(description="The embedder answering queries, once the pipeline is loaded.")
    index: IndexStats | None
    index_error: str | None
    build_running: str | None = Field(description="The id of the build job that runs now.")


# ---------------------------------------------------------------------------------------------
# Responses and errors


class Json(JSONResponse):
    """UTF-8 JSON that keeps Chinese readable. A lone surrogate (legal in JSON, not in UTF-8) is
    written as its JSON escape instead of failing the response."""

    def render(self, content: Any) -> bytes:
        return _dumps(content).encode("utf-8", "backslashreplace")


def _dumps(content: Any) -> str:
    return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


class ApiError(Exception):
    """An error with its HTTP status, raised by the routes below."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def status_for(exc: CragError) -> int:
    """409: the index is busy or must be rebuilt first; 503: a backend is down or misconfigured."""
    if isinstance(exc, (BuildInProgress, RebuildNeeded)):
        return 409
    if isinstance(exc, (BackendUnavailable, ConfigError)):
        return 503
    return 400


UNAUTHORIZED: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "The bearer token is missing or wrong (CRAG_API_TOKEN is set)."},
}
INVALID: dict[int | str, dict[str, Any]] = {
    422: {"model": ValidationErrorOut, "description": "The request does not match the schema."},
}


# ---------------------------------------------------------------------------------------------
# Bearer token


class BearerAuth:
    """Every request, /docs and /openapi.json included, must carry ``Authorization: Bearer <token>``.

    Pure ASGI rather than a route dependency, so it also covers the docs routes and unknown paths.
    """

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"authorization")
        if given is not None:
            scheme, _, value = given.partition(b" ")
            # Bytes, not str: compare_digest refuses non-ASCII str, and a header may hold anything.
            if scheme.lower() == b"bearer" and hmac.compare_digest(value.strip(), self.token):
                await self.app(scope, receive, send)
                return
            message = "The bearer token is wrong: send the value of CRAG_API_TOKEN as `Authorization: Bearer <token>`."
        else:
            message = (
                "This server needs a token: send `Authorization: Bearer <token>` with the value of CRAG_API_TOKEN."
            )
        await Json({"error": message}, status_code=401, headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)


# ---------------------------------------------------------------------------------------------
# Build jobs


@dataclass(frozen=True)
class Job:
    """A background build. Replaced whole on every update, so a reader always sees one consistent state."""

    id: str
    rebuild: bool
    started_at: str
    state: str = "running"  # running | done | failed
    progress: Progress = Progress("starting")
    finished_at: str | None = None
    result: dict[str, Any] | None = None
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        p = self.progress
        return {
            "job": self.id,
            "state": self.state,
            "rebuild": self.rebuild,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "progress": {
                "stage": p.stage,
                "file": p.file,
                "file_index": p.file_index,
                "file_count": p.file_count,
                "page": p.page,
                "page_count": p.page_count,
                "fraction": round(p.fraction, 4),
            },
            "result": self.result,
            "error": self.error or None,
        }


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class Builds:
    """Builds of the index in background threads, one at a time."""

    def __init__(self, settings: Settings, embedder_for: Callable[[bool], Embedder], built: Callable[[Embedder], None]):
        self.settings = settings
        self.embedder_for = embedder_for
        self.built = built
        self._lock = threading.Lock()
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._running: str | None = None

    @property
    def running(self) -> str | None:
        return self._running

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def start(self, rebuild: bool) -> Job:
        with self._lock:
            if self._running is not None:
                raise BuildInProgress(
                    f"A knowledge-base build is already running (job {self._running}): wait for it to finish; "
                    f"GET /index/{self._running} shows its progress."
                )
            # A build by another process (the CLI, the app) holds the store's lock: answer 409 now rather
            # than accept a job that fails at once. ``sync`` takes the lock again for real.
            try:
                with Store(self.settings.chroma_dir).build_lock():
                    pass
            except OSError as exc:
                raise ApiError(
                    503,
                    f"The index folder {self.settings.chroma_dir} cannot be written ({exc.strerror}): "
                    "fix its permissions or set CRAG_CHROMA_DIR to a writable folder.",
                ) from None
            job = Job(uuid.uuid4().hex, rebuild, _now())
            self._jobs[job.id] = job
            self._running = job.id
            while len(self._jobs) > JOBS_KEPT:
                oldest = next(iter(self._jobs))
                if oldest == self._running:
                    break
                del self._jobs[oldest]
        threading.Thread(target=self._run, args=(job.id, rebuild), name=f"crag-build-{job.id[:8]}", daemon=True).start()
        return job

    def _update(self, job_id: str, **changes: Any) -> None:
        with self._lock:
            self._jobs[job_id] = replace(self._jobs[job_id], **changes)
            if changes.get("state", "running") != "running":
                self._running = None

    def _run(self, job_id: str, rebuild: bool) -> None:
        try:
            embedder = self.embedder_for(rebuild)
            report = crag.ingest.sync(
                self.settings, embedder, rebuild=rebuild, on_progress=lambda p: self._update(job_id, progress=p)
            )
            self.built(embedder)
        except CragError as exc:
            self._update(job_id, state="failed", finished_at=_now(), error=str(exc))
            return
        except Exception:  # noqa: BLE001 - a build bug must fail its job, not the server
            log.exception("build %s failed", job_id)
            error = (
                "The build failed unexpectedly; the previous knowledge base still answers. See the server log, "
                "or run `python -m crag index` in a terminal for the same build with its details."
            )
            self._update(job_id, state="failed", finished_at=_now(), error=error)
            return
        self._update(job_id, state="done", finished_at=_now(), result=report.to_json())


# ---------------------------------------------------------------------------------------------
# The service behind the routes


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
                    raise ApiError(503, str(exc)) from None
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

    # ---- /ask

    def ask(self, req: AskRequest) -> dict[str, Any]:
        pipeline = self.pipeline()
        return _answer(pipeline.ask(req.question, _history(req), web=req.web), pipeline.backend)

    def ask_events(self, req: AskRequest) -> Iterator[bytes]:
        """Server-Sent Events for one answer. The pipeline is loaded before the response starts, so a
        backend that is down is a 503, not an event."""
        pipeline = self.pipeline()
        events: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue()
        stop = threading.Event()

        def work() -> None:
            # One thread runs the whole answer: stages arrive as they happen, not with the first token.
            stream = pipeline.stream(
                req.question, _history(req), on_step=lambda stage: events.put(("stage", {"stage": stage})), web=req.web
            )
            try:
                for delta in stream:
                    if stop.is_set():  # the client went away
                        return
                    events.put(("token", {"text": delta}))
                answer = stream.answer
                events.put(("done" if answer.complete else "error", _answer(answer, pipeline.backend)))
            except Exception as exc:  # noqa: BLE001 - reported to the client as an error event
                events.put(("error", _partial(req.question, stream.text, pipeline.backend, exc)))
            finally:
                events.put(None)

        def generate() -> Iterator[bytes]:
            threading.Thread(target=work, name="crag-ask", daemon=True).start()
            try:
                while True:
                    try:
                        item = events.get(timeout=KEEPALIVE_SECONDS)
                    except queue.Empty:
                        yield b": keep-alive\n\n"
                        continue
                    if item is None:
                        return
                    kind, data = item
                    yield f"event: {kind}\ndata: {_dumps(data)}\n\n".encode("utf-8", "backslashreplace")
            finally:
                stop.set()

        return generate()

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
            gen = Store(s.chroma_dir).active()
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
        store = Store(self.settings.chroma_dir)
        try:
            gen = store.active()
            return {"generation": gen.id if gen else None, "files": store.manifest() if gen else []}
        except (OSError, ValueError) as exc:  # a manifest that is missing or not JSON
            raise ApiError(409, unreadable(self.settings, exc)) from None


def unreadable(settings: Settings, exc: Exception) -> str:
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
    return (
        f'The index in {settings.chroma_dir} cannot be read ({why}): rebuild it with POST /index {{"rebuild": true}}.'
    )


def _history(req: AskRequest) -> list[tuple[str, str]]:
    return [(turn.role, turn.content) for turn in req.history]


def _answer(answer: Answer, backend: BackendInfo) -> dict[str, Any]:
    """The answer contract; an incomplete answer (the model failed midway) says why."""
    return AnswerOut.of(answer, backend).model_dump()


def _partial(question: str, text: str, backend: BackendInfo, exc: Exception) -> dict[str, Any]:
    """The answer so far, marked incomplete, with the error: the same shape as ``done``."""
    if isinstance(exc, CragError):
        message = str(exc)
    else:
        log.error("answer failed mid-stream", exc_info=exc)
        message = f"The answer stopped early ({type(exc).__name__}); see the server log, then ask again."
    trace = Trace(question=question, standalone_question=question)
    return _answer(Answer(text.strip(), backend.name, backend.model, (), trace, complete=False, error=message), backend)


# ---------------------------------------------------------------------------------------------
# The app


def create_app(
    settings: Settings,
    pipeline_factory: PipelineFactory = Pipeline.from_settings,
    embedder_factory: EmbedderFactory = index_embedder,
) -> FastAPI:
    """The FastAPI app. Tests pass fakes for the pipeline and the embedder."""
    service = Service(settings, pipeline_factory, embedder_factory)
    token = settings.api_token.get_secret_value() if settings.api_token else ""
    app = FastAPI(
        title="CRAG knowledge base",
        version=crag.__version__,
        description=(
            "Ask your PDFs with Corrective RAG, build the knowledge base, and check the backends. "
            'Errors are JSON `{"error": message}`; the message says what to do.'
        ),
        default_response_class=Json,
        responses=UNAUTHORIZED if token else None,
    )
    app.state.service = service

    @app.post(
        "/ask",
        summary="Answer a question",
        response_model=None,
        responses={
            200: {
                "model": AnswerOut,
                "description": "The answer as `python -m crag ask --json` prints it. With `stream: true`, "
                "Server-Sent Events: `stage` ({stage}), `token` ({text}), then `done` (this object) or "
                "`error` (this object with `complete: false` and `error`).",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            },
            409: {"model": ErrorOut, "description": "The index must be rebuilt first."},
            **INVALID,
            503: {"model": ErrorOut, "description": "The chat backend is down or misconfigured."},
        },
    )
    def ask(req: AskRequest) -> Any:
        if req.stream:
            return StreamingResponse(
                service.ask_events(req),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        return service.ask(req)

    @app.post(
        "/index",
        summary="Start a build of the knowledge base",
        status_code=202,
        response_model=JobCreated,
        responses={409: {"model": ErrorOut, "description": "A build is already running."}, **INVALID},
    )
    def start_index(req: IndexRequest | None = None) -> Json:
        job = service.builds.start(req.rebuild if req else False)
        url = f"/index/{job.id}"
        return Json({"job": job.id, "status_url": url}, status_code=202, headers={"Location": url})

    @app.get(
        "/index/{job}",
        summary="Progress and per-file results of a build",
        response_model=JobOut,
        responses={404: {"model": ErrorOut, "description": "No such job in this server."}},
    )
    def index_status(job: str) -> dict[str, Any]:
        found = service.builds.get(job)
        if found is None:
            raise ApiError(
                404, "No build job with this id in this server (jobs live in memory): POST /index starts one."
            )
        return found.to_json()

    @app.get("/health", summary="Backends, models and index", response_model=HealthOut)
    def health() -> dict[str, Any]:
        return service.health()

    @app.get(
        "/files",
        summary="The per-file manifest of the index",
        response_model=FilesOut,
        responses={409: {"model": ErrorOut, "description": "The index is damaged: rebuild it."}},
    )
    def files() -> dict[str, Any]:
        return service.files()

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> Json:
        return Json({"error": exc.message}, status_code=exc.status)

    @app.exception_handler(CragError)
    async def _crag_error(request: Request, exc: CragError) -> Json:
        return Json({"error": str(exc)}, status_code=status_for(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Json:
        # loc and msg only: echoing the input could repeat a long or hostile body back.
        detail = [{"loc": [str(part) for part in e["loc"]], "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        where = "; ".join(f"{'.'.join(d['loc'])}: {d['msg']}" for d in detail[:5])
        message = f"Invalid request ({where}). Send a JSON body as /docs describes it."
        return Json({"error": message, "detail": detail}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Json:
        message = {
            404: "No such route: see /docs for the routes of this API.",
            400: "The request body could not be parsed: send UTF-8 JSON with `Content-Type: application/json`.",
            405: "This route does not take this method: see /docs.",
        }.get(exc.status_code, str(exc.detail))
        return Json({"error": message}, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Json:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return Json({"error": "Internal error: see the server log."}, status_code=500)

    if token:
        app.add_middleware(BearerAuth, token=token)
        schema = app.openapi

        def openapi_with_bearer() -> dict[str, Any]:
            out = schema()
            out.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = {
                "type": "http",
                "scheme": "bearer",
            }
            out["security"] = [{"bearer": []}]
            return out

        app.openapi = openapi_with_bearer  # type: ignore[method-assign]
    return app


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def serve(settings: Settings, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the API with uvicorn until interrupted."""
    import uvicorn

    app = create_app(settings)
    shown = f"[{host}]" if ":" in host else host
    print(f"CRAG API on http://{shown}:{port} (docs: http://{shown}:{port}/docs)", file=sys.stderr, flush=True)
    if not is_loopback(host):
        protection = "CRAG_API_TOKEN is set" if settings.api_token else "CRAG_API_TOKEN is NOT set"
        print(
            f"warning: {host} is not a loopback address: anyone who reaches it can read your documents through "
            f"the API ({protection}). Bind to 127.0.0.1, or put it behind a proxy with TLS.",
            file=sys.stderr,
            flush=True,
        )
    uvicorn.run(app, host=host, port=port, log_level="info")
