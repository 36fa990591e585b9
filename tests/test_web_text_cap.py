"""A fetched web page gives at most MAX_TEXT_CHARS of its text to refinement, and a failure while that text is scored
costs the web knowledge only: the documents' passages still answer."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler

import httpx
import pytest

from crag.config import Settings
from crag.types import Action, WebResult
from crag.websearch import MAX_TEXT_CHARS, fetch_main_text
from tests.fakes import FakeSearcher, HashEmbedder, chunk, pipeline
from tests.helpers import http_server

PARAGRAPH = "Green tea is made from the leaves of Camellia sinensis that have not been withered or oxidised. "
LONG_PAGE = (
    "<html><head><title>Tea</title></head><body><article><h1>All about tea</h1>"
    + "".join(f"<p>Paragraph {i}. {PARAGRAPH * 4}</p>" for i in range(2_500))  # about 1 MB of main text
    + "</article></body></html>"
).encode()


class LongPage(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(LONG_PAGE)))
        self.end_headers()
        self.wfile.write(LONG_PAGE)


@pytest.fixture
def long_page() -> Iterator[str]:
    with http_server(LongPage) as url:
        yield url


def test_a_long_page_gives_its_opening_only(long_page: str) -> None:
    text = fetch_main_text(f"{long_page}/tea", timeout=10, allow_private=True)
    assert 0.5 * MAX_TEXT_CHARS < len(text) <= MAX_TEXT_CHARS
    assert text.startswith("All about tea") and "Paragraph 0." in text and "Paragraph 2499." not in text
    assert text.endswith(PARAGRAPH.strip()), "cut at the end of a line, not inside a word"


MARK = "teapot-4711"  # in the web page only


class WebFailsEmbedder(HashEmbedder):
    """Embeds the documents; times out on the web page's text, as Ollama may on a long page."""

    def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        if any(MARK in text for text in texts):
            raise httpx.ReadTimeout("timed out embedding the web strips")
        return super()._embed(texts)


def test_a_failure_scoring_the_web_text_keeps_the_local_answer(settings: Settings) -> None:
    page = WebResult("Widgets", "https://example.com/w", "Widgets and cores.", f"A {MARK} widget uses four cores.")
    fake = pipeline(settings, [chunk("The widget needs two processor cores.")], [0.0], searcher=FakeSearcher([page]))
    fake.scorer.embedder = WebFailsEmbedder()
    answer = fake.ask("How many processor cores does the widget need?", web=True)
    assert answer.action is Action.AMBIGUOUS and answer.complete
    assert answer.trace.web_error == "the web pages could not be scored (ReadTimeout)"
    assert [s.kind for s in answer.trace.strips if s.kept] == ["local"]
    assert "[1]" in answer.text and answer.sources[0].file == "manual.pdf"
