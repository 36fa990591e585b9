"""Structured output that adapts to the model server, against loopback stubs of OpenAI-compatible servers that each
accept some of the modes (json_schema, json_object with the schema, a tool call, prompted JSON).

The real llama-cpp-python server is in tests/test_llama_server.py; these stubs cover the servers it does not stand
for, and count every request.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

import pytest
from pydantic_ai.usage import RunUsage

from crag.config import load_settings
from crag.evaluator import LLMEvaluator, SimilarityEvaluator
from crag.models import BackendInfo, build_chat_model
from crag.tuning import TUNING
from crag.types import Action, Method
from tests.fakes import HashEmbedder, chunk, pipeline
from tests.helpers import http_server

PASSAGES = ["The widget needs two processor cores.", "Bananas are yellow."]
LLAMA_CPP_PYTHON_500 = {"error": {"message": "response_format.type: Input should be 'text' or 'json_object'"}}


@dataclass
class Server:
    """An OpenAI-compatible stub that accepts only the modes in ``accepts``; ``openapi``: the response_format types
    its OpenAPI document lists (None: no document)."""

    accepts: set[str]
    openapi: list[str] | None = None
    url: str = ""
    requests: list[tuple[str, dict]] = field(default_factory=list)  # (mode, body)
    statuses: list[int] = field(default_factory=list)

    @staticmethod
    def mode(body: dict) -> str:
        kind = (body.get("response_format") or {}).get("type")
        if kind in ("json_schema", "json_object"):
            return kind
        return "tool" if body.get("tools") else "prompted"

    @staticmethod
    def output(body: dict) -> dict:
        """What a model would fill in: the grader's fields, or a standalone question."""
        text = json.dumps(body)
        if "passage_1" in text:
            return {"passage_1": "answers", "passage_2": "no", "quote": PASSAGES[0], "quoted_from": 1}
        return {"question": "How much memory does the widget need?"}

    def reply(self, body: dict) -> tuple[int, dict]:
        mode = self.mode(body)
        self.requests.append((mode, body))
        if mode not in self.accepts:
            if mode in ("json_schema", "json_object"):
                return 500, LLAMA_CPP_PYTHON_500
            if mode == "tool":
                return 400, {"error": {"message": "tools are not supported"}}
            return 200, completion(body, {"role": "assistant", "content": "Sure! Both passages look relevant."})
        if mode == "tool":
            call = {"name": body["tools"][0]["function"]["name"], "arguments": json.dumps(self.output(body))}
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "t1", "type": "function", "function": call}],
            }
            return 200, completion(body, message, "tool_calls")
        return 200, completion(body, {"role": "assistant", "content": json.dumps(self.output(body))})

    def document(self) -> dict:
        kinds = {"type": "string", "enum": self.openapi}
        return {
            "paths": {
                "/v1/chat/completions": {
                    "post": {
                        "requestBody": {
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Request"}}}
                        }
                    }
                }
            },
            "components": {
                "schemas": {
                    "Request": {
                        "properties": {
                            "messages": {"type": "array"},
                            "tools": {"type": "array"},
                            "response_format": {"anyOf": [{"$ref": "#/components/schemas/Format"}, {"type": "null"}]},
                        }
                    },
                    "Format": {"properties": {"type": kinds, "schema": {"type": "object"}}},
                }
            },
        }


def completion(body: dict, message: dict, finish: str = "stop") -> dict:
    return {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": body["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30},
    }


@pytest.fixture
def serve() -> Iterator:
    servers = []

    def start(accepts: set[str], openapi: list[str] | None = None) -> Server:
        state = Server(accepts, openapi)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, payload: dict) -> None:
                state.statuses.append(status)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path == "/openapi.json" and state.openapi is not None:
                    self._send(200, state.document())
                else:
                    self._send(404, {"detail": "Not Found"})

            def do_POST(self) -> None:  # noqa: N802
                self._send(*state.reply(json.loads(self.rfile.read(int(self.headers["Content-Length"])))))

        context = http_server(Handler)
        state.url = context.__enter__()
        servers.append(context)
        return state

    yield start
    for context in servers:
        context.__exit__(None, None, None)


def grader(server: Server) -> LLMEvaluator:
    settings = load_settings(llm_backend="openai", openai_base_url=f"{server.url}/v1", chat_model="stub")
    model = build_chat_model(settings, BackendInfo("openai", "stub", "test"))
    return LLMEvaluator(model, SimilarityEvaluator(HashEmbedder()))


def test_json_object_with_the_schema_where_json_schema_is_refused(serve, real_models) -> None:
    """llama-cpp-python's server: json_schema is a 500, json_object with the schema is grammar-constrained."""
    server = serve({"json_object"})
    evaluator = grader(server)

    first = evaluator.grade("How many cores does the widget need?", PASSAGES)
    assert [(g.score, g.method, g.detail) for g in first.grades] == [
        (TUNING.verdicts.answers, "llm", "json_object"),
        (TUNING.verdicts.no, "llm", "json_object"),
    ]
    assert [mode for mode, _ in server.requests] == ["json_schema", "json_object"]
    schema = server.requests[1][1]["response_format"]["schema"]
    assert {"passage_1", "passage_2", "quote"} <= set(schema["properties"]), "the schema rides with json_object"

    evaluator.grade("And memory?", PASSAGES)
    assert [mode for mode, _ in server.requests[2:]] == ["json_object"], "found out once, remembered"


def test_the_servers_openapi_document_spares_it_the_refused_request(serve, real_models) -> None:
    server = serve({"json_object"}, openapi=["text", "json_object"])
    grades = grader(server).grade("How many cores does the widget need?", PASSAGES).grades
    assert {(g.method, g.detail) for g in grades} == {(Method.LLM, "json_object")}
    assert [mode for mode, _ in server.requests] == ["json_object"] and server.statuses == [200, 200]


@pytest.mark.parametrize("mode", ["json_schema", "tool", "prompted"])
def test_the_first_mode_the_server_accepts_grades(serve, real_models, mode: str) -> None:
    server = serve({mode})
    grades = grader(server).grade("How many cores does the widget need?", PASSAGES).grades
    assert [(g.method, g.detail) for g in grades] == [(Method.LLM, mode)] * 2
    assert [g.score for g in grades] == [TUNING.verdicts.answers, TUNING.verdicts.no]


def test_a_server_that_accepts_none_falls_back_once(serve, real_models) -> None:
    server = serve(set())
    evaluator = grader(server)
    grades = evaluator.grade("How many cores does the widget need?", PASSAGES).grades
    assert all(
        g.method is Method.FALLBACK and g.detail.startswith("the model server accepts no structured output")
        for g in grades
    )
    assert "json_object: HTTP 500" in grades[0].detail and "prompted: no valid output" in grades[0].detail
    assert len(server.requests) == 5  # json_schema, json_object, tool, and prompted JSON with its one retry
    asked = len(server.statuses)  # with the look for an OpenAPI document

    again = evaluator.grade("And memory?", PASSAGES).grades
    assert len(server.statuses) == asked, "no request at all once the server is known to accept none"
    assert (again[0].method, again[0].detail) == (grades[0].method, grades[0].detail)


def test_a_server_that_is_down_is_not_judged(closed_port_url: str, real_models) -> None:
    """A failure that says nothing about the modes (nothing listens) is not remembered: the next question asks again."""
    settings = load_settings(llm_backend="openai", openai_base_url=f"{closed_port_url}/v1", chat_model="stub")
    model = build_chat_model(settings, BackendInfo("openai", "stub", "test"))
    evaluator = LLMEvaluator(model, SimilarityEvaluator(HashEmbedder()))
    grades = evaluator.grade("How many cores does the widget need?", PASSAGES).grades
    assert all(g.method is Method.FALLBACK and g.detail.startswith("grader failed") for g in grades)
    assert "accepts no structured output" not in grades[0].detail


def test_a_follow_up_is_condensed_in_the_mode_found(serve, tmp_path, real_models) -> None:
    server = serve({"tool"})
    p = pipeline(load_settings(chroma_dir=tmp_path / "db"), [chunk("The widget needs 800 MB.")], [0.9])
    p.model = build_chat_model(
        load_settings(llm_backend="openai", openai_base_url=f"{server.url}/v1", chat_model="stub"),
        BackendInfo("openai", "stub", "test"),
    )
    history = [("user", "How many cores does the widget need?"), ("assistant", "Two [1].")]
    condensed = p.condense("And memory?", history, RunUsage())
    assert condensed.question == "How much memory does the widget need?" and not condensed.notes
    assert [mode for mode, _ in server.requests] == ["json_schema", "json_object", "tool"]


FROBNICATOR = chunk("The Frobnicator ships with its own power supply.", file="frob.pdf", n=1)


@pytest.mark.parametrize("mode", ["json_schema", "json_object", "tool"])
def test_one_grade_is_one_action_on_ollama_and_on_an_openai_compatible_server(serve, tmp_path, real_models, mode):
    """The same LLM grade (answers, for the widget's page) is trusted whatever output mode the server needed: Correct on
    Ollama and on an OpenAI-compatible server (vLLM, LM Studio, llama.cpp) alike, though the kept page never names the
    Frobnicator (a similarity grade would be held to that term, and the action be Ambiguous)."""
    servers = {"ollama": serve({"json_schema"}), "openai": serve({mode})}  # Ollama's /v1 takes json_schema
    actions = {}
    for backend, server in servers.items():
        settings = load_settings(
            chroma_dir=tmp_path / "db",
            llm_backend=backend,
            ollama_url=server.url,
            openai_base_url=f"{server.url}/v1",
            chat_model="stub",
        )
        p = pipeline(settings, [chunk("The widget needs two processor cores."), FROBNICATOR], [], backend=backend)
        p.model = build_chat_model(settings, BackendInfo(backend, "stub", "test"))
        p.evaluators["llm"] = LLMEvaluator(p.model, p.scorer)
        answer = p.ask("How many cores does the Frobnicator need?", web=False, answer_mode="evidence")
        assert answer.trace is not None and {g.method for g in answer.trace.retrieved} == {Method.LLM}
        assert all(g.trusted for g in answer.trace.retrieved), "the model's grades, in whatever mode"
        actions[backend] = (answer.action, {g.detail for g in answer.trace.retrieved})
    # Ollama is asked in json_schema and reports no mode; the other server's mode is found out, and named.
    assert actions == {"ollama": (Action.CORRECT, {""}), "openai": (Action.CORRECT, {mode})}
