"""CRAG_OLLAMA_URL pointing at something that is not Ollama, answering 200 with a page (a proxy's login page): the
probe says so, and neither the sidebar nor /health fails."""

from __future__ import annotations

from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from crag.api import create_app
from crag.config import Settings
from crag.models import ollama_health
from tests.apiclient import hash_embedder
from tests.apptest import app, texts, use_pipeline
from tests.helpers import http_server

LOGIN = b"<!doctype html><title>Sign in</title><form action=/login><input name=user></form>"


class LoginPage(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _page(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(LOGIN)))
        self.end_headers()
        self.wfile.write(LOGIN)

    do_GET = do_POST = _page  # noqa: N815 - http.server's naming


@pytest.fixture
def login_page() -> Iterator[str]:
    with http_server(LoginPage) as url:
        yield url


def test_the_probe_says_it_is_not_ollama(login_page: str) -> None:
    health = ollama_health(login_page)
    assert not health.reachable and health.models == ()
    assert health.error.startswith(f"not Ollama at {login_page}")


def test_health_stays_200_and_says_why(settings: Settings, login_page: str) -> None:
    proxied = settings.model_copy(update={"ollama_url": login_page})
    with TestClient(create_app(proxied, embedder_factory=hash_embedder), base_url="http://127.0.0.1") as client:
        r = client.get("/health")
    assert r.status_code == 200
    ollama = r.json()["ollama"]
    assert ollama["reachable"] is False and ollama["error"].startswith("not Ollama at")


def test_the_sidebar_stays_up(monkeypatch: pytest.MonkeyPatch, files: Path, login_page: str) -> None:
    use_pipeline(monkeypatch, [0.9])
    monkeypatch.setenv("CRAG_OLLAMA_URL", login_page)
    at = app()
    assert not at.exception
    assert "Something went wrong" not in texts(at.error)
    assert "Rebuild knowledge base" in [b.label for b in at.sidebar.button]
