"""The on-disk web cache: hits, keys, expiry, corrupt and unwritable files. No network: the searcher
behind the cache is a fake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crag.types import WebResult
from crag.websearch import CachedSearcher, Searcher, WebSearchUnavailable, cache_key

pytestmark = pytest.mark.reliability  # a cache that is stale, corrupt or unwritable


HIT = WebResult(title="Green tea", url="https://example.org/tea", snippet="Green tea is unoxidised.")


class FakeSearcher(Searcher):
    def __init__(self, results: list[WebResult] | None = None, error: Exception | None = None) -> None:
        self.results = [HIT] if results is None else results
        self.error = error
        self.calls: list[tuple[str, int]] = []

    def search(self, query: str, max_results: int = 5) -> list[WebResult]:
        self.calls.append((query, max_results))
        if self.error:
            raise self.error
        return list(self.results)


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_cache_hit_skips_the_network_and_normalises_the_query(tmp_path: Path) -> None:
    inner = FakeSearcher()
    searcher = CachedSearcher(inner, tmp_path / "web")

    assert searcher.search("Green  Tea", 3) == [HIT]
    assert searcher.search("  green tea ", 3) == [HIT]
    assert inner.calls == [("Green  Tea", 3)]

    files = list((tmp_path / "web").iterdir())
    assert [f.name for f in files] == [f"{cache_key('green tea', 3)}.json"]  # no temp file left behind
    assert json.loads(files[0].read_text(encoding="utf-8"))["results"][0]["url"] == HIT.url


def test_cache_key_includes_max_results(tmp_path: Path) -> None:
    inner = FakeSearcher()
    searcher = CachedSearcher(inner, tmp_path)
    searcher.search("tea", 3)
    searcher.search("tea", 5)
    assert len(inner.calls) == 2


def test_cache_keeps_chinese_queries_apart(tmp_path: Path) -> None:
    inner = FakeSearcher()
    searcher = CachedSearcher(inner, tmp_path)
    searcher.search("绿茶", 3)
    searcher.search("红茶", 3)
    searcher.search("绿茶", 3)
    assert [q for q, _ in inner.calls] == ["绿茶", "红茶"]


def test_expired_entries_are_refetched(tmp_path: Path) -> None:
    clock = Clock()
    inner = FakeSearcher()
    searcher = CachedSearcher(inner, tmp_path, ttl=3600, clock=clock)

    searcher.search("tea", 3)
    clock.now += 3599
    searcher.search("tea", 3)
    assert len(inner.calls) == 1

    clock.now += 2
    searcher.search("tea", 3)
    assert len(inner.calls) == 2
    clock.now += 10  # the refetch was stored again with a new time
    searcher.search("tea", 3)
    assert len(inner.calls) == 2


def test_default_ttl_is_a_day(tmp_path: Path) -> None:
    clock = Clock()
    inner = FakeSearcher()
    searcher = CachedSearcher(inner, tmp_path, clock=clock)
    searcher.search("tea", 3)
    clock.now += 23 * 3600
    searcher.search("tea", 3)
    clock.now += 2 * 3600
    searcher.search("tea", 3)
    assert len(inner.calls) == 2


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"\xff\xfe\x00garbage", b"[1, 2, 3]", b'{"version": 1, "created": "soon", "results": []}', b""],
)
def test_corrupt_cache_files_are_ignored_and_replaced(tmp_path: Path, content: bytes) -> None:
    inner = FakeSearcher()
    searcher = CachedSearcher(inner, tmp_path)
    (tmp_path / f"{cache_key('tea', 3)}.json").write_bytes(content)

    assert searcher.search("tea", 3) == [HIT]
    assert searcher.search("tea", 3) == [HIT]
    assert len(inner.calls) == 1


def test_empty_answers_and_failures_are_not_cached(tmp_path: Path) -> None:
    empty = FakeSearcher(results=[])
    searcher = CachedSearcher(empty, tmp_path)
    assert searcher.search("tea", 3) == []
    assert searcher.search("tea", 3) == []
    assert len(empty.calls) == 2

    failing = FakeSearcher(error=WebSearchUnavailable("offline: no network"))
    with pytest.raises(WebSearchUnavailable):
        CachedSearcher(failing, tmp_path / "other").search("tea", 3)
    assert not (tmp_path / "other").exists() or not any((tmp_path / "other").iterdir())


def test_unwritable_cache_does_not_fail_the_search(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    searcher = CachedSearcher(FakeSearcher(), blocker / "web")
    assert searcher.search("tea", 3) == [HIT]
