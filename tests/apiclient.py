"""Helpers of the HTTP API tests: a client over fakes, SSE parsing, waiting for a build job."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from fastapi.testclient import TestClient

from crag.api import create_app
from crag.config import Settings
from crag.models import Embedder
from tests.fakes import HashEmbedder, chunk, pipeline

ROOT = Path(__file__).resolve().parent.parent
DOC = "The widget needs two processor cores and eight hundred megabytes of memory."
QUESTION = "How much memory does the widget need?"


def hash_embedder(settings: Settings, rebuild: bool) -> Embedder:
    return HashEmbedder()


# The API answers requests addressed to this machine only (without a token): clients in tests say so, as a browser
# or the openai SDK on this machine would, rather than TestClient's "testserver".
LOCAL = "http://127.0.0.1"


def make_client(settings: Settings, fake=None, **kwargs) -> TestClient:
    fake = fake or pipeline(settings, [chunk(DOC)], [0.9])
    app = create_app(settings, pipeline_factory=lambda s: fake, embedder_factory=hash_embedder, **kwargs)
    return TestClient(app, base_url=LOCAL)


def settle(app) -> None:
    """Let a build that a test started finish, so no thread outlives its test."""
    deadline = time.monotonic() + 30
    while app.state.service.builds.running and time.monotonic() < deadline:
        time.sleep(0.02)


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


def mcp_call(client: TestClient, tool: str) -> dict:
    """An MCP tool at /mcp, called with the question: its result."""
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": {"question": QUESTION}},
    }
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
    reply = client.post("/mcp", json=request, headers=headers)
    assert reply.status_code == 200, reply.text
    data = next(line for line in reply.text.splitlines() if line.startswith("data: "))
    return json.loads(data[len("data: ") :])["result"]
