"""What keeps a web page out of the API, and a request from taking more than its share: pure ASGI middleware.

A page on another site can make the browser send requests to 127.0.0.1, and can rename itself to 127.0.0.1 by DNS
(rebinding) to read the answers. Without a token, three rules keep it out:

- ``HostCheck``: a request must be addressed to this machine (a loopback name, the address the connection came
  to) or to a name the user allowed (``--allowed-host``, ``CRAG_ALLOWED_HOSTS``), and a browser's ``Origin`` too.
  One rule for every route, /mcp included (the MCP SDK's own check is off there: this one runs first).
- ``JsonBody``: a request that changes something (POST) must say ``Content-Type: application/json``. A page can
  send a "simple" cross-site POST (a form, text/plain) without asking; a JSON one needs the server's consent
  (CORS), which this server never gives.
- ``BodyLimit``: a body over ``CRAG_API_MAX_BODY_KB`` is refused with 413 before it is read whole, by its
  Content-Length or, for a chunked body, as it arrives.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

from fastapi import HTTPException
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from crag.api.http import error_response, refuse
from crag.config import host_name, is_loopback

_CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _same_address(name: str, local: str) -> bool:
    try:
        return ipaddress.ip_address(name) == ipaddress.ip_address(local.strip("[]"))
    except ValueError:
        return False


class HostRule:
    """The names this server answers to: loopback names on any port, the IP address a connection came to (a
    server bound to 192.168.1.5 answers http://192.168.1.5:8000), and the names the user allowed."""

    def __init__(self, allowed: Iterable[str] = ()) -> None:
        self.allowed = frozenset(n for n in (host_name(a) for a in allowed) if n)

    def allows(self, name: str | None, local: str | None) -> bool:
        if not name:
            return False
        return is_loopback(name) or name in self.allowed or (local is not None and _same_address(name, local))


class HostCheck:
    """421 for a request addressed to a name this server does not answer to; 403 for a browser's request from a
    page of another site (``Origin``)."""

    def __init__(self, app: ASGIApp, rule: HostRule) -> None:
        self.app = app
        self.rule = rule

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        local = scope["server"][0] if scope.get("server") else None
        host = headers.get("host", "")
        origin = headers.get("origin")
        if not self.rule.allows(host_name(host), local):
            shown = host[:100] or "no Host header"
            message = (
                f"This server answers requests addressed to this machine (127.0.0.1, localhost), not to “{shown}”. "
                "If a reverse proxy forwards that name here, start the server with `--allowed-host NAME` (or set "
                "CRAG_ALLOWED_HOSTS), or set CRAG_API_TOKEN."
            )
            await refuse(error_response(scope["path"], 421, message, code="misdirected_request"), scope, receive, send)
        elif origin is not None and not self.rule.allows(_origin_name(origin), local):
            message = (
                f"Requests from web pages of other sites ({origin[:100]}) are refused. Call the API from a program "
                "or from this machine, or allow the page's host with `--allowed-host`."
            )
            await refuse(error_response(scope["path"], 403, message, code="forbidden_origin"), scope, receive, send)
        else:
            await self.app(scope, receive, send)


def _origin_name(origin: str) -> str | None:
    try:
        return urlsplit(origin).hostname  # "null" (a sandboxed page, a file) has none: refused
    except ValueError:
        return None


class JsonBody:
    """415 for a POST (PUT, PATCH, DELETE) whose body is not declared JSON."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in _CHANGES:
            kind = Headers(scope=scope).get("content-type", "").partition(";")[0].strip().lower()
            if kind != "application/json":
                message = (
                    f"Send the body as JSON with `Content-Type: application/json` (this request says "
                    f"“{kind[:60] or 'nothing'}”); where there are no options, the body `{{}}`."
                )
                await error_response(scope["path"], 415, message, code="unsupported_media_type")(scope, receive, send)
                return
        await self.app(scope, receive, send)


class BodyTooLarge(HTTPException):
    """Raised while a body is read, when it grows past the limit: FastAPI passes an HTTPException on as it is."""


def too_large_message(limit_kb: int) -> str:
    return (
        f"The request body is over {limit_kb} KB, the largest this server reads (CRAG_API_MAX_BODY_KB): send a "
        "shorter question or fewer earlier messages."
    )


class BodyLimit:
    """413 for a body over ``limit_kb``: by its Content-Length before anything is read, else as it streams in."""

    def __init__(self, app: ASGIApp, limit_kb: int) -> None:
        self.app = app
        self.limit_kb = limit_kb
        self.limit = limit_kb * 1024

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.limit:
            await error_response(scope["path"], 413, too_large_message(self.limit_kb), code="request_too_large")(
                scope, receive, send
            )
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise BodyTooLarge(413, too_large_message(self.limit_kb))
            return message

        await self.app(scope, counted, send)
