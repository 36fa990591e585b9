"""The FastAPI app: routes, error handlers and the bearer token, over ``Service``."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

import crag
from crag.api.http import (
    INVALID,
    UNAUTHORIZED,
    ApiError,
    BearerAuth,
    Json,
    error_code,
    error_response,
    is_openai,
    status_for,
)
from crag.api.openai_compat import openai_router
from crag.api.schemas import AskRequest, ErrorOut, FilesOut, HealthOut, IndexRequest, JobCreated, JobOut
from crag.api.service import EmbedderFactory, PipelineFactory, Service
from crag.config import Settings, load_settings
from crag.contract import AnswerOut
from crag.errors import CragError
from crag.pipeline import Pipeline
from crag.retriever import index_embedder
from crag.store import BuildInProgress

log = logging.getLogger("crag.api")


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
            'Errors are JSON `{"error": message}`; the message says what to do. Under `/v1`, an OpenAI-compatible '
            'chat-completions API over the same knowledge base, with OpenAI\'s error shape `{"error": {"message", '
            '"type", "param", "code"}}`.'
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

    app.include_router(openai_router(service))

    # Each handler answers in the shape of the path's clients: {"error": message} here, OpenAI's under /v1.
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> Json:
        return error_response(request.url.path, exc.status, exc.message, code=exc.code, param=exc.param)

    @app.exception_handler(CragError)
    async def _crag_error(request: Request, exc: CragError) -> Json:
        message = str(exc)
        if isinstance(exc, BuildInProgress) and exc.job:
            message += f" GET /index/{exc.job} shows its progress."
        return error_response(request.url.path, status_for(exc), message, code=error_code(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Json:
        # loc and msg only: echoing the input could repeat a long or hostile body back.
        detail = [{"loc": [str(part) for part in e["loc"]], "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        where = "; ".join(f"{'.'.join(d['loc'])}: {d['msg']}" for d in detail[:5])
        path = request.url.path
        if is_openai(path):
            # OpenAI answers a request that breaks its schema with 400 (the SDK's BadRequestError), naming the field.
            param = ".".join(detail[0]["loc"][1:]) if detail and detail[0]["loc"][:1] == ["body"] else None
            message = f"Invalid request ({where}). Send a chat-completions body as OpenAI's API describes it."
            return error_response(path, 400, message, code="invalid_request", param=param or None)
        message = f"Invalid request ({where}). Send a JSON body as /docs describes it."
        return error_response(path, 422, message, detail=detail)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Json:
        message, code = {
            404: ("No such route: see /docs for the routes of this API.", "unknown_url"),
            400: (
                "The request body could not be parsed: send UTF-8 JSON with `Content-Type: application/json`.",
                "invalid_json",
            ),
            405: ("This route does not take this method: see /docs.", "method_not_allowed"),
        }.get(exc.status_code, (str(exc.detail), None))
        headers = getattr(exc, "headers", None)
        return error_response(request.url.path, exc.status_code, message, code=code, headers=headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Json:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return error_response(request.url.path, 500, "Internal error: see the server log.", code="internal_error")

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


def app_from_environment() -> FastAPI:
    """The app with the settings of the environment: what ``python -m crag serve`` runs (uvicorn factory)."""
    return create_app(load_settings())
