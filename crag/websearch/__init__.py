"""Web search for CRAG's corrective step: a short query in, a few ``WebResult`` out.

- ``search``: ``Searcher``, ``DDGSearcher`` (the only module that imports ``ddgs``; retries with backoff),
  ``DisabledSearcher``, ``WebSearchUnavailable``, ``region_for``.
- ``cache``: ``CachedSearcher`` keeps answers on disk for a day; ``normalize_query``, ``cache_key``,
  ``default_cache_dir``.
- ``fetch``: ``fetch_main_text`` / ``fetch_pages`` download the top result pages and keep their main
  text only (trafilatura), as plain text, at most ``MAX_TEXT_CHARS`` of a page.
- here: ``build_searcher(settings)`` wires these together and honours ``CRAG_WEB_SEARCH=off``.

Everything that comes from the web is data for the answer model, never instructions for this code:
it is only extracted and stored as plain text.
"""

from __future__ import annotations

from pathlib import Path

from crag.config import Settings
from crag.websearch.cache import DEFAULT_TTL, CachedSearcher, cache_key, default_cache_dir, normalize_query
from crag.websearch.fetch import (
    DEFAULT_MAX_BYTES,
    FETCH_TIMEOUT,
    HTML_TYPES,
    MAX_TEXT_CHARS,
    MIN_TEXT_CHARS,
    USER_AGENT,
    fetch_main_text,
    fetch_pages,
)
from crag.websearch.search import (
    DEFAULT_TIMEOUT,
    OFF_REASON,
    DDGSearcher,
    DisabledSearcher,
    Searcher,
    WebSearchUnavailable,
    offline,
    region_for,
)

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_TIMEOUT",
    "DEFAULT_TTL",
    "FETCH_TIMEOUT",
    "HTML_TYPES",
    "MAX_TEXT_CHARS",
    "MIN_TEXT_CHARS",
    "OFF_REASON",
    "USER_AGENT",
    "CachedSearcher",
    "DDGSearcher",
    "DisabledSearcher",
    "Searcher",
    "WebSearchUnavailable",
    "build_searcher",
    "cache_key",
    "default_cache_dir",
    "fetch_main_text",
    "fetch_pages",
    "normalize_query",
    "offline",
    "region_for",
]


def build_searcher(settings: Settings, cache_dir: Path | None = None) -> Searcher:
    """The searcher the app uses: cached DDG search, or one that says web search is off."""
    if not settings.web_search:
        return DisabledSearcher()
    inner = DDGSearcher(timeout=min(settings.request_timeout, DEFAULT_TIMEOUT))
    return CachedSearcher(inner, cache_dir or default_cache_dir(settings))
