"""HTTP plumbing of the API: JSON that keeps Chinese readable, errors with their status, the bearer token."""

from __future__ import annotations

import hmac
import json
from typing import Any

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from crag.api.schemas import ErrorOut, ValidationErrorOut
from crag.errors import BackendUnavailable, ConfigError, CragError, IndexNotWritable
from crag.store import BuildInProgress, RebuildNeeded


class Json(JSONResponse):
    """UTF-8 JSON that keeps Chinese readable. A lone surrogate (legal in JSON, not in UTF-8) is
    written as its JSON escape instead of failing the response."""

    def render(self, content: Any) -> bytes:
        return dumps(content).encode("utf-8", "backslashreplace")


def dumps(content: Any) -> str:
    return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


class ApiError(Exception):
    """An error with its HTTP status, raised by the routes."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


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
