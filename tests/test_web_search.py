"""Web search: ddgs error mapping and backoff, region, web search off, wiring. Nothing here reaches the
internet: ddgs is either monkeypatched or pointed at a closed loopback proxy."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from ddgs.ddgs import DDGS as RealDDGS
from ddgs.exceptions import DDGSException, RatelimitException, TimeoutException

from crag.config import load_settings
from crag.errors import CragError
from crag.types import WebResult
from crag.websearch import (
    OFF_REASON,
    CachedSearcher,
    DDGSearcher,
    WebSearchUnavailable,
    build_searcher,
    region_for,
)
from tests.helpers import refused_port

pytestmark = pytest.mark.reliability  # web search that fails: rate limits, timeouts, offline


@pytest.fixture(autouse=True)
def _ddgs_cannot_leave_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """A safety net: ddgs sends every request through DDGS_PROXY when no proxy is given, and nothing
    listens there, so a test that forgot to fake ddgs fails instead of searching the internet."""
    monkeypatch.setenv("DDGS_PROXY", f"socks5h://127.0.0.1:{refused_port()}")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)


# ---------------------------------------------------------------------------------------------
# DDGSearcher: error mapping and backoff (ddgs.DDGS.text monkeypatched)


@dataclass
class ScriptedText:
    """Stands in for ``DDGS.text``: each call takes the next step; an exception is raised, a list returned."""

    steps: list[Any]
    calls: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, client: RealDDGS, query: str, **kwargs: Any) -> list[dict[str, Any]]:
        self.calls.append({"query": query, **kwargs})
        step = self.steps[min(len(self.calls), len(self.steps)) - 1]
        if isinstance(step, BaseException):
            raise step
        return step


RAW = [
    {"title": "Green tea - Wikipedia", "href": "https://en.wikipedia.org/wiki/Green_tea", "body": "Green tea is..."},
    {"title": "Duplicate", "href": "https://en.wikipedia.org/wiki/Green_tea", "body": "again"},
    {"title": "Not a page", "href": "javascript:alert(1)", "body": "x"},
    {"title": "Tea guide", "href": "https://example.org/guide", "body": "How to brew."},
]

# What ddgs 9.16 raises when every engine failed to connect: primp's error flattened into the message.
CONNECT_FAILURE = (
    "ConnectError: ConnectError('error sending request for url (https://www.mojeek.com/search?q=tea) "
    "> tcp connect error > Connection refused (os error 111)')"
)
DNS_FAILURE = (
    "DNSError: DNSError('error sending request for url (https://html.duckduckgo.com/html/) > client error "
    "(Connect) > dns error > failed to lookup address information: Name or service not known')"
)


def scripted(monkeypatch: pytest.MonkeyPatch, *steps: Any) -> ScriptedText:
    fake = ScriptedText(list(steps))
    # The real class: ``ddgs.DDGS`` is a lazy proxy until first use, and patching the proxy patches nothing.
    monkeypatch.setattr(RealDDGS, "text", lambda client, query, **kwargs: fake(client, query, **kwargs))
    return fake


def searcher_with(sleeps: list[float], **kwargs: Any) -> DDGSearcher:
    return DDGSearcher(sleep=sleeps.append, **kwargs)


def test_results_are_mapped_deduplicated_and_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = scripted(monkeypatch, RAW)
    sleeps: list[float] = []
    results = searcher_with(sleeps).search("green tea", 5)
    assert results == [
        WebResult(
            title="Green tea - Wikipedia", url="https://en.wikipedia.org/wiki/Green_tea", snippet="Green tea is..."
        ),
        WebResult(title="Tea guide", url="https://example.org/guide", snippet="How to brew."),
    ]
    assert fake.calls == [
        {"query": "green tea", "region": "us-en", "safesearch": "moderate", "max_results": 5, "backend": "auto"}
    ]
    assert searcher_with(sleeps).search("green tea", 1) == results[:1]
    assert sleeps == []


def test_region_follows_the_query_script(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = scripted(monkeypatch, RAW)
    searcher_with([]).search("绿茶 的 功效", 3)
    searcher_with([]).search("green tea benefits", 3)
    searcher_with([], region="uk-en").search("绿茶", 3)
    assert [c["region"] for c in fake.calls] == ["cn-zh", "us-en", "uk-en"]
    assert region_for("Qwen3 模型") == "cn-zh"
    assert region_for("café au lait") == "us-en"


def test_rate_limit_is_retried_with_backoff_then_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = scripted(monkeypatch, RatelimitException("https://html.duckduckgo.com/html 202 Ratelimit"))
    sleeps: list[float] = []
    with pytest.raises(WebSearchUnavailable) as info:
        searcher_with(sleeps).search("tea", 5)
    assert info.value.reason.startswith("rate-limited")
    assert isinstance(info.value, CragError)
    assert "Wait a minute" in str(info.value)
    assert len(fake.calls) == 3
    assert sleeps == [1.0, 2.0]


def test_rate_limit_names_duckduckgo_when_it_is_the_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    scripted(monkeypatch, RatelimitException("202 Ratelimit"))
    with pytest.raises(WebSearchUnavailable) as info:
        searcher_with([], backend="duckduckgo").search("tea", 5)
    assert info.value.reason == "rate-limited by DuckDuckGo"


def test_query_words_in_error_urls_are_not_taken_for_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    message = "StatusError: StatusError('bad status for url (https://www.mojeek.com/search?q=ratelimit+timeout)')"
    fake = scripted(monkeypatch, DDGSException(message))
    with pytest.raises(WebSearchUnavailable) as info:
        searcher_with([]).search("ratelimit timeout", 5)
    assert info.value.reason.startswith("search failed: StatusError")
    assert len(fake.calls) == 1


def test_the_error_survives_pickling() -> None:
    import pickle

    error = pickle.loads(pickle.dumps(WebSearchUnavailable("offline: no network", "Connect.")))
    assert (error.reason, str(error)) == (
        "offline: no network",
        "Web search is unavailable: offline: no network. Connect.",
    )


def test_success_after_one_rate_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = scripted(monkeypatch, RatelimitException("429"), RAW)
    sleeps: list[float] = []
    results = searcher_with(sleeps).search("tea", 5)
    assert [r.url for r in results] == ["https://en.wikipedia.org/wiki/Green_tea", "https://example.org/guide"]
    assert len(fake.calls) == 2
    assert sleeps == [1.0]


def test_timeouts_are_retried_then_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = scripted(monkeypatch, TimeoutException("operation timed out"))
    sleeps: list[float] = []
    with pytest.raises(WebSearchUnavailable) as info:
        searcher_with(sleeps, timeout=10).search("tea", 5)
    assert info.value.reason == "timed out after 10 s"
    assert len(fake.calls) == 3
    assert sleeps == [1.0, 2.0]


def test_total_backoff_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = scripted(monkeypatch, RatelimitException("ratelimit"))
    sleeps: list[float] = []
    with pytest.raises(WebSearchUnavailable):
        searcher_with(sleeps, attempts=10, backoff=2.0, max_wait=7.0).search("tea", 5)
    assert sleeps == [2.0, 4.0]  # a third wait (8 s) would pass 7 s in all
    assert len(fake.calls) == 3


@pytest.mark.parametrize("message", [CONNECT_FAILURE, DNS_FAILURE])
def test_connection_failures_mean_offline_and_are_not_retried(monkeypatch: pytest.MonkeyPatch, message: str) -> None:
    monkeypatch.delenv("DDGS_PROXY", raising=False)
    fake = scripted(monkeypatch, DDGSException(DDGSException(message)))
    sleeps: list[float] = []
    with pytest.raises(WebSearchUnavailable) as info:
        searcher_with(sleeps).search("tea", 5)
    assert info.value.reason == "offline: no network"
    assert "Connect to the internet" in str(info.value)
    assert len(fake.calls) == 1
    assert sleeps == []


def test_dns_timeout_means_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DDGS_PROXY", raising=False)
    scripted(monkeypatch, TimeoutException("DNSTimeoutError('... > dns error > request timed out')"))
    with pytest.raises(WebSearchUnavailable) as info:
        searcher_with([]).search("tea", 5)
    assert info.value.reason.startswith("offline")


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (
            DDGSException("_extract_vqd() Could not extract vqd."),
            "search failed: _extract_vqd() Could not extract vqd.",
        ),
        (ValueError("bad things"), "search failed: bad things"),
        (KeyError("href"), "search failed: 'href'"),
    ],
)
def test_other_errors_become_search_failed(monkeypatch: pytest.MonkeyPatch, error: Exception, reason: str) -> None:
    fake = scripted(monkeypatch, error)
    sleeps: list[float] = []
    with pytest.raises(WebSearchUnavailable) as info:
        searcher_with(sleeps).search("tea", 5)
    assert info.value.reason == reason
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert len(fake.calls) == 1
    assert sleeps == []


def test_no_results_is_an_empty_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    scripted(monkeypatch, DDGSException("No results found."))
    assert searcher_with([]).search("xyzzy plugh", 5) == []


def test_blank_query_asks_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = scripted(monkeypatch, RAW)
    assert searcher_with([]).search("   ", 5) == []
    assert searcher_with([]).search("tea", 0) == []
    assert fake.calls == []


def test_network_absent_real_ddgs_through_a_closed_loopback_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every ddgs request goes through the proxy, which refuses at once: nothing leaves this machine,
    # not even a DNS lookup (the proxy would resolve names).
    for name in ("NO_PROXY", "no_proxy", "DDGS_PROXY", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    proxy = f"http://user:secret@127.0.0.1:{refused_port()}"
    sleeps: list[float] = []
    started = time.monotonic()
    with pytest.raises(WebSearchUnavailable) as info:
        DDGSearcher(proxy=proxy, timeout=5, sleep=sleeps.append).search("green tea 绿茶", 5)
    assert time.monotonic() - started < 5
    assert info.value.reason.startswith("offline: no network")
    assert "secret" not in str(info.value)
    assert sleeps == []


def test_unfaked_ddgs_meets_the_dead_ddgs_proxy() -> None:
    # The autouse safety net itself, and the reason when the environment's proxy is what fails.
    with pytest.raises(WebSearchUnavailable) as info:
        DDGSearcher(timeout=5, sleep=lambda _: None).search("green tea", 5)
    assert info.value.reason.startswith("offline: no network, or the proxy socks5h://127.0.0.1:")


def test_web_search_off(tmp_path: Path) -> None:
    settings = load_settings(web_search=False, chroma_dir=tmp_path / "chroma_db")
    with pytest.raises(WebSearchUnavailable) as info:
        build_searcher(settings).search("tea", 5)
    assert info.value.reason == OFF_REASON == "web search is off"
    assert "CRAG_WEB_SEARCH=on" in str(info.value)


def test_web_search_off_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAG_WEB_SEARCH", "off")
    with pytest.raises(WebSearchUnavailable, match=re.escape(OFF_REASON)):
        build_searcher(load_settings()).search("tea", 5)


def test_build_searcher_caches_beside_the_index(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = scripted(monkeypatch, RAW)
    searcher = build_searcher(load_settings(chroma_dir=tmp_path / "data" / "chroma_db"))
    assert isinstance(searcher, CachedSearcher)
    assert isinstance(searcher.inner, DDGSearcher) and searcher.inner.timeout == 10
    assert searcher.cache_dir == tmp_path / "data" / ".crag-cache" / "web"
    first = searcher.search("green tea", 5)
    assert build_searcher(load_settings(chroma_dir=tmp_path / "data" / "chroma_db")).search("Green Tea", 5) == first
    assert len(fake.calls) == 1
