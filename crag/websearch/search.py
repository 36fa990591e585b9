"""Searching the web: a short query in, a few ``WebResult`` out, or ``WebSearchUnavailable`` with a reason.

``DDGSearcher`` asks the ``ddgs`` metasearch library (DuckDuckGo's successor package; this is the only module
that imports it) and turns every failure into ``WebSearchUnavailable`` with a short reason; rate limits and
timeouts are retried with exponential backoff. ``DisabledSearcher`` stands in when web search is off.
"""

from __future__ import annotations

import logging
import os
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from ddgs import DDGS
from ddgs.exceptions import DDGSException, RatelimitException, TimeoutException
from tenacity import Retrying, before_sleep_log, retry_if_exception, wait_exponential

from crag.errors import CragError
from crag.text import has_han
from crag.types import WebResult

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 10.0  # seconds per search request; the model timeout (120 s) is far too long for a lookup

OFF_REASON = "web search is off"
OFFLINE = "offline"  # how the reason of a search that could not connect at all begins


def offline(reason: str) -> bool:
    """Whether a search failed for want of a network: ``WebSearchUnavailable.reason``, or an answer's
    ``Trace.web_error``."""
    return reason.startswith(OFFLINE)


class WebSearchUnavailable(CragError):
    """The web could not be searched. ``reason`` is short and user-facing; the message adds what to do."""

    def __init__(self, reason: str, advice: str = "Answers use your documents only until it works again.") -> None:
        self.reason = reason
        self.advice = advice
        super().__init__(f"Web search is unavailable: {reason}. {advice}")

    def __reduce__(self) -> tuple[type[WebSearchUnavailable], tuple[str, str]]:
        # Exception pickling replays ``args`` (the full message) into ``reason``; keep the parts instead.
        return type(self), (self.reason, self.advice)


class _Failure(Exception):
    """One failed search: its short reason, whether it is worth another try, and what ddgs raised."""

    def __init__(self, reason: str, retryable: bool, cause: BaseException) -> None:
        super().__init__(reason)
        self.reason, self.retryable, self.cause = reason, retryable, cause


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
        # The bound is on the time spent sleeping (idle_for), not the clock, which also counts slow searches.
        retrying = Retrying(
            retry=retry_if_exception(lambda exc: isinstance(exc, _Failure) and exc.retryable),
            wait=wait_exponential(multiplier=self.backoff),
            stop=lambda state: (
                state.attempt_number >= self.attempts or state.idle_for + state.upcoming_sleep > self.max_wait
            ),
            sleep=self._sleep,
            before_sleep=before_sleep_log(logger, logging.INFO),
            reraise=True,
        )
        try:
            return retrying(self._attempt, query, max_results)
        except _Failure as failure:
            attempts = retrying.statistics["attempt_number"]
            logger.info("web search failed after %d attempt(s): %r", attempts, failure.cause)
            raise WebSearchUnavailable(failure.reason, self._advice(failure.reason)) from None

    def _attempt(self, query: str, max_results: int) -> list[WebResult]:
        try:
            raw = self._text(query, max_results)
        except Exception as exc:  # noqa: BLE001 - ddgs and primp raise many types; each becomes one reason
            failure = self._classify(exc)
            if failure is None:  # ddgs's "No results found."
                return []
            raise _Failure(*failure, exc) from None
        return _to_results(raw, max_results)

    def _text(self, query: str, max_results: int) -> list[dict[str, Any]]:
        # A fresh DDGS per call: its engines keep per-request state, so sharing one across threads is unsafe.
        client = DDGS(proxy=self.proxy, timeout=self.timeout)  # type: ignore[arg-type]  # ddgs annotates an int; primp under it takes float seconds
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
            return f"{OFFLINE}: no network, or the proxy {_public_proxy(proxy)} is unreachable"
        return f"{OFFLINE}: no network"

    @staticmethod
    def _advice(reason: str) -> str:
        if reason.startswith("rate-limited"):
            return "Wait a minute and ask again; meanwhile answers use your documents only."
        if offline(reason):
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
