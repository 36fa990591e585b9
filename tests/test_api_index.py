"""The HTTP API's builds (/index, /index/{job}), its schema fuzzed, and the real server."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import openai
import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from crag.api import create_app
from crag.config import Settings
from crag.errors import CragError
from crag.models import Embedder
from crag.store import Store
from tests.apiclient import (
    DOC,
    LOCAL,
    QUESTION,
    ROOT,
    hash_embedder,
    make_client,
    settle,
    sse,
    wait_for_job,
)
from tests.fakes import FakeSearcher, HashEmbedder, chunk, pipeline
from tests.helpers import free_port
from tests.pdfs import manual_pdf

# ---------------------------------------------------------------------------------------------
# /index and /index/{job}


class GatedEmbedder(HashEmbedder):
    """Holds the build in its embedding stage until the test lets it go."""

    def __init__(self) -> None:
        self.waiting = threading.Event()
        self.go = threading.Event()

    def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        if list(texts) != ["dimension probe"]:
            self.waiting.set()
            assert self.go.wait(30)
        return super()._embed(texts)


def test_build_reports_progress_then_per_file_results(settings: Settings) -> None:
    settings.files_dir.mkdir()
    manual_pdf(settings.files_dir / "widget.pdf")
    gated = GatedEmbedder()
    app = create_app(settings, pipeline_factory=lambda s: pipeline(s, [], []), embedder_factory=lambda s, r: gated)
    with TestClient(app, base_url=LOCAL) as client:
        assert client.get("/files").json() == {"generation": None, "files": []}
        r = client.post("/index", json={"rebuild": False})
        assert r.status_code == 202
        job = r.json()["job"]
        assert len(job) == 32 and r.headers["location"] == r.json()["status_url"] == f"/index/{job}"
        assert gated.waiting.wait(30)

        running = client.get(f"/index/{job}").json()
        assert running["state"] == "running" and running["result"] is None and running["finished_at"] is None
        p = running["progress"]
        assert (p["stage"], p["file"], p["file_index"], p["file_count"]) == ("embedding", "widget.pdf", 1, 1)
        assert p["page_count"] >= 1 and 0 <= p["fraction"] < 1

        second = client.post("/index", json={"rebuild": True})
        assert second.status_code == 409 and job in second.json()["error"]
        assert client.get("/health").json()["build_running"] == job

        gated.go.set()
        done = wait_for_job(client, job)
        assert done["state"] == "done" and done["error"] is None and done["progress"]["stage"] == "done"
        assert done["progress"]["fraction"] == 1.0
        [result] = done["result"]["files"]
        assert (result["file"], result["status"], result["pages"]) == ("widget.pdf", "indexed", 2)
        assert result["chunks"] >= 1 and done["result"]["total_chunks"] == result["chunks"]

        files = client.get("/files").json()
        assert files["generation"] and [f["file"] for f in files["files"]] == ["widget.pdf"]
        assert files["files"][0]["status"] == "indexed" and files["files"][0]["hash"]
        health = client.get("/health").json()
        assert health["index"]["chunks"] == result["chunks"] and health["index"]["embedder"] == "fake:hash"
        assert health["build_running"] is None

        # Incremental: nothing changed. A rebuild (empty body is an incremental sync) re-indexes.
        again = wait_for_job(client, client.post("/index", json={}).json()["job"])
        assert again["rebuild"] is False and again["result"]["files"][0]["status"] == "unchanged"
        rebuilt = wait_for_job(client, client.post("/index", json={"rebuild": True}).json()["job"])
        assert rebuilt["rebuild"] is True and rebuilt["result"]["files"][0]["status"] == "indexed"


def test_build_in_another_process_is_409(client: TestClient, settings: Settings) -> None:
    with Store(settings.chroma_dir).build_lock():
        r = client.post("/index", json={})
    assert r.status_code == 409 and "already running" in r.json()["error"]
    assert client.get("/health").json()["build_running"] is None


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (CragError("CRAG_PARSER=mineru needs CRAG_MINERU_URL."), "CRAG_PARSER=mineru needs CRAG_MINERU_URL."),
        (RuntimeError("bug at /secret/path"), "The build failed unexpectedly; the previous knowledge base"),
    ],
)
def test_failed_build_says_why_and_frees_the_lock(settings: Settings, error: Exception, message: str) -> None:
    def embedder_factory(s: Settings, rebuild: bool) -> Embedder:
        raise error

    app = create_app(settings, pipeline_factory=lambda s: pipeline(s, [], []), embedder_factory=embedder_factory)
    with TestClient(app, base_url=LOCAL) as client:
        failed = wait_for_job(client, client.post("/index", json={}).json()["job"])
        assert failed["state"] == "failed" and failed["error"].startswith(message) and failed["result"] is None
        assert "secret" not in failed["error"]
        assert client.post("/index", json={}).status_code == 202  # a failed job does not block the next
        settle(app)


def test_build_uses_the_loaded_pipelines_embedder_unless_rebuilding(settings: Settings) -> None:
    fake = pipeline(settings, [chunk(DOC)], [0.9])
    asked = []

    def embedder_factory(s: Settings, rebuild: bool) -> Embedder:
        asked.append(rebuild)
        return HashEmbedder()

    app = create_app(settings, pipeline_factory=lambda s: fake, embedder_factory=embedder_factory)
    with TestClient(app, base_url=LOCAL) as client:
        wait_for_job(client, client.post("/index", json={}).json()["job"])
        assert asked == [False]  # no pipeline yet: the factory chooses
        client.post("/ask", json={"question": QUESTION})
        wait_for_job(client, client.post("/index", json={}).json()["job"])
        assert asked == [False]  # the pipeline's embedder
        wait_for_job(client, client.post("/index", json={"rebuild": True}).json()["job"])
        assert asked == [False, True]


def test_index_folder_that_cannot_be_written_is_503(settings: Settings) -> None:
    blocker = settings.chroma_dir.parent / "not-a-folder"
    blocker.write_text("")
    with make_client(settings.model_copy(update={"chroma_dir": blocker / "db"})) as client:
        r = client.post("/index", json={})
    assert r.status_code == 503 and "CRAG_CHROMA_DIR" in r.json()["error"]


def test_unknown_job_is_404(client: TestClient) -> None:
    r = client.get("/index/0123456789abcdef0123456789abcdef")
    assert r.status_code == 404 and "POST /index" in r.json()["error"]


def test_invalid_index_body_is_422(client: TestClient) -> None:
    assert client.post("/index", json={"rebuild": "yes please"}).status_code == 422
    assert client.post("/index", json={"full": True}).status_code == 422


# ---------------------------------------------------------------------------------------------
# Property-based fuzz of the OpenAPI schema: no input makes a 5xx.


OPERATIONS = [
    ("POST", "/ask"),
    ("POST", "/index"),
    ("GET", "/index/{job}"),
    ("GET", "/health"),
    ("GET", "/files"),
    ("GET", "/scopes"),
    ("GET", "/v1/models"),
    ("GET", "/v1/models/{model}"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/feedback"),
]
POSITIVE, NEGATIVE = GenerationMode.POSITIVE, GenerationMode.NEGATIVE
# Negative data needs a constraint to break: only the request bodies have one (a path parameter
# is any string; /health, /files, /scopes and /v1/models take nothing).
BODIES = ["/ask", "/index", "/v1/chat/completions", "/feedback"]
FUZZ = [(m, p, POSITIVE) for m, p in OPERATIONS] + [("POST", p, NEGATIVE) for p in BODIES]
FUZZ_EXAMPLES = 25  # per operation and mode: bounded, so `make test` stays quick


# Hypothesis drives schemathesis's strategies directly: its pytest loader for fixtures
# (`schemathesis.pytest.from_fixture`) reads a node attribute that pytest 9.2 removed.
@pytest.mark.parametrize(("method", "path", "mode"), FUZZ, ids=[f"{m} {p} {g.value}" for m, p, g in FUZZ])
def test_fuzz_finds_no_server_errors(settings: Settings, method: str, path: str, mode: GenerationMode) -> None:
    settings.files_dir.mkdir()
    app = create_app(
        settings,
        pipeline_factory=lambda s: pipeline(s, [chunk(DOC)], [0.9], searcher=FakeSearcher(error="offline")),
        embedder_factory=hash_embedder,
    )
    # Addressed to this machine, as the API requires without a token (schemathesis says "testserver" otherwise).
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, headers={"Host": "127.0.0.1"})
    assert {(m.upper(), p) for p, ops in schema.raw_schema["paths"].items() for m in ops} == set(OPERATIONS)
    operation = schema[path][method]
    statuses: list[int] = []

    @given(case=operation.as_strategy(mode))
    @hypothesis_settings(
        max_examples=FUZZ_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    def fuzz(case) -> None:
        statuses.append(case.call_and_validate(base_url=LOCAL, checks=[not_a_server_error]).status_code)

    fuzz()
    settle(app)
    assert statuses and all(code < 500 for code in statuses)


# ---------------------------------------------------------------------------------------------
# The real server, over real HTTP, with the embedded backend


@pytest.mark.integration
@pytest.mark.slow
def test_real_server_on_loopback(tmp_path: Path, closed_port_url: str) -> None:
    files = tmp_path / "Files"
    files.mkdir()
    manual_pdf(files / "widget.pdf")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_") and k != "OLLAMA_HOST"}
    env |= {
        "PYTHONPATH": str(ROOT),
        "CRAG_OLLAMA_URL": closed_port_url,
        "CRAG_WEB_SEARCH": "off",
        "CRAG_FILES_DIR": str(files),
        "CRAG_CHROMA_DIR": str(tmp_path / "db"),
        "CRAG_MAX_ANSWER_TOKENS": "48",
        "CRAG_WATCH": "off",  # this test starts the build itself (POST /index); tests/test_watch.py has the watcher
    }
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "crag", "serve", "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as http:
            deadline = time.monotonic() + 60
            while True:
                assert server.poll() is None, (tmp_path / "server.log").read_text()
                try:
                    health = http.get("/health")
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "the server did not start"
                    time.sleep(0.2)
            assert health.status_code == 200
            body = health.json()
            assert body["backend"]["name"] == "embedded" and body["ollama"]["reachable"] is False
            assert body["index"] is None

            done = wait_for_job(http, http.post("/index", json={}).json()["job"], timeout=240)
            assert done["state"] == "done", done
            assert done["result"]["files"][0]["status"] == "indexed"

            r = http.post("/ask", json={"question": QUESTION})
            assert r.status_code == 200, r.text
            answer = r.json()
            assert answer["backend"] == "embedded" and answer["action"] in ("correct", "ambiguous")
            assert answer["sources"][0]["file"] == "widget.pdf" and answer["complete"] is True
            assert http.get("/health").json()["pipeline_loaded"] is True

            with http.stream("POST", "/ask", json={"question": QUESTION, "stream": True}) as streamed:
                assert streamed.headers["content-type"].startswith("text/event-stream")
                events = sse(streamed.iter_lines())
            assert events[0] == ("stage", {"stage": "retrieving"}) and events[-1][0] == "done"
            tokens = "".join(data["text"] for kind, data in events if kind == "token")
            assert tokens.strip() == events[-1][1]["answer"] and events[-1][1]["backend"] == "embedded"

        # Any OpenAI client: the official SDK, plain and streamed, over the same knowledge base.
        with openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", timeout=120) as client:
            assert [m.id for m in client.models.list()] == ["crag-kb", "crag-kb-noweb"]
            messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}]
            completion = client.chat.completions.create(model="crag-kb", messages=messages)
            content = completion.choices[0].message.content
            assert "eight hundred megabytes" in content and "- [1] widget.pdf, page" in content
            assert completion.model_extra["crag"]["backend"] == "embedded"
            assert completion.model_extra["crag"]["sources"][0]["boxes"][0]["page"] >= 1
            chunks = list(client.chat.completions.create(model="crag-kb-noweb", messages=messages, stream=True))
            streamed = "".join(c.choices[0].delta.content or "" for c in chunks)
            assert streamed.strip() == content and chunks[-1].choices[0].finish_reason == "stop"
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
    assert f"http://127.0.0.1:{port}" in (tmp_path / "server.log").read_text()
