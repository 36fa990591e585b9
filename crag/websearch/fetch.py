"""Reading the pages a search found: download an HTML page, keep its main text (trafilatura) as plain text.

Everything that comes from the web is data for the answer model, never instructions for this code: it is
only extracted and returned as plain text. Only public http(s) addresses are fetched: each request goes to the
address its check found, so a name cannot resolve to a public address for the check and to a private one for the
connection (DNS rebinding).
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import logging
import socket
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import httpx
import trafilatura

from crag.types import WebResult

logger = logging.getLogger(__name__)

FETCH_TIMEOUT = 10.0  # seconds for one page; a lookup, not a model call
DEFAULT_MAX_BYTES = 2_000_000  # an article's HTML is rarely over 1 MB; bigger is usually not an article
USER_AGENT = "Mozilla/5.0 (compatible; crag-kb/0.1; fetches pages found by a web search for a local PDF chat)"
MIN_TEXT_CHARS = 20  # letters and digits; about four English words or one short Chinese sentence
# A page's main text is scored strip by strip, in one embedding request: a whole long page could outlast the
# model's timeout. About 1,300 English words, 25 strips: where a page answers a search, it mostly does so early.
MAX_TEXT_CHARS = 8_000
HTML_TYPES = ("text/html", "application/xhtml+xml")
MAX_REDIRECTS = 5
_HEADERS = {
    "User-Agent": USER_AGENT,
    "Accept": "text/html,application/xhtml+xml;q=0.9",
    "Accept-Language": "en,zh;q=0.8",
    "Accept-Encoding": "identity",  # no decompression bombs, and max_bytes caps the real size
}


class _Blocked(Exception):
    """A URL this module refuses to fetch."""


def _check_url(url: str, allow_private: bool) -> str:
    """The address to connect to for ``url``: the first its host resolves to, when every one is public (or
    ``allow_private``). A search result could point at this machine or the local network (a model server, a router
    page); only public addresses are fetched."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _Blocked(f"not an http(s) URL: {url!r}")
    try:
        infos = socket.getaddrinfo(parts.hostname, parts.port or 443, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise _Blocked(f"cannot resolve {parts.hostname}: {exc}") from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    for address in addresses if not allow_private else ():
        if not address.is_global:
            raise _Blocked(f"{parts.hostname} resolves to the non-public address {address}")
    if not addresses:
        raise _Blocked(f"{parts.hostname} resolves to no address")
    return str(addresses[0])


def _download(url: str, timeout: float, max_bytes: int, allow_private: bool) -> tuple[bytes, str | None] | None:
    """The body and declared charset of an HTML page, or None when it is not a small HTML page.

    Redirects are followed here rather than by httpx, so every target is checked before it is asked (a public
    page cannot bounce the fetch to a private address) and a redirect's own body is never read. Each request goes
    to the address its check found, not to what the name resolves to a moment later (DNS rebinding), on a
    connection of its own.
    """
    # httpx's timeout bounds each socket operation; the deadline bounds the whole fetch (a server that drips bytes).
    deadline = time.monotonic() + timeout
    for _ in range(1 + MAX_REDIRECTS):
        address = _check_url(url, allow_private)
        if time.monotonic() > deadline:
            return None
        target = httpx.URL(url)
        with httpx.Client(headers=_HEADERS, timeout=timeout) as client, _pinned(client, target, address) as response:
            if not response.has_redirect_location:
                return _read_html(response, max_bytes, deadline)
            url = str(target.join(response.headers["Location"]))
    return None  # too many redirects


def _pinned(client: httpx.Client, url: httpx.URL, address: str) -> contextlib.AbstractContextManager[httpx.Response]:
    """GET ``url`` from ``address``: the connection goes to the address, while the request names the host (its Host
    header, and for https the name TLS asks for and checks the certificate against, SNI)."""
    name = url.raw_host.decode("ascii")  # an international name as DNS and TLS have it (xn--...)
    host = (f"[{name}]" if ":" in name else name) + ("" if url.port is None else f":{url.port}")
    extensions = {"sni_hostname": name} if url.scheme == "https" else {}
    return client.stream("GET", url.copy_with(host=address), headers={"Host": host}, extensions=extensions)


def _read_html(response: httpx.Response, max_bytes: int, deadline: float) -> tuple[bytes, str | None] | None:
    content_type = response.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
    if not response.is_success or content_type not in HTML_TYPES:
        return None
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        return None
    body = bytearray()
    # iter_raw yields what has arrived, as sent: nothing is decompressed, so max_bytes caps the real size.
    for piece in response.iter_raw():
        body += piece
        if len(body) > max_bytes or time.monotonic() > deadline:
            return None
    return bytes(body), response.charset_encoding


def _extract(body: bytes, charset: str | None, url: str) -> str:
    if b"\x00" in body[:8192]:  # binary served as text/html
        return ""
    document: str | bytes = body
    # An unknown charset name leaves the bytes to trafilatura's own encoding detection.
    if charset:
        with contextlib.suppress(LookupError):
            document = body.decode(charset, errors="replace")
    try:
        text = trafilatura.extract(
            document,
            url=url,
            output_format="txt",  # plain text: markup, scripts and styles are dropped
            include_comments=False,
            include_tables=True,
            include_links=False,
            include_images=False,
            favor_precision=True,  # menus and boilerplate hurt an answer more than a missing paragraph
            with_metadata=False,
        )
    except Exception as exc:  # noqa: BLE001 - a third-party parser on hostile input: any failure means no text
        logger.info("text extraction failed for %s: %r", url, exc)
        return ""
    if not text:
        return ""
    lines = (" ".join(line.split()) for line in text.splitlines())
    text = "\n".join(line for line in lines if line)
    # A few characters are parser debris from tag soup, not a page's main text, and nothing to answer from.
    if sum(ch.isalnum() for ch in text) < MIN_TEXT_CHARS:
        return ""
    return capped(text)


def capped(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """The first ``limit`` characters of a page's text, ending at a line's end (or a word's, for a longer line)."""
    if len(text) <= limit:
        return text
    head = text[: limit + 1]
    cut = head.rfind("\n")
    if cut < limit // 2:  # a long paragraph: end at a space rather than lose half of what fits
        cut = head.rfind(" ")
    return text[: cut if cut > 0 else limit].rstrip()


def fetch_main_text(
    url: str, timeout: float = FETCH_TIMEOUT, max_bytes: int = DEFAULT_MAX_BYTES, *, allow_private: bool = False
) -> str:
    """The main text of an HTML page as plain text (its first ``MAX_TEXT_CHARS``), or ``""`` when it cannot be had.

    Only http(s) URLs, only ``text/html`` (or XHTML) responses of at most ``max_bytes``, within ``timeout``
    seconds. Non-public addresses (loopback, private networks) are refused unless ``allow_private``.
    trafilatura only parses the downloaded bytes; it fetches nothing itself.
    """
    try:
        page = _download(url, timeout, max_bytes, allow_private)
    except (_Blocked, httpx.HTTPError, httpx.InvalidURL, OSError, ValueError, ImportError) as exc:
        # ImportError: httpx wants the socksio package when ALL_PROXY or HTTPS_PROXY is a socks:// proxy.
        logger.info("not fetching %s: %r", url, exc)
        return ""
    if page is None:
        return ""
    return _extract(page[0], page[1], url)


def fetch_pages(
    results: Sequence[WebResult],
    top_n: int = 3,
    timeout: float = FETCH_TIMEOUT,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_workers: int = 4,
    allow_private: bool = False,
) -> list[WebResult]:
    """``results`` with ``text`` filled in for the first ``top_n``, fetched concurrently.

    A page that cannot be fetched keeps an empty ``text``; the snippet still stands. Order is kept.
    ``timeout`` is capped at ``FETCH_TIMEOUT``: callers pass their own (the model's 120 s), and a page that
    takes longer than a few seconds is not worth holding an answer for.
    """
    timeout = min(timeout, FETCH_TIMEOUT)
    todo = [i for i, r in enumerate(results[: max(0, top_n)]) if not r.text]
    out = list(results)
    if not todo:
        return out
    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(todo))), thread_name_prefix="crag-fetch") as pool:
        texts = pool.map(
            lambda i: fetch_main_text(results[i].url, timeout, max_bytes, allow_private=allow_private), todo
        )
        for i, text in zip(todo, texts, strict=True):
            out[i] = dataclasses.replace(results[i], text=text)
    return out
