"""Chroma, embedded (``PersistentClient``) or a server (``HttpClient``). The one module that imports chromadb.

chromadb is imported when a client is first needed, not with this module: importing it takes about a second,
and the app's first page lists the knowledge base (its pointer and manifest files) without it.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

if TYPE_CHECKING:
    import chromadb

# What a failure says about the index, by the OS's error number or SQLite's result code (chromadb's Rust core raises
# ``InternalError("... (os error 28)")`` or ``"error returned from database: (code: 5) database is locked"``).
# "locked", "disk full", "denied" or "disk error" (``common.Blocked``): nothing is wrong with what the index holds.
# A missing file is not among them: inside Chroma's folder it means damage.
ERRNO_BLOCKED = {
    errno.EACCES: "denied",
    errno.EPERM: "denied",
    errno.EROFS: "denied",
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk full",
    errno.EIO: "disk error",
}
SQLITE_BLOCKED = {
    5: "locked",  # SQLITE_BUSY
    6: "locked",  # SQLITE_LOCKED
    3: "denied",  # SQLITE_PERM
    8: "denied",  # SQLITE_READONLY
    14: "denied",  # SQLITE_CANTOPEN
    23: "denied",  # SQLITE_AUTH
    13: "disk full",  # SQLITE_FULL
    10: "disk error",  # SQLITE_IOERR
}

_servers: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
_servers_lock = threading.Lock()


def _settings() -> chromadb.Settings:
    import chromadb

    return chromadb.Settings(anonymized_telemetry=False)


def embedded_client(path: Path) -> Any:
    import chromadb

    return chromadb.PersistentClient(path=str(path), settings=_settings())


def forget_embedded() -> None:
    """chromadb keeps one embedded client per path per process; a discarded folder needs a new one."""
    from chromadb.api.client import SharedSystemClient

    SharedSystemClient.clear_system_cache()
    # The cache holds the server clients' systems too: those clients are dead now.
    with _servers_lock:
        _servers.clear()


def server_client(url: str, headers: Mapping[str, str]) -> Any:
    """One client per server and headers for the process: creating one costs requests (tenant, database)."""
    import chromadb

    key = (url, tuple(sorted(headers.items())))
    with _servers_lock:
        client = _servers.get(key)
        if client is None:
            parts = urlsplit(url if "://" in url else f"http://{url}")
            ssl = parts.scheme == "https"
            client = chromadb.HttpClient(
                host=parts.hostname or "127.0.0.1",
                port=parts.port or (443 if ssl else 8000),
                ssl=ssl,
                headers=dict(headers) or None,
                settings=_settings(),
            )
            _servers[key] = client
    return client


def is_missing(exc: BaseException) -> bool:
    """A collection or record that is not there (deleted by a newer build, or never written)."""
    from chromadb.errors import NotFoundError

    return isinstance(exc, NotFoundError)


def unreachable(exc: BaseException) -> str | None:
    """Why the server cannot be used, when that is what ``exc`` says; None for any other failure."""
    from chromadb.errors import AuthorizationError, ChromaAuthError

    if isinstance(exc, ChromaAuthError | AuthorizationError):
        return f"it refused the credentials ({exc})"
    if isinstance(exc, httpx.TransportError):
        return f"{type(exc).__name__}: {exc}"
    if isinstance(exc, ValueError) and "Could not connect" in str(exc):  # HttpClient() checks the server
        return "nothing answers there"
    # A proxy in front of Chroma answers 401/403 with its own body: chromadb raises a bare Exception
    # (a ValueError while the client is created).
    text = str(exc)
    if type(exc) in (Exception, ValueError) and any(s in text for s in ("401", "403", "Unauthorized", "Forbidden")):
        return f"it refused the request ({text[:200]})"
    return None


def blocked(exc: BaseException) -> str | None:
    """Why the index cannot be used now when ``exc`` says it is locked, the disk full or failing, or access denied;
    None for any other failure (a damaged database among them)."""
    if isinstance(exc, OSError) and exc.errno in ERRNO_BLOCKED:
        return ERRNO_BLOCKED[exc.errno]
    code = getattr(exc, "sqlite_errorcode", None)  # Python's sqlite3 says it directly
    if isinstance(code, int):
        return SQLITE_BLOCKED.get(code & 0xFF)  # an extended code's low byte is its primary code
    text = str(exc)
    os_error = _number_after(text, "(os error ")
    if os_error is not None:
        return ERRNO_BLOCKED.get(os_error)
    sqlite = _number_after(text, "(code: ")
    return SQLITE_BLOCKED.get(sqlite & 0xFF) if sqlite is not None else None


def _number_after(text: str, marker: str) -> int | None:
    start = text.rfind(marker)
    if start < 0:
        return None
    digits = text[start + len(marker) :].split(")", 1)[0].strip()
    return int(digits) if digits.isdigit() else None
