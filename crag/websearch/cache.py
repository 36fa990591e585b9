"""The on-disk web cache: one JSON file per (normalised query, max_results), fresh for a day.

A repeated question costs no request and no rate-limit budget.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import tempfile
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path

from crag.config import Settings
from crag.types import WebResult
from crag.websearch.search import Searcher

logger = logging.getLogger(__name__)

DEFAULT_TTL = 24 * 3600.0  # web answers go stale slowly, and a day covers a working session's repeats


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

    Not diskcache (installed only as llama-cpp-python's dependency): it would save about 30 lines, but it
    unpickles what a foreign ``cache.db`` holds where these files are only ever parsed as JSON, an injected
    clock still needs the entry's own time, and one corrupt database would drop every entry, not one.
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
