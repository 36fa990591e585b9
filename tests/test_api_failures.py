"""A model that fails mid-answer tells API clients what to do and nothing else: its raw error (an upstream response
body, an internal host name) goes to the server log only. A client that leaves mid-answer ends the model's stream."""

from __future__ import annotations

import asyncio
import json
import logging
import threading

import httpx
import openai
import pytest
from pydantic_ai.exceptions import ModelHTTPError

from crag.config import Settings
from tests.apiclient import DOC, QUESTION, make_client, sse
from tests.fakes import ScriptedModel, chunk, pipeline
from tests.test_api_openai import kb, serving

INTERNAL = "llm-7.corp.internal:8443"  # what an upstream server's error page may show


class LeakyModel(ScriptedModel):
    """A model server that fails mid-answer with an error page naming its internal host."""

    async def _stream(self, messages, info):
        yield "It needs "
        yield "eight "
        raise ModelHTTPError(502, "qwen3:8b", body=f"<html>Bad gateway: upstream {INTERNAL} refused</html>")


def says_what_to_do(error: str) -> None:
    assert error.startswith("The model stopped before the answer was complete: ask again.")
    assert INTERNAL not in error and "ModelHTTPError" not in error


def test_a_model_failure_reaches_clients_without_its_raw_error(settings: Settings, caplog) -> None:
    fake = pipeline(settings, [chunk(DOC)], [0.9], LeakyModel())
    with make_client(settings, fake) as client, caplog.at_level(logging.WARNING, logger="crag.api"):
        whole = client.post("/ask", json={"question": QUESTION})
        with client.stream("POST", "/ask", json={"question": QUESTION, "stream": True}) as r:
            events = sse(r.iter_lines())
    assert whole.status_code == 200 and INTERNAL not in whole.text
    assert whole.json()["complete"] is False and whole.json()["answer"] == "It needs eight"
    says_what_to_do(whole.json()["error"])
    kind, end = events[-1]
    assert kind == "error" and end["answer"] == "It needs eight" and INTERNAL not in json.dumps(events)
    says_what_to_do(end["error"])
    assert INTERNAL in caplog.text, "whoever runs the server finds the model's error in its log"


def test_a_model_failure_reaches_openai_clients_without_its_raw_error(settings: Settings) -> None:
    fake = pipeline(settings, [chunk(DOC)], [0.9], LeakyModel())
    messages = [{"role": "user", "content": QUESTION}]
    with kb(settings, fake) as client:
        with pytest.raises(openai.APIError) as streamed:
            list(client.chat.completions.create(model="crag-kb", messages=messages, stream=True))
        with pytest.raises(openai.InternalServerError) as whole:
            client.chat.completions.create(model="crag-kb", messages=messages)
    for failed in (streamed.value, whole.value):
        says_what_to_do(failed.body["message"])
        assert INTERNAL not in json.dumps(failed.body) and failed.body["crag"]["answer"] == "It needs eight"


class EndlessModel(ScriptedModel):
    """A long answer, a token every 20 ms; records how many tokens it made and when its stream ended."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = 0
        self.ended = threading.Event()

    async def _stream(self, messages, info):
        try:
            for i in range(1_000):
                await asyncio.sleep(0.02)
                self.tokens += 1
                yield f"word{i} "
        finally:
            self.ended.set()


def test_a_client_that_leaves_mid_answer_ends_the_model_stream(settings: Settings) -> None:
    model = EndlessModel()
    with serving(settings, pipeline(settings, [chunk(DOC)], [0.9], model)) as url, httpx.Client() as http:
        body = {"question": QUESTION, "stream": True}
        with http.stream("POST", url.removesuffix("/v1") + "/ask", json=body, timeout=30) as r:
            for line in r.iter_lines():
                if '"generating"' in line:  # the model writes (sentences no source backs, here: none is sent)
                    break  # the client goes away: the connection closes
        assert model.ended.wait(10), "the model still streams for a client that left"
    assert model.tokens < 500
