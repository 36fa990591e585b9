"""The FastAPI app: the routers of each concern over one ``Service``, the error handlers and the bearer token."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from fastapi import FastAPI
from starlette.applications import Starlette

import crag
from crag.api.ask import ask_router
from crag.api.errors import add_error_handlers
from crag.api.feedback import feedback_router
from crag.api.guards import BodyLimit, HostCheck, HostRule, JsonBody
from crag.api.health import health_router
from crag.api.http import UNAUTHORIZED, ApiError, BearerAuth, Json
from crag.api.index import index_router
from crag.api.openai_compat import openai_router
from crag.api.service import EmbedderFactory, PipelineFactory, Service, for_client
from crag.config import Settings, load_settings
from crag.errors import BackendUnavailable, CragError
from crag.mcp import ToolBackend, create_server, http_app
from crag.pipeline import Pipeline
from crag.retriever import index_embedder
from crag.watch import Watcher

DESCRIPTION = (
    "Ask your PDFs with Corrective RAG, rate the answers (`POST /feedback`, by the `answer_id` of `/ask`), build the "
    "knowledge base, and check the backends. "
    'Errors are JSON `{"error": message}`; the message says what to do. Under `/v1`, an OpenAI-compatible '
    'chat-completions API over the same knowledge base, with OpenAI\'s error shape `{"error": {"message", '
    '"type", "param", "code"}}`. At `/mcp`, the knowledge base as an MCP server (Streamable HTTP): the tools '
    "`search`, `ask` and `list_documents`, behind the same token. Without a token, only requests addressed to "
    "this machine (or to a name allowed with `--allowed-host`) are answered; a POST must send "
    "`Content-Type: application/json`; a body over `CRAG_API_MAX_BODY_KB` is refused (413), and so is an answer "
    "past `CRAG_API_MAX_ANSWERS` at once (429, with Retry-After)."
)


def create_app(
    settings: Settings,
    pipeline_factory: PipelineFactory = Pipeline.from_settings,
    embedder_factory: EmbedderFactory = index_embedder,
    watch: bool = False,
) -> FastAPI:
    """The FastAPI app. Tests pass fakes for the pipeline and the embedder. ``watch``: while the app runs, watch the
    files folder and sync it (``crag.watch``) unless ``CRAG_WATCH=off``, its builds being the API's jobs."""
    service = Service(settings, pipeline_factory, embedder_factory)
    token = settings.api_token.get_secret_value() if settings.api_token else ""
    mcp = mcp_app(service)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        watcher = Watcher(settings, service.builds).start() if watch else None
        app.state.watcher = watcher
        try:
            async with mcp.router.lifespan_context(app):  # runs the MCP sessions' task group
                yield
        finally:
            if watcher is not None:
                watcher.stop()

    app = FastAPI(
        title="CRAG knowledge base",
        version=crag.__version__,
        description=DESCRIPTION,
        default_response_class=Json,
        responses=UNAUTHORIZED if token else None,
        lifespan=lifespan,
    )
    app.state.service = service
    for router in (ask_router, index_router, health_router, openai_router):
        app.include_router(router(service))
    app.include_router(feedback_router(service.chats))
    app.router.routes.extend(mcp.routes)  # /mcp, behind the token like every route
    add_error_handlers(app)
    # Added last is outermost: who may ask first, then how much, then in what format.
    app.add_middleware(JsonBody)
    app.add_middleware(BodyLimit, limit_kb=settings.api_max_body_kb)
    if token:
        # A page cannot learn the token, and a browser never adds one on its own: the token keeps pages out,
        # under whatever name a proxy or a network gives this server.
        require_token(app, token)
    else:
        app.add_middleware(HostCheck, rule=HostRule(settings.allowed_hosts or ()))
    return app


def mcp_app(service: Service) -> Starlette:
    """The MCP server over the service's pipeline, as Streamable HTTP at /mcp. Its searches and answers count
    against the cap of answers at once like those of /ask and /v1."""

    def pipeline() -> Pipeline:
        try:
            return service.pipeline()
        except ApiError as exc:  # the backend is down: the same message, as the tools' error
            raise BackendUnavailable(exc.message) from None

    @contextmanager
    def slot() -> Iterator[None]:
        try:
            held = service.slot()
        except ApiError as exc:  # too many answers at once: the tool's error says to retry
            raise CragError(exc.message) from None
        try:
            yield
        finally:
            held.release()

    knowledge = ToolBackend(service.settings, pipeline, for_client, slot)
    return http_app(create_server(knowledge), service.settings.api_max_body_kb * 1024)


def require_token(app: FastAPI, token: str) -> None:
    """Every request must carry the bearer token; the OpenAPI document says so."""
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

    app.openapi = openapi_with_bearer  # type: ignore[method-assign]  # FastAPI's documented way to extend its schema


def app_from_environment() -> FastAPI:
    """The app with the settings of the environment: what ``python -m crag serve`` runs (uvicorn factory). It watches
    the files folder unless ``CRAG_WATCH=off``."""
    return create_app(load_settings(), watch=True)
