"""HTTP plumbing of the API: JSON that keeps Chinese readable, Server-Sent Events, errors with their status and
shape, the bearer token.

Errors have two shapes, chosen by the path: ``{"error": message}`` for the API's own routes, and OpenAI's
``{"error": {"message", "type", "param", "code"}}`` under ``/v1``, where OpenAI clients read them.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.types import ASGIApp, Receive, Scope, Send

from crag.api.schemas import ErrorOut, ValidationErrorOut
from crag.errors import BackendUnavailable, ConfigError, CragError, IndexNotWritable, Remedy, said
from crag.store import BuildInProgress, RebuildNeeded


class Json(JSONResponse):
    """UTF-8 JSON that keeps Chinese readable. A lone surrogate (legal in JSON, not in UTF-8) is
    written as its JSON escape instead of failing the response."""

    def render(self, content: Any) -> bytes:
        return dumps(content).encode("utf-8", "backslashreplace")


def dumps(content: Any) -> str:
    return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


KEEPALIVE_SECONDS = 15.0  # an SSE comment while a slow stage runs, so proxies keep the stream open


def event_stream(events: AsyncIterator[ServerSentEvent]) -> EventSourceResponse:
    """Server-Sent Events, with a keep-alive comment every ``KEEPALIVE_SECONDS``. A client that leaves cancels
    ``events`` at once (sse-starlette listens for the disconnect), so whatever feeds them can stop."""
    return EventSourceResponse(
        events,
        headers={"Cache-Control": "no-cache"},
        ping=KEEPALIVE_SECONDS,
        ping_message_factory=lambda: ServerSentEvent(comment="keep-alive", sep="\n"),
    )


def sse(data: dict[str, Any] | str, event: str | None = None) -> ServerSentEvent:
    """One event. JSON keeps Chinese readable; a lone surrogate (legal in JSON, not in UTF-8) is sent escaped."""
    text = data if isinstance(data, str) else dumps(data).encode("utf-8", "backslashreplace").decode("utf-8")
    return ServerSentEvent(text, event=event, sep="\n")


class ApiError(Exception):
    """An error with its HTTP status, raised by the routes. ``code`` and ``param`` only show under /v1."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.headers = headers


def is_openai(path: str) -> bool:
    """Whether a path is one of the OpenAI-compatible routes, whose clients expect OpenAI's error shape."""
    return path == "/v1" or path.startswith("/v1/")


def error_response(
    path: str,
    status: int,
    message: str,
    *,
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> Json:
    """An error in the shape the path's clients read. ``extra`` goes beside the message (``detail`` of a 422;
    ``crag``, the trace, under /v1)."""
    if not is_openai(path):
        return Json({"error": message, **extra}, status_code=status, headers=headers)
    kind = "server_error" if status >= 500 else "invalid_request_error"
    body = {"message": message, "type": kind, "param": param, "code": code, **extra}
    # The openai SDK retries 409 and 5xx on its own; each retry would run the whole pipeline again for an
    # error that needs a person (start Ollama, rebuild the index), so say no, unless the error says otherwise.
    return Json({"error": body}, status_code=status, headers={"x-should-retry": "false", **(headers or {})})


def error_code(exc: Exception) -> str:
    """OpenAI-style error code of a CragError: its class in snake case (``RebuildNeeded`` -> ``rebuild_needed``)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(exc).__name__).lower()


# A remedy in the API's words: the endpoint that does it.
REMEDIES = {
    Remedy.BUILD: "Build the knowledge base: POST /index.",
    Remedy.FULL_REBUILD: 'Run a full rebuild: POST /index with {"rebuild": true}.',
}


def error_message(exc: CragError) -> str:
    """A CragError's message, with its remedy in the API's words."""
    return said(str(exc), exc.remedy, REMEDIES)


def status_for(exc: CragError) -> int:
    """409: the index is busy or must be rebuilt first; 503: a backend is down or misconfigured, or the
    index folder cannot be written."""
    if isinstance(exc, (BuildInProgress, RebuildNeeded)):
        return 409
    if isinstance(exc, (BackendUnavailable, ConfigError, IndexNotWritable)):
        return 503
    return 400


UNAUTHORIZED: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "The bearer token is missing or wrong (CRAG_API_TOKEN is set)."},
}
INVALID: dict[int | str, dict[str, Any]] = {
    422: {"model": ValidationErrorOut, "description": "The request does not match the schema."},
}
TOO_MANY: dict[int | str, dict[str, Any]] = {
    429: {
        "model": ErrorOut,
        "description": "The server makes CRAG_API_MAX_ANSWERS answers at once already: retry after `Retry-After` "
        "seconds.",
    },
}


def gone() -> Response:
    """What a whole answer's route returns when its client left before the end: nobody reads it (499 is nginx's
    "client closed request")."""
    return Response(status_code=499)


class BearerAuth:
    """Every request, /docs and /openapi.json included, must carry ``Authorization: Bearer <token>``, and so must a
    websocket's handshake.

    Pure ASGI rather than a route dependency, so it also covers the docs routes, unknown paths and websockets.
    """

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):  # the server's lifespan: no request
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
            code = "invalid_api_key"
        else:
            message = (
                "This server needs a token: send `Authorization: Bearer <token>` with the value of CRAG_API_TOKEN."
            )
            code = "missing_api_key"
        response = error_response(scope["path"], 401, message, code=code, headers={"WWW-Authenticate": "Bearer"})
        await refuse(response, scope, receive, send)


async def refuse(response: Response, scope: Scope, receive: Receive, send: Send) -> None:
    """Send a refusal: the response; to a websocket, the same response instead of the handshake when the server can
    send one (ASGI's "websocket.http.response"), else a close before it (1008, policy violation)."""
    if scope["type"] == "websocket" and "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008})
        return
    await response(scope, receive, send)
