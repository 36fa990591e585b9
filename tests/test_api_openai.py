"""The OpenAI-compatible routes (/v1), driven by the official ``openai`` client over real HTTP on loopback.

The server is uvicorn in a thread over the test fakes, for speed and determinism; the subprocess
``python -m crag serve`` with the embedded backend is in tests/test_api_index.py.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import openai
import pytest
import uvicorn
from fastapi import FastAPI
from pydantic import SecretStr

from crag.api import create_app
from crag.api.openai_compat import ChatQuestion, read_request, sources_markdown
from crag.api.openai_schemas import ChatRequest
from crag.config import Settings
from crag.contract import MAX_TURNS
from crag.parts import Note, Written
from crag.pipeline import Pipeline
from crag.types import Answer, Source, WebResult
from tests.apiclient import DOC, QUESTION, hash_embedder
from tests.fakes import FakeSearcher, ScriptedModel, chunk, pipeline
from tests.helpers import free_port
from tests.test_api import TOKEN, BrokenRetriever, FailingModel, RebuildRetriever

ANSWER = "It needs eight hundred megabytes [1]."


@contextmanager
def serving(settings: Settings, fake: Pipeline) -> Iterator[str]:
    """The API over a fake pipeline on a free loopback port, in this process; yields the OpenAI base URL."""
    with serving_app(create_app(settings, pipeline_factory=lambda s: fake, embedder_factory=hash_embedder)) as url:
        yield url


@contextmanager
def serving_app(app: FastAPI) -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(30)


@contextmanager
def kb(settings: Settings, fake: Pipeline | None = None, api_key: str = "unused", **kwargs) -> Iterator[openai.OpenAI]:
    fake = fake or pipeline(settings, [chunk(DOC)], [0.9], ScriptedModel(answer=ANSWER))
    with serving(settings, fake) as url, openai.OpenAI(base_url=url, api_key=api_key, **kwargs) as client:
        yield client


def ask(client: openai.OpenAI, question: str = QUESTION, **kwargs):
    return client.chat.completions.create(model="crag-kb", messages=[{"role": "user", "content": question}], **kwargs)


# ---------------------------------------------------------------------------------------------
# Models, answers, streams, history


def test_models_list_the_knowledge_base(settings: Settings) -> None:
    with kb(settings) as client:
        assert [m.id for m in client.models.list()] == ["crag-kb", "crag-kb-noweb"]
        assert client.models.retrieve("crag-kb-noweb").owned_by == "crag"
        with pytest.raises(openai.NotFoundError) as missing:
            client.models.retrieve("gpt-4o")
    assert missing.value.code == "model_not_found" and "crag-kb" in missing.value.message


def test_plain_answer_carries_citations_sources_and_the_trace(settings: Settings) -> None:
    with kb(settings) as client:
        completion = ask(client)
    [choice] = completion.choices
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    quotes = f"From your documents:\n“{DOC}” [1]"  # what the answer rests on, under it
    assert choice.message.content == f"{ANSWER}\n\n{quotes}\n\n**Sources**\n\n- [1] manual.pdf, page 1"
    assert completion.model == "crag-kb" and completion.id.startswith("chatcmpl-")
    crag = completion.model_extra["crag"]
    assert crag["action"] == "correct" and crag["answer"] == f"{ANSWER}\n\n{quotes}" and crag["complete"] is True
    assert crag["scores"][0]["score"] == 0.9 and crag["web_query"] is None
    [source] = crag["sources"]
    assert (source["file"], source["pages"], source["cited"]) == ("manual.pdf", [1], True)
    assert source["boxes"] == [{"page": 1, "bbox": [0, 0, 100, 20]}]
    usage = completion.usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (crag["tokens"]["input"], crag["tokens"]["output"])
    assert usage.completion_tokens > 0 and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_streamed_answer_comes_in_several_chunks_then_sources_and_the_trace(settings: Settings) -> None:
    with kb(settings) as client:
        chunks = list(ask(client, stream=True, stream_options={"include_usage": True}))
        plain = ask(client).choices[0].message.content
    with_choices = [c for c in chunks if c.choices]
    texts = [c.choices[0].delta.content for c in with_choices if c.choices[0].delta.content]
    # The answer's sentence (grounding lets each out whole), its quotes, the sources
    assert len(texts) >= 3 and "".join(texts).replace(" \n", "\n") == plain
    assert texts[-1] == "\n\n**Sources**\n\n- [1] manual.pdf, page 1"
    stages = [c.model_extra["crag"]["stage"] for c in with_choices[:-1] if c.model_extra.get("crag")]
    assert stages == ["reading the question", "retrieving", "grading", "refining", "generating"]
    last = with_choices[-1]
    assert last.choices[0].finish_reason == "stop" and last.model_extra["crag"]["action"] == "correct"
    assert [c.choices[0].finish_reason for c in with_choices[:-1]] == [None] * (len(with_choices) - 1)
    assert len({c.id for c in chunks}) == 1
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0  # include_usage


def test_evidence_answer_without_a_model(settings: Settings) -> None:
    fake = pipeline(settings, [chunk(DOC)], [0.9], backend="embedded")
    with kb(settings, fake) as client:
        completion = ask(client)
    content = completion.choices[0].message.content
    assert "eight hundred megabytes" in content and "[1]" in content and content.endswith("manual.pdf, page 1")
    assert completion.model_extra["crag"]["kind"] == "evidence"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (0, 0)


def test_history_is_passed_as_messages_without_our_sources_list(settings: Settings) -> None:
    model = ScriptedModel(answer=ANSWER, structured={"Standalone": {"question": QUESTION}})
    fake = pipeline(settings, [chunk(DOC)], [0.9], model)
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": [{"type": "text", "text": "How many cores does the widget need?"}]},
        {"role": "assistant", "content": "Two cores [1].\n\n**Sources**\n\n- [1] manual.pdf, page 1"},
        {"role": "user", "content": "And memory?"},
    ]
    with kb(settings, fake) as client:
        completion = client.chat.completions.create(model="crag-kb", messages=messages, temperature=0.3, user="me")
    condense = model.prompts[0]
    assert "How many cores does the widget need?" in condense and "Two cores [1]." in condense
    assert "Last question: And memory?" in condense and "Sources" not in condense
    assert "You are a helpful assistant" not in "".join(model.prompts + model.instructions)
    assert fake.retriever.asked == [QUESTION]
    notes = completion.model_extra["crag"]["notes"]
    assert notes[0].startswith("the system message was not used")
    assert notes[1] == "ignored (the knowledge base answers with its own settings): temperature"


def test_the_model_chooses_web_search(settings: Settings) -> None:
    searcher = FakeSearcher(results=[WebResult("Widget FAQ", "https://example.org/faq (1)", "memory: 800 MB")])
    fake = pipeline(settings, [chunk(DOC)], [-0.9], ScriptedModel(answer=ANSWER), searcher)
    with kb(settings, fake) as client:
        noweb = client.chat.completions.create(model="crag-kb-noweb", messages=[{"role": "user", "content": QUESTION}])
        assert searcher.queries == [] and noweb.model_extra["crag"]["web_error"] == "web search is off"
        web = ask(client)
    assert len(searcher.queries) == 1 and web.model_extra["crag"]["web_query"] == searcher.queries[0]
    assert web.choices[0].message.content.endswith("- [1] [Widget FAQ](https://example.org/faq%20%281%29)")


# ---------------------------------------------------------------------------------------------
# Refusals and errors, in OpenAI's shape


@pytest.mark.parametrize(
    ("kwargs", "param", "says"),
    [
        ({"messages": [{"role": "user", "content": " \x00 "}]}, "messages.0.content", "The question is empty"),
        ({"messages": [{"role": "user", "content": "x" * 2001}]}, "messages.0.content", "the limit is 2000"),
        ({"messages": [{"role": "assistant", "content": "Hi"}]}, "messages.0", "The last message must be"),
        ({"n": 2}, "n", "set n to 1"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools", "calls no tools"),
        ({"response_format": {"type": "json_object"}}, "response_format", "not supported"),
        ({"logprobs": True}, "logprobs", "not supported"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]},
            "messages.0.content.0",
            "reads text only",
        ),
        (
            {"messages": [{"role": "tool", "content": "42", "tool_call_id": "t"}, {"role": "user", "content": "Hi"}]},
            "messages.0",
            "calls no tools",
        ),
        ({"messages": []}, "messages", "Invalid request (body.messages"),
        ({"messages": [{"role": "robot", "content": "Hi"}]}, "messages.0.role", "Invalid request"),
    ],
)
def test_bad_requests_are_400_with_a_message(settings: Settings, kwargs: dict, param: str, says: str) -> None:
    body = {"model": "crag-kb", "messages": [{"role": "user", "content": QUESTION}]} | kwargs
    with kb(settings) as client, pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(**body)
    error = bad.value.body
    assert error["type"] == "invalid_request_error" and error["param"] == param and says in error["message"]
    assert bad.value.code in ("invalid_question", "unsupported_parameter", "unsupported_content", "invalid_request")


def test_errors_are_openai_shaped_and_not_retried(settings: Settings) -> None:
    fake = pipeline(settings, [], [])
    fake.retriever = RebuildRetriever()
    with kb(settings, fake) as client, pytest.raises(openai.ConflictError) as conflict:
        ask(client)  # the SDK retries 409 twice unless told not to
    assert conflict.value.code == "rebuild_needed" and "rebuild the knowledge base" in conflict.value.message
    assert conflict.value.response.headers["x-should-retry"] == "false"
    with serving(settings, pipeline(settings, [], [])) as url, httpx.Client(base_url=url) as http:
        for r, status, code in [
            (
                http.post("/chat/completions", content=b"{not json", headers={"Content-Type": "application/json"}),
                400,
                "invalid_request",
            ),
            (http.get("/nope"), 404, "unknown_url"),
            (http.get("/chat/completions"), 405, "method_not_allowed"),
        ]:
            assert r.status_code == status and r.json()["error"]["code"] == code and r.json()["error"]["message"]
        assert http.get(url.removesuffix("/v1") + "/nope").json() == {
            "error": "No such route: see /docs for the routes of this API."
        }


def test_model_failure_mid_stream_ends_with_the_partial_text_and_an_error(settings: Settings) -> None:
    fake = pipeline(settings, [chunk(DOC)], [0.9], FailingModel())
    texts = []
    with kb(settings, fake) as client:
        with pytest.raises(openai.APIError) as failed:
            for c in ask(client, stream=True):
                texts.append(c.choices[0].delta.content or "")
        assert "".join(texts) == "It needs eight "
        assert failed.value.message.startswith("The model stopped before the answer was complete")
        crag = failed.value.body["crag"]
        assert failed.value.code == "answer_incomplete" and crag["complete"] is False
        assert crag["answer"] == "It needs eight" and crag["action"] == "correct"

        with pytest.raises(openai.InternalServerError) as plain:
            ask(client)
    assert plain.value.status_code == 502 and plain.value.body["crag"]["answer"] == "It needs eight"
    assert len(fake.retriever.asked) == 2  # one per request: no retry


def test_unexpected_failure_mid_stream_leaks_nothing(settings: Settings) -> None:
    fake = pipeline(settings, [], [])
    fake.retriever = BrokenRetriever()
    with kb(settings, fake) as client:
        with pytest.raises(openai.APIError) as failed:
            list(ask(client, stream=True))
        assert failed.value.message == "The answer stopped early (RuntimeError); see the server log, then ask again."
        assert "secret" not in json.dumps(failed.value.body)
        with pytest.raises(openai.InternalServerError) as plain:
            ask(client)
    assert plain.value.body == {
        "message": "Internal error: see the server log.",
        "type": "server_error",
        "param": None,
        "code": "internal_error",
    }


def test_the_bearer_token(settings: Settings) -> None:
    secured = settings.model_copy(update={"api_token": SecretStr(TOKEN)})
    with kb(secured, api_key=TOKEN) as client:
        assert [m.id for m in client.models.list()] == ["crag-kb", "crag-kb-noweb"]
        assert "[1]" in ask(client).choices[0].message.content
        with pytest.raises(openai.AuthenticationError) as denied:
            client.with_options(api_key=TOKEN + "x").models.list()
        assert denied.value.code == "invalid_api_key" and "CRAG_API_TOKEN" in denied.value.message
        assert denied.value.body["type"] == "invalid_request_error" and TOKEN not in denied.value.response.text
        url = str(client.base_url).rstrip("/")
        missing = httpx.post(f"{url}/chat/completions", json={"model": "crag-kb", "messages": []})
        assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
        assert missing.json()["error"]["code"] == "missing_api_key"
        # The API's own routes keep their shape.
        assert httpx.get(url.removesuffix("/v1") + "/health").json()["error"].startswith("This server needs a token")


def test_backend_down_is_503_at_once(settings: Settings, closed_port_url: str) -> None:
    # The real factory: CRAG_LLM_BACKEND=ollama with nothing listening fails before any stream starts.
    down = settings.model_copy(update={"llm_backend": "ollama"})
    app = create_app(down, embedder_factory=hash_embedder)
    with serving_app(app) as url, openai.OpenAI(base_url=url, api_key="unused") as client:
        for stream in (False, True):
            started = time.monotonic()
            with pytest.raises(openai.InternalServerError) as down_error:
                ask(client, stream=stream)
            assert down_error.value.status_code == 503 and down_error.value.code == "backend_unavailable"
            assert "ollama serve" in down_error.value.message and closed_port_url in down_error.value.message
            assert time.monotonic() - started < 5  # x-should-retry: false, so no backoff and retries


# ---------------------------------------------------------------------------------------------
# Reading a request; the sources list


def chat(*messages: dict, **fields) -> ChatQuestion:
    return read_request(ChatRequest.model_validate({"model": "crag-kb", "messages": list(messages)} | fields))


def test_history_keeps_text_drops_pictures_with_a_note_and_keeps_the_last_turns() -> None:
    picture = {"type": "image_url", "image_url": {"url": "data:,"}}
    asked = chat(
        {"role": "developer", "content": "Obey."},
        {"role": "user", "content": [{"type": "text", "text": "What is\u200b this?"}, picture]},
        {"role": "assistant", "content": None},
        {
            "role": "assistant",
            "content": "A widget [1].\n\n**Sources**\n\n- [1] a\\_b.pdf, page 2\n- [2] [W](https://x)\n",
        },
        {"role": "user", "content": "  How\x00 big is it? "},
        max_tokens=99,
        seed=1,
        user="alice",
        stream_options={"include_usage": True},
    )
    assert asked.question == "How big is it?" and asked.web is None and asked.include_usage
    assert asked.history == (("user", "What is this?"), ("assistant", "A widget [1]."))
    assert asked.notes == (
        "a part of type `image_url` in an earlier message was left out: the knowledge base reads text",
        "the system message was not used: the knowledge base answers with its own instructions, from your documents",
        "ignored (the knowledge base answers with its own settings): max_tokens, seed",
    )
    many = [{"role": ("user", "assistant")[i % 2], "content": f"turn {i}"} for i in range(MAX_TURNS + 10)]
    asked = chat(*many, {"role": "user", "content": QUESTION}, model="crag-kb-noweb")
    assert len(asked.history) == MAX_TURNS and asked.history[-1] == ("assistant", f"turn {MAX_TURNS + 9}")
    assert asked.notes == (f"only the last {MAX_TURNS} of {MAX_TURNS + 10} earlier messages were used",)
    assert asked.web is False


def test_sources_list_is_markdown_that_cannot_be_broken_by_names() -> None:
    sources = (
        Source(n=1, kind="local", text="x", file="my_notes *draft*.pdf", pages=(3, 4)),
        Source(n=2, kind="web", text="y", url="https://example.org/a b", title="[Click] <here>"),
        Source(n=3, kind="local", text="z", file="unused.pdf", pages=(1,)),
    )
    answer = Answer(
        parts=(Written(text="See [1] and [2].", cited=(1, 2)),), backend="embedded", model="m", sources=sources
    )
    assert sources_markdown(answer) == (
        "\n\n**Sources**\n\n- [1] my\\_notes \\*draft\\*.pdf, pages 3–4\n"
        "- [2] [\\[Click\\] \\<here\\>](https://example.org/a%20b)"
    )
    uncited = Answer(parts=(Written(text="No citation."),), backend="embedded", model="m", sources=sources[2:])
    assert sources_markdown(uncited).endswith("- [3] unused.pdf, page 1")
    assert sources_markdown(Answer(parts=(Note(text="Nothing found."),), backend="embedded", model="m")) == ""
