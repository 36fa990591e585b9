"""Shared fixtures. No test reaches the internet; servers run on loopback, started here."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from pydantic_ai import models

from crag.config import Settings, load_settings
from tests.helpers import http_server, offline_kb, refused_port

# The slowest test files, slowest first (from `pytest --durations`). `make test` runs two processes, each taking
# the next whole file (with --no-loadscope-reorder: xdist would otherwise hand out the files with the most tests
# first, and these, with few tests each, would run alone at the end): started first, these run beside the many
# short files instead.
SLOW_FIRST = (
    "test_retrieval_quality.py",
    "test_ocr.py",
    "test_llama_server.py",
    "test_build_speed.py",
    "test_store.py",
    "test_server_store.py",
    "test_reliability.py",
    "test_cli.py",
    "test_api_index.py",
    "test_browser.py",
    "test_bench.py",
    "test_mineru.py",
    "test_kill.py",
    "test_app_kb.py",
    "test_watch.py",
    "test_mcp_servers.py",
    "test_build_hang.py",
    "test_patterns_linear.py",
    "test_scope.py",
    "test_server_lease.py",
    "test_scope_edges.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: n for n, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))  # stable: a file keeps its order


# Unit tests use FunctionModel/TestModel; any real model request must opt in (see `real_models`).
models.ALLOW_MODEL_REQUESTS = False

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Tests start from defaults: no CRAG_* or OLLAMA_HOST from the developer's shell or .env."""
    import os

    for name in list(os.environ):
        if name.startswith("CRAG_") or name == "OLLAMA_HOST":
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # so a developer's .env is not read
    # No watcher of the files folder unless a test asks for one (tests/test_watch.py): a test that copies a PDF and
    # then builds must find no build already running.
    monkeypatch.setenv("CRAG_WATCH", "off")
    # A safety net, inherited by subprocesses: ddgs sends every request through DDGS_PROXY, where
    # nothing listens, so a test that forgot to fake web search fails instead of reaching the internet.
    monkeypatch.setenv("DDGS_PROXY", f"socks5h://127.0.0.1:{refused_port()}")


@pytest.fixture
def real_models() -> Iterator[None]:
    with models.override_allow_model_requests(True):
        yield


@pytest.fixture
def closed_port_url() -> str:
    """A loopback URL where nothing listens, now or later in the run: connections are refused at once."""
    return f"http://127.0.0.1:{refused_port()}"


@pytest.fixture
def settings(tmp_path: Path, closed_port_url: str) -> Settings:
    return load_settings(
        files_dir=tmp_path / "Files",
        chroma_dir=tmp_path / "chroma_db",
        ollama_url=closed_port_url,
        llm_backend="embedded",
        embed_backend="local",
    )


@pytest.fixture(scope="session")
def scoped_kb(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Real PDFs in folders (tests/pdfs.py ``folders_of_pdfs``), indexed with the built-in USE embedder; then a folder
    ``pending`` added, not indexed. The embedded backend, web search off: answers are quoted evidence."""
    from crag.ingest import sync
    from crag.models import USEEmbedder
    from tests.pdfs import folders_of_pdfs, manual_pdf

    root = tmp_path_factory.mktemp("scoped")
    files = root / "Files"
    files.mkdir()
    folders_of_pdfs(files)
    settings = offline_kb(root)
    sync(settings, USEEmbedder())
    (files / "pending").mkdir()
    manual_pdf(files / "pending" / "later.pdf", topic="later")
    return settings


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, closed_port_url: str) -> Iterator[Path]:
    """The app's folders in tmp_path, Ollama on a closed port (auto falls back to the embedded backend),
    and Streamlit's caches empty before and after: for the page's tests (tests/apptest.py)."""
    import streamlit as st

    folder = tmp_path / "Files"
    folder.mkdir()
    monkeypatch.setenv("CRAG_FILES_DIR", str(folder))
    monkeypatch.setenv("CRAG_CHROMA_DIR", str(tmp_path / "chroma_db"))
    monkeypatch.setenv("CRAG_OLLAMA_URL", closed_port_url)
    st.cache_resource.clear()
    st.cache_data.clear()
    yield folder
    st.cache_resource.clear()
    st.cache_data.clear()


@pytest.fixture
def progress_spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    """Every value a Streamlit progress bar took during the run (AppTest keeps only an element's last state)."""
    from streamlit.elements.progress import ProgressMixin

    seen: list[tuple[int, str]] = []
    original = ProgressMixin.progress

    def spy(self, value, text=None, **kwargs):
        seen.append((value, text or ""))
        return original(self, value, text=text, **kwargs)

    monkeypatch.setattr(ProgressMixin, "progress", spy)
    return seen


@pytest.fixture
def client(settings: Settings) -> Iterator:
    """A TestClient of the HTTP API over a pipeline of fakes (see tests/apiclient.py)."""
    from tests.apiclient import make_client, settle

    with make_client(settings) as c:
        yield c
        settle(c.app)


@dataclass
class FakeOllama:
    """A loopback server that answers like Ollama: its native ``/api/*`` and OpenAI ``/v1`` routes."""

    url: str
    models: list[str] = field(default_factory=list)
    chat_reply: str = "{}"
    requests: list[dict] = field(default_factory=list)
    # Models that /api/pull can fetch; pulling one streams progress and adds it to ``models``.
    pullable: list[str] = field(default_factory=list)


@pytest.fixture
def fake_ollama() -> Iterator[FakeOllama]:
    state = FakeOllama(url="")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, payload: dict) -> None:
            body = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _pull(self, name: str) -> None:
            """Ollama's streamed pull: NDJSON progress lines, or an error line for an unknown model."""
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.end_headers()
            if name in state.pullable:
                lines = [{"status": "pulling manifest"}]
                lines += [
                    {"status": "pulling 1a2b3c", "digest": "sha256:1a2b3c", "total": 1000, "completed": c}
                    for c in (0, 400, 1000)
                ]
                lines += [{"status": "verifying sha256 digest"}, {"status": "writing manifest"}, {"status": "success"}]
                state.models.append(name if ":" in name else f"{name}:latest")
            else:
                lines = [{"status": "pulling manifest"}, {"error": "pull model manifest: file does not exist"}]
            for line in lines:
                self.wfile.write(json.dumps(line).encode() + b"\n")
                self.wfile.flush()

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path == "/api/tags":
                self._send({"models": [{"model": m, "name": m} for m in state.models]})
            else:
                self.send_error(404)

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length", 0))
            request = json.loads(self.rfile.read(length) or b"{}")
            state.requests.append({"path": self.path, "body": request})
            if self.path == "/v1/chat/completions":
                self._send(
                    {
                        "id": "chatcmpl-1",
                        "object": "chat.completion",
                        "created": 0,
                        "model": request.get("model"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": state.chat_reply},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                    }
                )
            elif self.path == "/api/pull":
                self._pull(request.get("model") or request.get("name") or "")
            elif self.path == "/api/embed":
                inputs = request.get("input")
                inputs = [inputs] if isinstance(inputs, str) else inputs
                self._send({"model": request.get("model"), "embeddings": [[0.6, 0.8, 0.0] for _ in inputs]})
            else:
                self.send_error(404)

    with http_server(Handler) as state.url:
        yield state
