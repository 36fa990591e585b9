"""Web search for CRAG's corrective step: a short query in, a few ``WebResult`` out.

- ``DDGSearcher`` asks the ``ddgs`` metasearch library (DuckDuckGo's successor package) and turns every
  failure into ``WebSearchUnavailable`` with a short reason; rate limits and timeouts are retried with
  exponential backoff.
- ``CachedSearcher`` keeps answers on disk for a day, so a repeated question costs no request and no
  rate-limit budget.
- ``fetch_main_text`` / ``fetch_pages`` optionally download the top result pages and keep their main
  text only (trafilatura), as plain text.
- ``build_searcher(settings)`` wires these together and honours ``CRAG_WEB_SEARCH=off``.

Everything that comes from the web is data for the answer model, never instructions for this code:
it is only extracted and stored as plain text.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import http.client
import ipaddress
import json
import logging
import os
import re
import socket
import tempfile
import time
import unicodedata
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import trafilatura
from ddgs import DDGS
from ddgs.exceptions import DDGSException, RatelimitException, TimeoutException

from crag.config import Settings
from crag.errors import CragError
from crag.text import has_han
from crag.types import WebResult

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 10.0  # seconds per search request; the model timeout (120 s) is far too long for a lookup
DEFAULT_TTL = 24 * 3600.0  # web answers go stale slowly, and a day covers a working session's repeats
DEFAULT_MAX_BYTES = 2_000_000  # an article's HTML is rarely over 1 MB; bigger is usually not an article
USER_AGENT = "Mozilla/5.0 (compatible; crag-kb/0.1; fetches pages found by a web search for a local PDF chat)"
MIN_TEXT_CHARS = 20  # letters and digits; about four English words or one short Chinese sentence
HTML_TYPES = ("text/html", "application/xhtml+xml")

OFF_REASON = "web search is off"


class WebSearchUnavailable(CragError):
    """The web could not be searched. ``reason`` is short and user-facing; the message adds what to do."""

    def __init__(self, reason: str, advice: str = "Answers use your documents only until it works again.") -> None:
        self.reason = reason
        self.advice = advice
        super().__init__(f"Web search is unavailable: {reason}. {advice}")

    def __reduce__(self) -> tuple[type[WebSearchUnavailable], tuple[str, str]]:
        # Exception pickling replays ``args`` (the full message) into ``reason``; keep the parts instead.
        return type(self), (self.reason, self.advice)


# ---------------------------------------------------------------------------------------------
# Searchers


class Searcher(ABC):
    """Finds web pages for a short query."""

    @abstractmethod
    def search(self, query: str, max_results: int = 5) -> list[WebResult]:
        """At most ``max_results`` hits, best first; ``[]`` when nothing matched.

        Raises ``WebSearchUnavailable`` and nothing else when the web cannot be searched.
        """


class DisabledSearcher(Searcher):
    """What ``build_searcher`` returns when the user turned web search off: callers need no special case."""

    def search(self, query: str, max_results: int = 5) -> list[WebResult]:
        raise WebSearchUnavailable(OFF_REASON, "Set CRAG_WEB_SEARCH=on to let answers use the web.")


_URL = re.compile(r"https?://[^\s)'\"]+")

# Substrings of the errors ddgs wraps (it keeps primp's error name and message in the text, and drops
# the exception chain), which mean that no connection could be made at all.
_OFFLINE_MARKERS = (
    "connecterror",
    "dnserror",
    "dns error",
    "connection refused",
    "network is unreachable",
    "no route to host",
    "failed to lookup address",
    "name or service not known",
    "temporary failure in name resolution",
    "nodename nor servname",
    "tcp connect error",
    "error connecting to socks proxy",
)


def region_for(query: str) -> str:
    """The ddgs region for a query: ``cn-zh`` when it has Chinese characters, else ``us-en``.

    The region matters: ddgs's Wikipedia engine searches ``<lang>.wikipedia.org`` (so ``us-en`` never
    finds Chinese articles) and DuckDuckGo, Brave, Mojeek and Startpage rank by it. ``wt-wt`` (DuckDuckGo's
    "no region") would send Wikipedia to a host that does not exist.
    """
    return "cn-zh" if has_han(query) else "us-en"


def _public_proxy(proxy: str) -> str:
    """A proxy URL without credentials, fit for a message."""
    parts = urlsplit(proxy)
    host = parts.hostname or proxy
    return f"{parts.scheme}://{host}:{parts.port}" if parts.scheme and parts.port else f"{parts.scheme}://{host}"


class DDGSearcher(Searcher):
    """Searches with ``ddgs.DDGS().text``.

    ``backend="auto"`` lets ddgs query Wikipedia and Grokipedia first, then DuckDuckGo, Brave, Mojeek,
    Startpage or Yahoo until it has enough hits, so one engine's rate limit does not end the search.
    ``proxy`` (or the ``DDGS_PROXY`` environment variable, which ddgs reads) routes every request.
    Rate limits and timeouts are retried ``attempts`` times in all, sleeping ``backoff``, then twice that,
    and so on, never more than ``max_wait`` seconds in total; ``sleep`` is injectable for tests.

    ddgs 9.16 swallows each engine's errors and raises only when no engine returned anything: the last
    engine's error, as ``TimeoutException`` when it mentions "timed out", else as ``DDGSException`` (primp's
    connection errors flattened into the message), or ``DDGSException("No results found.")`` when the
    engines answered with nothing or with a non-200 page, which is how their rate limits look. That last
    case returns ``[]``: it cannot be told apart from a query that matches nothing.
    """

    def __init__(
        self,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        region: str | None = None,
        backend: str = "auto",
        safesearch: str = "moderate",
        proxy: str | None = None,
        attempts: int = 3,
        backoff: float = 1.0,
        max_wait: float = 8.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.timeout = timeout
        self.region = region  # None: chosen per query by region_for
        self.backend = backend
        self.safesearch = safesearch
        self.proxy = proxy
        self.attempts = max(1, attempts)
        self.backoff = backoff
        self.max_wait = max_wait
        self._sleep = sleep

    def search(self, query: str, max_results: int = 5) -> list[WebResult]:
        query = " ".join(query.split())
        if not query or max_results < 1:
            return []
        delay, waited = self.backoff, 0.0
        for attempt in range(1, self.attempts + 1):
            try:
                raw = self._text(query, max_results)
            except Exception as exc:  # noqa: BLE001 - ddgs and primp raise many types; each becomes one reason
                failure = self._classify(exc)
                if failure is None:  # ddgs's "No results found."
                    return []
                reason, retryable = failure
                if not retryable or attempt == self.attempts or waited + delay > self.max_wait:
                    logger.info("web search failed after %d attempt(s): %r", attempt, exc)
                    raise WebSearchUnavailable(reason, self._advice(reason)) from None
                logger.info("web search attempt %d: %s; retrying in %.1f s", attempt, reason, delay)
                self._sleep(delay)
                waited += delay
                delay *= 2
                continue
            return _to_results(raw, max_results)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _text(self, query: str, max_results: int) -> list[dict[str, Any]]:
        # A fresh DDGS per call: its engines keep per-request state, so sharing one across threads is unsafe.
        client = DDGS(proxy=self.proxy, timeout=self.timeout)  # type: ignore[arg-type]  # primp takes floats
        return client.text(
            query,
            region=self.region or region_for(query),
            safesearch=self.safesearch,
            max_results=max_results,
            backend=self.backend,
        )

    def _classify(self, exc: BaseException) -> tuple[str, bool] | None:
        """(reason, retryable) for a failure, or None when ddgs only found nothing."""
        # URLs in ddgs's messages carry the query, whose words must not pass for an error's.
        lowered = _URL.sub("<url>", f"{type(exc).__name__}: {exc}").lower()
        if isinstance(exc, RatelimitException) or "ratelimit" in lowered or " 429" in lowered:
            engine = "DuckDuckGo" if self.backend == "duckduckgo" else "the search engines"
            return f"rate-limited by {engine}", True
        # Checked before timeouts: a DNS lookup that times out means no network, and retrying will not help.
        if any(marker in lowered for marker in _OFFLINE_MARKERS):
            return self._offline_reason(), False
        if isinstance(exc, TimeoutException) or "timed out" in lowered or "timeout" in lowered:
            return f"timed out after {self.timeout:g} s", True
        if isinstance(exc, DDGSException) and "no results found" in lowered:
            return None
        detail = str(exc) or type(exc).__name__
        return f"search failed: {detail[:200]}", False

    def _offline_reason(self) -> str:
        proxy = self.proxy or os.environ.get("DDGS_PROXY")
        if proxy:
            return f"offline: no network, or the proxy {_public_proxy(proxy)} is unreachable"
        return "offline: no network"

    @staticmethod
    def _advice(reason: str) -> str:
        if reason.startswith("rate-limited"):
            return "Wait a minute and ask again; meanwhile answers use your documents only."
        if reason.startswith("offline"):
            return "Connect to the internet, or set CRAG_WEB_SEARCH=off to answer from your documents only."
        if reason.startswith("timed out"):
            return "The network is slow or the search engines are busy: ask again in a moment."
        return "Ask again later; meanwhile answers use your documents only."


def _to_results(raw: Sequence[dict[str, Any]], max_results: int) -> list[WebResult]:
    """ddgs dicts (title, href, body; already tag-stripped by ddgs) as WebResults, http(s) only, no duplicates."""
    results: list[WebResult] = []
    seen: set[str] = set()
    for item in raw:
        url = str(item.get("href") or "").strip()
        if urlsplit(url).scheme not in ("http", "https") or url in seen:
            continue
        seen.add(url)
        results.append(
            WebResult(title=str(item.get("title") or "").strip(), url=url, snippet=str(item.get("body") or "").strip())
        )
        if len(results) >= max_results:
            break
    return results


# ---------------------------------------------------------------------------------------------
# On-disk cache


def normalize_query(query: str) -> str:
    """The form of a query that the cache keys on: NFKC, case-folded, single spaces."""
    return " ".join(unicodedata.normalize("NFKC", query).casefold().split())


def cache_key(query: str, max_results: int) -> str:
    payload = json.dumps([normalize_query(query), max_results], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


class CachedSearcher(Searcher):
    """Answers from ``cache_dir`` when an entry younger than ``ttl`` seconds exists, else asks ``inner``.

    One JSON file per (normalised query, max_results). Files that cannot be read or parsed are treated as
    missing. Writes go to a temporary file that is renamed over the entry, so a reader never sees half a
    file. Empty answers are not stored: with ddgs a silent rate limit also looks like "no results".
    """

    VERSION = 1

    def __init__(
        self,
        inner: Searcher,
        cache_dir: Path,
        ttl: float = DEFAULT_TTL,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.inner = inner
        self.cache_dir = Path(cache_dir)
        self.ttl = ttl
        self._clock = clock
        self._pruned = False

    def search(self, query: str, max_results: int = 5) -> list[WebResult]:
        path = self.cache_dir / f"{cache_key(query, max_results)}.json"
        cached = self._read(path)
        if cached is not None:
            return cached
        results = self.inner.search(query, max_results)
        if results:
            self._write(path, query, max_results, results)
        return results

    def _fresh(self, created: float) -> bool:
        age = self._clock() - created
        return 0 <= age < self.ttl

    def _read(self, path: Path) -> list[WebResult] | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data["version"] != self.VERSION or not self._fresh(float(data["created"])):
                return None
            return [
                WebResult(
                    title=str(r["title"]), url=str(r["url"]), snippet=str(r["snippet"]), text=str(r.get("text", ""))
                )
                for r in data["results"]
            ]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            logger.info("ignoring unreadable web cache file %s: %r", path, exc)
            return None

    def _write(self, path: Path, query: str, max_results: int, results: list[WebResult]) -> None:
        data = {
            "version": self.VERSION,
            "created": self._clock(),
            "query": query,
            "max_results": max_results,
            "results": [dataclasses.asdict(r) for r in results],
        }
        tmp: str | None = None
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            self._prune_once()
            fd, tmp = tempfile.mkstemp(dir=self.cache_dir, prefix=".", suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(data, fh, ensure_ascii=False)
            os.replace(tmp, path)
            tmp = None
        except OSError as exc:
            # The cache only saves requests; a read-only or full disk must not fail the answer.
            logger.info("could not write web cache file %s: %r", path, exc)
        finally:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)

    def _prune_once(self) -> None:
        """Delete expired entries and stray temp files, once per searcher, so the folder does not grow forever."""
        if self._pruned:
            return
        self._pruned = True
        now = time.time()  # file times are wall-clock times, whatever clock the entries use
        for entry in self.cache_dir.glob("*"):
            try:
                if entry.is_file() and now - entry.stat().st_mtime > max(self.ttl, 3600.0):
                    entry.unlink()
            except OSError:
                continue


def default_cache_dir(settings: Settings) -> Path:
    """``.crag-cache/web`` beside the index folder (``chroma_db``).

    Beside, not inside: the index folder belongs to the index builder, and wiping it to rebuild the index
    should not be needed to clear web answers, nor should it drop them. It stays in the project folder with
    the app's other data (not ``~/.cache``), so removing the project removes it too.
    """
    return Path(settings.chroma_dir).parent / ".crag-cache" / "web"


def build_searcher(settings: Settings, cache_dir: Path | None = None) -> Searcher:
    """The searcher the app uses: cached DDG search, or one that says web search is off."""
    if not settings.web_search:
        return DisabledSearcher()
    inner = DDGSearcher(timeout=min(settings.request_timeout, DEFAULT_TIMEOUT))
    return CachedSearcher(inner, cache_dir or default_cache_dir(settings))


# ---------------------------------------------------------------------------------------------
# Page text


class _Blocked(Exception):
    """A URL this module refuses to fetch."""


def _check_url(url: str, allow_private: bool) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _Blocked(f"not an http(s) URL: {url!r}")
    if allow_private:
        return
    # A search result could point at this machine or the local network (a model server, a router page);
    # only public addresses are fetched. The check is per lookup, so DNS rebinding is not covered.
    try:
        infos = socket.getaddrinfo(parts.hostname, parts.port or 443, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise _Blocked(f"cannot resolve {parts.hostname}: {exc}") from None
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if not address.is_global:
            raise _Blocked(f"{parts.hostname} resolves to the non-public address {address}")


class _CheckedRedirects(urllib.request.HTTPRedirectHandler):
    """Re-checks every redirect target, so a public page cannot bounce the fetch to a private address."""

    max_redirections = 5

    def __init__(self, allow_private: bool) -> None:
        self.allow_private = allow_private

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]  # stdlib's
        try:
            _check_url(newurl, self.allow_private)
        except _Blocked as exc:
            raise urllib.error.HTTPError(newurl, code, f"redirect refused: {exc}", headers, fp) from None
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _download(url: str, timeout: float, max_bytes: int, allow_private: bool) -> tuple[bytes, str | None] | None:
    """The body and declared charset of an HTML page, or None when it is not a small HTML page."""
    _check_url(url, allow_private)
    opener = urllib.request.build_opener(_CheckedRedirects(allow_private))
    request = urllib.request.Request(
        url,
        headers={
            "User-Agent": USER_AGENT,
            "Accept": "text/html,application/xhtml+xml;q=0.9",
            "Accept-Language": "en,zh;q=0.8",
            "Accept-Encoding": "identity",  # no decompression bombs, and max_bytes caps the real size
        },
    )
    # urllib's timeout bounds each socket operation; the deadline bounds a server that drips bytes.
    deadline = time.monotonic() + timeout
    with opener.open(request, timeout=timeout) as response:
        if response.headers.get_content_type() not in HTML_TYPES:
            return None
        declared = response.headers.get("Content-Length")
        if declared and declared.isdigit() and int(declared) > max_bytes:
            return None
        body = bytearray()
        while len(body) <= max_bytes:
            if time.monotonic() > deadline:
                return None
            # read1 returns what has arrived; read(n) would block until n bytes and outlive the deadline.
            piece = response.read1(min(65536, max_bytes + 1 - len(body)))
            if not piece:
                break
            body += piece
        if len(body) > max_bytes:
            return None
        return bytes(body), response.headers.get_content_charset()


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
    return text


def fetch_main_text(
    url: str, timeout: float = DEFAULT_TIMEOUT, max_bytes: int = DEFAULT_MAX_BYTES, *, allow_private: bool = False
) -> str:
    """The main text of an HTML page as plain text, or ``""`` when it cannot be had.

    Only http(s) URLs, only ``text/html`` (or XHTML) responses of at most ``max_bytes``, within ``timeout``
    seconds. Non-public addresses (loopback, private networks) are refused unless ``allow_private``.
    trafilatura only parses the downloaded bytes; it fetches nothing itself.
    """
    try:
        page = _download(url, timeout, max_bytes, allow_private)
    except (_Blocked, urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        logger.info("not fetching %s: %r", url, exc)
        return ""
    if page is None:
        return ""
    return _extract(page[0], page[1], url)


def fetch_pages(
    results: Sequence[WebResult],
    top_n: int = 3,
    timeout: float = DEFAULT_TIMEOUT,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_workers: int = 4,
    allow_private: bool = False,
) -> list[WebResult]:
    """``results`` with ``text`` filled in for the first ``top_n``, fetched concurrently.

    A page that cannot be fetched keeps an empty ``text``; the snippet still stands. Order is kept.
    """
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
