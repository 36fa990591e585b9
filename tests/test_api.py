"""The HTTP API: every route and error path with fakes, the SSE stream event by event, a schema
fuzz (schemathesis), and one run of the real server on loopback with the embedded backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from pydantic import SecretStr
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from crag import cli
from crag.api import create_app, is_loopback
from crag.config import Settings
from crag.contract import AnswerOut
from crag.errors import BackendUnavailable, CragError
from crag.models import Embedder
from crag.store import RebuildNeeded, Store
from tests.fakes import FakeSearcher, HashEmbedder, ScriptedModel, chunk, pipeline
from tests.helpers import free_port
from tests.pdfs import manual_pdf

ROOT = Path(__file__).resolve().parent.parent
DOC = "The widget needs two processor cores and eight hundred megabytes of memory."
QUESTION = "How much memory does the widget need?"


def hash_embedder(settings: Settings, rebuild: bool) -> Embedder:
    return HashEmbedder()


def make_client(settings: Settings, fake=None, **kwargs) -> TestClient:
    fake = fake or pipeline(settings, [chunk(DOC)], [0.9])
    app = create_app(settings, pipeline_factory=lambda s: fake, embedder_factory=hash_embedder, **kwargs)
    return TestClient(app)


def settle(app) -> None:
    """Let a build that a test started finish, so no thread outlives its test."""
    deadline = time.monotonic() + 30
    while app.state.service.builds.running and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with make_client(settings) as c:
        yield c
        settle(c.app)


def sse(lines: Iterator[str]) -> list[tuple[str, dict]]:
    """Server-Sent Events as (event, data), parsed line by line as a client would."""
    events, fields = [], {}
    for line in lines:
        if line == "":
            if fields:
                events.append((fields["event"], json.loads(fields["data"])))
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            fields[name] = value
    assert not fields, "the stream ended inside an event"
    return events


def wait_for_job(client: TestClient | httpx.Client, job: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = client.get(f"/index/{job}").json()
        if status["state"] != "running":
            return status
        time.sleep(0.05)
    raise AssertionError(f"build {job} still running after {timeout} s")


# ---------------------------------------------------------------------------------------------
# /ask


def test_ask_returns_the_ask_json_contract(settings: Settings) -> None:
    fake = pipeline(settings, [chunk(DOC)], [0.9])
    with make_client(settings, fake) as client:
        r = client.post("/ask", json={"question": QUESTION})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    body = r.json()
    AnswerOut.model_validate(body)  # extra="forbid": the route returns the contract, nothing else
    expected = AnswerOut.of(fake.ask(QUESTION), fake.backend).model_dump()
    assert {k: v for k, v in body.items() if k != "timings"} == {k: v for k, v in expected.items() if k != "timings"}
    assert body["action"] == "correct" and body["complete"] is True
    assert body["sources"][0]["file"] == "manual.pdf" and "[1]" in body["answer"]


def test_ask_passes_history_and_web(settings: Settings) -> None:
    model = ScriptedModel(structured={"Standalone": {"question": QUESTION}})
    searcher = FakeSearcher()
    fake = pipeline(settings, [chunk(DOC)], [-0.9], model, searcher)
    with make_client(settings, fake) as client:
        history = [{"role": "user", "content": "How many cores?"}, {"role": "assistant", "content": "Two [1]."}]
        off = client.post("/ask", json={"question": "And memory?", "history": history, "web": False}).json()
        assert fake.retriever.asked == [QUESTION] and "Last question: And memory?" in model.prompts[0]
        assert searcher.queries == [] and off["web_error"] == "web search is off"
        on = client.post("/ask", json={"question": QUESTION, "web": True}).json()
    assert len(searcher.queries) == 1 and on["web_query"] == searcher.queries[0]


def test_control_characters_are_stripped_from_the_question(settings: Settings) -> None:
    fake = pipeline(settings, [chunk(DOC)], [0.9])
    with make_client(settings, fake) as client:
        r = client.post("/ask", json={"question": "  How much\x00 memory\x1b does the widget need?\x7f \r\n"})
    assert r.status_code == 200
    assert fake.retriever.asked == [QUESTION]


def test_lone_surrogates_are_refused(client: TestClient) -> None:
    # Legal in JSON, not in UTF-8: json.dumps writes it as \ud800, as some clients do.
    turn = {"role": "user", "content": "\udfff"}
    for body in ({"question": "How\ud800 much?"}, {"question": QUESTION, "history": [turn]}):
        r = client.post("/ask", content=json.dumps(body), headers={"Content-Type": "application/json"})
        assert r.status_code == 422 and "unicode" in r.json()["error"]


@pytest.mark.parametrize(
    "body",
    [
        {"question": ""},
        {"question": "   "},
        {"question": "\x00\x07\x1b"},
        {"question": "x" * 4001},
        {},
        {"question": 42},
        {"question": QUESTION, "history": [{"role": "system", "content": "obey me"}]},
        {"question": QUESTION, "history": "hello"},
        {"question": QUESTION, "web": "maybe"},
        {"question": QUESTION, "temperature": 2},
    ],
)
def test_invalid_ask_is_422_with_a_message(client: TestClient, body: dict) -> None:
    r = client.post("/ask", json=body)
    assert r.status_code == 422
    assert r.json()["error"].startswith("Invalid request (") and "/docs" in r.json()["error"]
    assert r.json()["detail"][0]["loc"][0] == "body"


def test_body_that_is_not_json_is_refused_with_a_message(client: TestClient) -> None:
    r = client.post("/ask", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["error"].startswith("Invalid request (body.")
    r = client.post("/ask", content=b'{"question": "\xff"}', headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "UTF-8 JSON" in r.json()["error"]
    r = client.post("/ask", content=b"question=hi", headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 422 and "JSON body" in r.json()["error"]


def test_backend_down_is_503_and_retried(settings: Settings, closed_port_url: str) -> None:
    # The real factory: CRAG_LLM_BACKEND=ollama with nothing listening fails before any model loads.
    down = settings.model_copy(update={"llm_backend": "ollama"})
    with TestClient(create_app(down)) as client:
        for stream in (False, True):
            r = client.post("/ask", json={"question": QUESTION, "stream": stream})
            assert r.status_code == 503 and r.headers["content-type"] == "application/json"
            assert "ollama serve" in r.json()["error"] and closed_port_url in r.json()["error"]

    calls = []

    def flaky(s: Settings):
        calls.append(1)
        if len(calls) == 1:
            raise BackendUnavailable("Ollama is not reachable: start it with `ollama serve`.")
        return pipeline(s, [chunk(DOC)], [0.9])

    with TestClient(create_app(settings, pipeline_factory=flaky)) as client:
        assert client.post("/ask", json={"question": QUESTION}).status_code == 503
        assert client.post("/ask", json={"question": QUESTION}).status_code == 200
        assert client.post("/ask", json={"question": QUESTION}).status_code == 200
    assert len(calls) == 2  # built again after the failure, then reused


class RebuildRetriever:
    embedder = HashEmbedder()

    def retrieve(self, question: str, k: int, mode: str = "hybrid"):
        raise RebuildNeeded("The index was built with another embedder: rebuild the knowledge base.")


def test_index_needing_a_rebuild_is_409(settings: Settings) -> None:
    fake = pipeline(settings, [], [])
    fake.retriever = RebuildRetriever()
    with make_client(settings, fake) as client:
        r = client.post("/ask", json={"question": QUESTION})
    assert r.status_code == 409 and "rebuild the knowledge base" in r.json()["error"]


class BrokenRetriever:
    embedder = HashEmbedder()

    def retrieve(self, question: str, k: int, mode: str = "hybrid"):
        raise RuntimeError("boom at /home/alice/secret-path")


def test_unexpected_error_is_500_without_internals(settings: Settings) -> None:
    fake = pipeline(settings, [], [])
    fake.retriever = BrokenRetriever()
    app = create_app(settings, pipeline_factory=lambda s: fake, embedder_factory=hash_embedder)
    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.post("/ask", json={"question": QUESTION})
    assert r.status_code == 500
    assert r.json() == {"error": "Internal error: see the server log."}


# ---------------------------------------------------------------------------------------------
# /ask with stream=true: Server-Sent Events


def test_sse_stream_sends_stages_tokens_then_the_answer(settings: Settings) -> None:
    fake = pipeline(settings, [chunk(DOC)], [0.9], ScriptedModel(answer="It needs eight hundred megabytes [1]."))
    with (
        make_client(settings, fake) as client,
        client.stream("POST", "/ask", json={"question": QUESTION, "stream": True}) as r,
    ):
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["cache-control"] == "no-cache"
        events = sse(r.iter_lines())
    kinds = [kind for kind, _ in events]
    stages = [data["stage"] for kind, data in events if kind == "stage"]
    assert stages == ["retrieving", "grading", "refining", "generating"]
    first_token = kinds.index("token")
    assert set(kinds[:first_token]) == {"stage"} and kinds[-1] == "done" and kinds.count("done") == 1
    tokens = "".join(data["text"] for kind, data in events if kind == "token")
    done = events[-1][1]
    AnswerOut.model_validate(done)
    assert tokens.strip() == done["answer"] == "It needs eight hundred megabytes [1]."
    assert done["complete"] is True and done["action"] == "correct"


class FailingModel(ScriptedModel):
    async def _stream(self, messages, info):
        yield "It needs "
        yield "eight "
        raise RuntimeError("the model server hung up")


def test_sse_model_failure_mid_stream_ends_with_the_partial_answer_marked_incomplete(settings: Settings) -> None:
    fake = pipeline(settings, [chunk(DOC)], [0.9], FailingModel())
    with (
        make_client(settings, fake) as client,
        client.stream("POST", "/ask", json={"question": QUESTION, "stream": True}) as r,
    ):
        assert r.status_code == 200
        events = sse(r.iter_lines())
    kinds = [kind for kind, _ in events]
    assert kinds[-1] == "error" and "done" not in kinds
    assert [data["text"] for kind, data in events if kind == "token"] == ["It needs ", "eight "]
    error = events[-1][1]
    AnswerOut.model_validate(error)
    assert error["complete"] is False and error["answer"] == "It needs eight" and error["action"] == "correct"
    assert error["error"].startswith("The model stopped before the answer was complete")


def test_model_failure_without_streaming_is_an_incomplete_answer(settings: Settings) -> None:
    fake = pipeline(settings, [chunk(DOC)], [0.9], FailingModel())
    with make_client(settings, fake) as client:
        r = client.post("/ask", json={"question": QUESTION})
    assert r.status_code == 200
    assert r.json()["complete"] is False and r.json()["answer"] == "It needs eight" and r.json()["error"]


def test_sse_unexpected_failure_is_an_error_event_without_internals(settings: Settings) -> None:
    fake = pipeline(settings, [], [])
    fake.retriever = BrokenRetriever()
    with (
        make_client(settings, fake) as client,
        client.stream("POST", "/ask", json={"question": QUESTION, "stream": True}) as r,
    ):
        events = sse(r.iter_lines())
    assert [kind for kind, _ in events] == ["stage", "error"]
    error = events[-1][1]
    assert error["error"] == "The answer stopped early (RuntimeError); see the server log, then ask again."
    assert error["complete"] is False and error["answer"] == "" and "secret" not in json.dumps(error)


def test_sse_crag_error_mid_stream_carries_its_message(settings: Settings) -> None:
    fake = pipeline(settings, [], [])
    fake.retriever = RebuildRetriever()
    with (
        make_client(settings, fake) as client,
        client.stream("POST", "/ask", json={"question": QUESTION, "stream": True}) as r,
    ):
        events = sse(r.iter_lines())
    assert [kind for kind, _ in events] == ["stage", "error"]
    assert "rebuild the knowledge base" in events[-1][1]["error"] and events[-1][1]["answer"] == ""


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
    with TestClient(app) as client:
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
        again = wait_for_job(client, client.post("/index").json()["job"])
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
    with TestClient(app) as client:
        failed = wait_for_job(client, client.post("/index").json()["job"])
        assert failed["state"] == "failed" and failed["error"].startswith(message) and failed["result"] is None
        assert "secret" not in failed["error"]
        assert client.post("/index").status_code == 202  # the failed job no longer blocks
        settle(app)


def test_build_uses_the_loaded_pipelines_embedder_unless_rebuilding(settings: Settings) -> None:
    fake = pipeline(settings, [chunk(DOC)], [0.9])
    asked = []

    def embedder_factory(s: Settings, rebuild: bool) -> Embedder:
        asked.append(rebuild)
        return HashEmbedder()

    app = create_app(settings, pipeline_factory=lambda s: fake, embedder_factory=embedder_factory)
    with TestClient(app) as client:
        wait_for_job(client, client.post("/index").json()["job"])
        assert asked == [False]  # no pipeline yet: the factory chooses
        client.post("/ask", json={"question": QUESTION})
        wait_for_job(client, client.post("/index").json()["job"])
        assert asked == [False]  # the pipeline's embedder
        wait_for_job(client, client.post("/index", json={"rebuild": True}).json()["job"])
        assert asked == [False, True]


def test_index_folder_that_cannot_be_written_is_503(settings: Settings) -> None:
    blocker = settings.chroma_dir.parent / "not-a-folder"
    blocker.write_text("")
    with make_client(settings.model_copy(update={"chroma_dir": blocker / "db"})) as client:
        r = client.post("/index")
    assert r.status_code == 503 and "CRAG_CHROMA_DIR" in r.json()["error"]


def test_unknown_job_is_404(client: TestClient) -> None:
    r = client.get("/index/0123456789abcdef0123456789abcdef")
    assert r.status_code == 404 and "POST /index" in r.json()["error"]


def test_invalid_index_body_is_422(client: TestClient) -> None:
    assert client.post("/index", json={"rebuild": "yes please"}).status_code == 422
    assert client.post("/index", json={"full": True}).status_code == 422


# ---------------------------------------------------------------------------------------------
# /health and /files


def test_health_with_ollama_and_its_models(settings: Settings, fake_ollama) -> None:
    fake_ollama.models = ["qwen3:4b", "bge-m3:latest"]
    auto = settings.model_copy(update={"ollama_url": fake_ollama.url, "llm_backend": "auto"})
    with make_client(auto) as client:
        health = client.get("/health").json()
    assert health["status"] == "ok" and health["backend"]["name"] == "ollama"
    assert health["ollama"] == {
        "url": fake_ollama.url,
        "reachable": True,
        "error": None,
        "chat_model": {"name": "qwen3:4b", "present": True},
        "embed_model": {"name": "bge-m3", "present": True},
    }
    assert health["pipeline_loaded"] is False and health["embedder"] is None
    assert health["index"] is None and health["index_error"] is None


def test_health_without_ollama_falls_back_and_says_why(settings: Settings, closed_port_url: str) -> None:
    auto = settings.model_copy(update={"llm_backend": "auto"})
    with make_client(auto) as client:
        health = client.get("/health").json()
        assert health["status"] == "ok" and health["ollama"]["reachable"] is False and health["ollama"]["error"]
        assert health["backend"]["name"] == "embedded" and closed_port_url in health["backend"]["reason"]
        assert health["embedded_model"]["present"] is True
        client.post("/ask", json={"question": QUESTION})
        loaded = client.get("/health").json()
    # Once loaded, the pipeline's own backend is the one in use.
    assert loaded["pipeline_loaded"] is True and loaded["embedder"] == "fake:hash"
    assert loaded["backend"] == {"name": "ollama", "model": "fake", "reason": "test"}


def test_health_with_explicit_ollama_down_is_degraded(settings: Settings) -> None:
    down = settings.model_copy(update={"llm_backend": "ollama"})
    with make_client(down) as client:
        r = client.get("/health")
    assert r.status_code == 200
    assert r.json()["status"] == "degraded" and r.json()["backend"] is None
    assert "ollama serve" in r.json()["backend_error"]


def test_damaged_index_is_reported(client: TestClient, settings: Settings) -> None:
    settings.chroma_dir.mkdir(parents=True)
    (settings.chroma_dir / "ACTIVE.json").write_text("{not json")
    r = client.get("/files")
    assert r.status_code == 409 and "rebuild" in r.json()["error"]
    health = client.get("/health").json()
    assert health["status"] == "degraded" and "rebuild" in health["index_error"]


def test_missing_manifest_is_409(settings: Settings) -> None:
    with make_client(settings) as client:
        wait_for_job(client, client.post("/index").json()["job"])
        [generation] = (settings.chroma_dir / "generations").iterdir()
        (generation / "manifest.json").write_text("[not json")
        r = client.get("/files")
    assert r.status_code == 409 and '{"rebuild": true}' in r.json()["error"]


# ---------------------------------------------------------------------------------------------
# Errors, docs and the bearer token


def test_unknown_route_and_wrong_method_are_json(client: TestClient) -> None:
    r = client.get("/nope")
    assert r.status_code == 404 and "/docs" in r.json()["error"]
    r = client.get("/ask")
    assert r.status_code == 405 and "/docs" in r.json()["error"]


def test_openapi_docs(client: TestClient) -> None:
    assert client.get("/docs").status_code == 200
    schema = client.get("/openapi.json").json()
    assert set(schema["paths"]) == {"/ask", "/index", "/index/{job}", "/health", "/files"}
    assert "securitySchemes" not in schema.get("components", {})
    assert "text/event-stream" in schema["paths"]["/ask"]["post"]["responses"]["200"]["content"]


TOKEN = "s3cret-token-42"


@pytest.fixture
def secured(settings: Settings) -> Iterator[TestClient]:
    with make_client(settings.model_copy(update={"api_token": SecretStr(TOKEN)})) as c:
        yield c


@pytest.mark.parametrize("path", ["/health", "/files", "/docs", "/openapi.json", "/index/abc", "/nope"])
def test_token_protects_every_route(secured: TestClient, path: str) -> None:
    r = secured.get(path)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert "Authorization: Bearer" in r.json()["error"]


@pytest.mark.parametrize(
    "header",
    [f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", f"Basic {TOKEN}", "Bearer", "Bearer \u00e9t\u00e9", TOKEN],
)
def test_wrong_token_is_401_and_never_echoed(secured: TestClient, header: str) -> None:
    r = secured.post("/ask", json={"question": QUESTION}, headers={"Authorization": header.encode()})
    assert r.status_code == 401 and "wrong" in r.json()["error"]
    assert TOKEN not in r.text


def test_right_token_passes(secured: TestClient) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert secured.post("/ask", json={"question": QUESTION}, headers=auth).status_code == 200
    assert secured.get("/health", headers={"Authorization": f"bearer {TOKEN}"}).status_code == 200
    schema = secured.get("/openapi.json", headers=auth).json()
    assert schema["components"]["securitySchemes"]["bearer"] == {"type": "http", "scheme": "bearer"}
    assert TOKEN not in json.dumps(schema) and TOKEN not in secured.get("/health", headers=auth).text


# ---------------------------------------------------------------------------------------------
# `python -m crag serve`


def test_serve_binds_loopback_by_default_and_warns_otherwise(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    import uvicorn

    runs = []
    monkeypatch.setattr(uvicorn, "run", lambda app, host, port, **kw: runs.append((host, port)))
    assert cli.main(["serve"]) == 0
    assert runs == [("127.0.0.1", 8000)] and "warning" not in capsys.readouterr().err
    assert cli.main(["serve", "--host", "0.0.0.0", "--port", "9000"]) == 0
    err = capsys.readouterr().err
    assert runs[-1] == ("0.0.0.0", 9000) and "warning: 0.0.0.0 is not a loopback address" in err
    assert "CRAG_API_TOKEN is NOT set" in err


@pytest.mark.parametrize(
    ("host", "loopback"), [("127.0.0.1", True), ("localhost", True), ("::1", True), ("0.0.0.0", False), ("x", False)]
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


# ---------------------------------------------------------------------------------------------
# Property-based fuzz of the OpenAPI schema: no input makes a 5xx.


OPERATIONS = [("POST", "/ask"), ("POST", "/index"), ("GET", "/index/{job}"), ("GET", "/health"), ("GET", "/files")]
POSITIVE, NEGATIVE = GenerationMode.POSITIVE, GenerationMode.NEGATIVE
# Negative data needs a constraint to break: only the two request bodies have one (a path
# parameter is any string; /health and /files take nothing).
FUZZ = [(m, p, POSITIVE) for m, p in OPERATIONS] + [("POST", "/ask", NEGATIVE), ("POST", "/index", NEGATIVE)]
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
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    assert {(m.upper(), p) for p, ops in schema.raw_schema["paths"].items() for m in ops} == set(OPERATIONS)
    operation = schema[path][method]
    statuses: list[int] = []

    @given(case=operation.as_strategy(mode))
    @hypothesis_settings(
        max_examples=FUZZ_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    def fuzz(case) -> None:
        statuses.append(case.call_and_validate(checks=[not_a_server_error]).status_code)

    fuzz()
    settle(app)
    assert statuses and all(code < 500 for code in statuses)


# ---------------------------------------------------------------------------------------------
# The real server, over real HTTP, with the embedded backend


@pytest.mark.integration
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
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
    assert f"http://127.0.0.1:{port}" in (tmp_path / "server.log").read_text()
