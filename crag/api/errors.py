"""The app's error handlers. Each answers in the shape of the path's clients: ``{"error": message}`` for the API's
own routes, OpenAI's under /v1 (``http.error_response`` looks at the path)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from crag.api.guards import BodyTooLarge
from crag.api.http import ApiError, Json, error_code, error_message, error_response, is_openai, status_for
from crag.errors import CragError
from crag.store import BuildInProgress

log = logging.getLogger("crag.api")

HTTP_ERRORS = {
    404: ("No such route: see /docs for the routes of this API.", "unknown_url"),
    400: (
        "The request body could not be parsed: send UTF-8 JSON with `Content-Type: application/json`.",
        "invalid_json",
    ),
    405: ("This route does not take this method: see /docs.", "method_not_allowed"),
}


async def api_error(request: Request, exc: ApiError) -> Json:
    return error_response(
        request.url.path, exc.status, exc.message, code=exc.code, param=exc.param, headers=exc.headers
    )


async def too_large(request: Request, exc: BodyTooLarge) -> Json:
    return error_response(request.url.path, 413, str(exc.detail), code="request_too_large")


async def crag_error(request: Request, exc: CragError) -> Json:
    message = error_message(exc)
    if isinstance(exc, BuildInProgress) and exc.job:
        message += f" GET /index/{exc.job} shows its progress."
    return error_response(request.url.path, status_for(exc), message, code=error_code(exc))


async def invalid(request: Request, exc: RequestValidationError) -> Json:
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


async def http_error(request: Request, exc: StarletteHTTPException) -> Json:
    message, code = HTTP_ERRORS.get(exc.status_code, (str(exc.detail), None))
    headers = getattr(exc, "headers", None)
    return error_response(request.url.path, exc.status_code, message, code=code, headers=headers)


async def unexpected(request: Request, exc: Exception) -> Json:
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return error_response(request.url.path, 500, "Internal error: see the server log.", code="internal_error")


def add_error_handlers(app: FastAPI) -> None:
    # Starlette types a handler as taking any Exception: each of these takes the kind it is added for.
    handlers: dict[type[Exception], Callable[[Request, Any], Awaitable[Json]]] = {
        ApiError: api_error,
        CragError: crag_error,
        RequestValidationError: invalid,
        StarletteHTTPException: http_error,
        BodyTooLarge: too_large,
    }
    for kind, handler in handlers.items():
        app.add_exception_handler(kind, handler)
    app.add_exception_handler(Exception, unexpected)
