"""Thinking models on Ollama (qwen3, the default chat model): grading, condensation and answers survive the
reasoning, whether it comes as a separate ``reasoning`` field or as ``<think>`` tags in the text, and thinking
is turned off in the request where Ollama allows it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

import pytest

from crag.config import load_settings
from crag.evaluator import LLMEvaluator
from crag.models import BackendInfo, build_chat_model
from crag.types import Action
from tests.fakes import chunk, pipeline
from tests.helpers import http_server, own_text

THOUGHT = "Okay, the user asks about the widget. Let me think step by step about the passages."
DOC = "The widget needs two processor cores. It also needs eight hundred megabytes of memory."


@dataclass
class Qwen3:
    """Answers /v1/chat/completions as Ollama does for qwen3 with thinking on: reasoning first, then the reply."""

    style: str  # "field": a separate reasoning field; "tags": <think>…</think> at the start of the content
    url: str = ""
    requests: list[dict] = field(default_factory=list)

    def reply(self, body: dict) -> str:
        schema = (body.get("response_format") or {}).get("json_schema", {}).get("schema", {})
        properties = set(schema.get("properties", {}))
        if "passage_1" in properties:
            return json.dumps(
                {"passage_1": "answers", "quote": "The widget needs two processor cores.", "quoted_from": 1}
            )
        if "question" in properties:
            return json.dumps({"question": "How much memory does the widget need?"})
        if "asks" in properties:
            ask = {
                "question": "How much memory does the widget need?",
                "answer": "It needs 800 MB.",
                "keywords": ["memory"],
            }
            return json.dumps({"asks": [ask]})
        return "The widget needs eight hundred megabytes of memory [1]."

    def parts(self, body: dict) -> tuple[str, str]:
        """(reasoning, content) as this style sends them."""
        if self.style == "field":
            return THOUGHT, self.reply(body)
        return "", f"<think>\n{THOUGHT}\n</think>\n\n{self.reply(body)}"


@pytest.fixture(params=["field", "tags"])
def qwen3(request) -> Iterator[Qwen3]:
    state = Qwen3(request.param)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            state.requests.append(body)
            reasoning, content = state.parts(body)
            if not body.get("stream"):
                message = {"role": "assistant", "content": content} | ({"reasoning": reasoning} if reasoning else {})
                self._json(
                    {
                        "id": "c1",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30},
                    }
                )
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            # Token by token, as a server streams: a tag is one token.
            deltas = [{"reasoning": w + " "} for w in reasoning.split()] + [
                {"content": token} for token in re.findall(r"</?think>|\s*[^\s<]+|\s+", content)
            ]
            for delta in deltas:
                chunk_ = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": body["model"]}
                chunk_["choices"] = [{"index": 0, "delta": delta, "finish_reason": None}]
                self.wfile.write(f"data: {json.dumps(chunk_)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")

        def _json(self, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    with http_server(Handler) as state.url:
        yield state


def test_grading_condensing_and_answering_survive_a_thinking_model(qwen3: Qwen3, tmp_path, real_models) -> None:
    settings = load_settings(chroma_dir=tmp_path / "db", ollama_url=qwen3.url, upper_threshold=0.5)
    model = build_chat_model(settings, BackendInfo("ollama", "qwen3:4b", "test"))
    p = pipeline(settings, [chunk(DOC)], [])
    p.model = model
    p.evaluators["llm"] = LLMEvaluator(model, p.scorer)
    history = [("user", "How many cores does the widget need?"), ("assistant", "Two [1].")]

    answer = p.ask("And memory?", history=history)
    assert answer.complete, answer.error

    assert answer.action is Action.CORRECT and answer.trace.retrieved[0].method == "llm", "the grade parsed"
    assert answer.trace.standalone_question == "How much memory does the widget need?", "the rewrite parsed"
    assert own_text(answer) == "The widget needs eight hundred megabytes of memory [1]."
    assert "think" not in answer.text and "step by step" not in answer.text
    assert answer.trace.expansions[0].keywords == ("memory",), "the model's search words parsed"
    assert len(qwen3.requests) == 4  # condense, read, grade, answer
    assert all(r.get("reasoning_effort") == "none" for r in qwen3.requests), "thinking is turned off where it can be"


def test_thinking_can_be_left_on(qwen3: Qwen3, tmp_path, real_models) -> None:
    settings = load_settings(chroma_dir=tmp_path / "db", ollama_url=qwen3.url, thinking="on")
    model = build_chat_model(settings, BackendInfo("ollama", "qwen3:4b", "test"))
    p = pipeline(settings, [chunk(DOC)], [0.9])
    p.model = model
    answer = p.ask("How much memory does the widget need?")
    assert own_text(answer) == "The widget needs eight hundred megabytes of memory [1]."
    assert "reasoning_effort" not in qwen3.requests[-1], "the server's default: qwen3 thinks"
