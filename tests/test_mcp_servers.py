"""The MCP server as clients meet it, with the official ``mcp`` client: ``python -m crag mcp`` over stdio, and
``/mcp`` on a real ``python -m crag serve`` on loopback over Streamable HTTP, behind its token. Real PDFs (made by
tests/pdfs.py) in two folders, indexed by ``python -m crag index``; the embedded backend, so answers are quoted
evidence and no model writes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import openai
import pymupdf
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.helpers import free_port, refused_port
from tests.pdfs import manual_pdf

ROOT = Path(__file__).resolve().parent.parent
QUESTION = "How much memory does the widget need?"
NEAR_MISS = "How much memory does the Zorblax widget need?"
TOKEN = "mcp-test-token"

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Two folders of real PDFs, indexed: the environment of a server over them."""
    root = tmp_path_factory.mktemp("kb")
    files = root / "Files"
    (files / "projects").mkdir(parents=True)
    widget = manual_pdf(files / "widget.pdf")
    with pymupdf.open(widget) as doc:  # front matter counted apart: PDF page 2 prints "1"
        doc.set_page_labels(
            [{"startpage": 0, "prefix": "", "style": "r", "firstpagenum": 1}, {"startpage": 1, "style": "D"}]
        )
        doc.saveIncr()
    manual_pdf(files / "projects" / "gadget.pdf", topic="gadget")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_") and k != "OLLAMA_HOST"}
    env |= {
        "PYTHONPATH": str(ROOT),
        "CRAG_OLLAMA_URL": f"http://127.0.0.1:{refused_port()}",
        "CRAG_WEB_SEARCH": "off",
        "CRAG_FILES_DIR": str(files),
        "CRAG_CHROMA_DIR": str(root / "db"),
    }
    built = subprocess.run([sys.executable, "-m", "crag", "index"], env=env, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    return env


def session(transport: Any, work: Any) -> Any:
    async def main() -> Any:
        async with Client(transport, read_timeout_seconds=180) as client:
            return await work(client)

    return anyio.run(main)


async def every_tool(client: Client) -> dict[str, Any]:
    """What each acceptance point needs, in one session."""
    seen: dict[str, Any] = {"tools": {t.name: t for t in (await client.list_tools()).tools}}
    seen["search"] = await client.call_tool("search", {"question": QUESTION, "k": 3})
    seen["near_miss"] = await client.call_tool("search", {"question": NEAR_MISS})
    seen["ask"] = await client.call_tool("ask", {"question": QUESTION})
    seen["documents"] = await client.call_tool("list_documents", {})
    seen["scoped"] = await client.call_tool("search", {"question": QUESTION, "scope": ["projects"]})
    seen["scoped_documents"] = await client.call_tool("list_documents", {"scope": ["projects"]})
    seen["bad_scope"] = await client.call_tool("ask", {"question": QUESTION, "scope": ["projects/beta"]})
    cited = seen["ask"].structured_content["citations"][0]
    seen["page"] = await client.read_resource(cited["uri"])
    seen["resources"] = (await client.list_resources()).resources
    for name, uri in (("no_page", "crag://files/widget.pdf?page=9"), ("no_file", "crag://files/other.pdf")):
        try:
            await client.read_resource(uri)
        except MCPError as exc:
            seen[name] = str(exc)
    return seen


def check(seen: dict[str, Any]) -> None:
    assert set(seen["tools"]) == {"search", "ask", "list_documents"}
    assert all(
        t.input_schema["properties"]["question"]["type"] == "string"
        for n, t in seen["tools"].items()
        if n != "list_documents"
    )
    assert all(t.output_schema for t in seen["tools"].values())

    found = seen["search"].structured_content
    best = found["passages"][0]
    assert best["file"] == "widget.pdf" and best["pages"] and best["kept"] and found["action"] == "correct"
    assert "eight hundred megabytes" in best["text"]
    printed = {p["pages"][0]: p["printed_pages"] for p in found["passages"] if p["file"] == "widget.pdf"}
    assert printed and all(printed[page] == {1: "i", 2: "1"}[page] for page in printed)

    near = seen["near_miss"].structured_content
    assert near["terms"]["unknown"] == ["Zorblax"] and near["action"] == "incorrect"

    asked = seen["ask"].structured_content
    assert asked["kind"] == "evidence" and asked["complete"] and "eight hundred megabytes" in asked["answer"]
    cited = asked["citations"][0]
    # Two sentences quoted from one source come as one quote, joined by " … ".
    assert cited["file"] == "widget.pdf" and cited["pages"]
    assert all(part in asked["answer"] for part in cited["quote"].split(" … ")), (cited["quote"], asked["answer"])
    assert f"[{cited['n']}] widget.pdf, page" in seen["ask"].content[0].text

    documents = seen["documents"].structured_content
    assert [f["file"] for f in documents["files"]] == ["projects/gadget.pdf", "widget.pdf"]
    assert {f["folder"]: f["files"] for f in documents["folders"]} == {"": 1, "projects": 1}
    assert all(f["status"] == "indexed" and f["pages"] == 2 and f["chunks"] > 0 for f in documents["files"])

    scoped = seen["scoped"].structured_content
    assert scoped["scope"] == ["projects"] and scoped["passages"]
    assert {p["file"] for p in scoped["passages"]} == {"projects/gadget.pdf"}
    assert [f["file"] for f in seen["scoped_documents"].structured_content["files"]] == ["projects/gadget.pdf"]
    bad = seen["bad_scope"]
    assert bad.is_error and "No folder or file “projects/beta”" in bad.content[0].text
    assert "`projects` (1 file)" in bad.content[0].text

    [page] = seen["page"].contents
    assert page.text.startswith(f"## widget.pdf, page {cited['pages'][0]}") and "eight hundred megabytes" in page.text
    assert {r.name for r in seen["resources"]} == {"widget.pdf", "projects/gadget.pdf"}
    assert "“widget.pdf” has 2 pages: ask for a page from 1 to 2." in seen["no_page"]
    assert "“other.pdf” is not an indexed document" in seen["no_file"]


def test_stdio(kb: dict[str, str], tmp_path: Path) -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "crag", "mcp"], env=kb, cwd=str(tmp_path))
    with (tmp_path / "mcp.log").open("w") as log:
        seen = session(stdio_client(params, errlog=log), every_tool)
    check(seen)
    assert "CRAG MCP server on stdio" in (tmp_path / "mcp.log").read_text()


@pytest.fixture(scope="module")
def served(kb: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``python -m crag serve`` over the knowledge base, with a token; yields its base URL."""
    port = free_port()
    path = tmp_path_factory.mktemp("serve") / "server.log"
    log = path.open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "crag", "serve", "--port", str(port)],
        env=kb | {"CRAG_API_TOKEN": TOKEN},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, path.read_text()
            try:
                httpx.get(f"{url}/health", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def test_streamable_http_behind_the_token(served: str) -> None:
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    client = httpx2.AsyncClient(headers=bearer, timeout=180)
    check(session(streamable_http_client(f"{served}/mcp", http_client=client), every_tool))

    refused = httpx.post(f"{served}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert refused.status_code == 401 and "CRAG_API_TOKEN" in refused.json()["error"]
    with pytest.raises(ExceptionGroup) as without_token:
        session(f"{served}/mcp", lambda c: c.list_tools())
    assert without_token.group_contains(MCPError, depth=None)


def test_openai_client_reads_the_citations(served: str) -> None:
    messages = [{"role": "user", "content": QUESTION}]
    with openai.OpenAI(base_url=f"{served}/v1", api_key=TOKEN, timeout=120) as client:
        message = client.chat.completions.create(model="crag-kb", messages=messages).choices[0].message
        chunks = [
            c for c in client.chat.completions.create(model="crag-kb", messages=messages, stream=True) if c.choices
        ]
    [first, *_] = message.model_extra["citations"]
    assert first["file"] == "widget.pdf" and first["pages"]
    assert all(part in message.content for part in first["quote"].split(" … ")), (first["quote"], message.content)
    assert chunks[-1].choices[0].delta.model_extra["citations"] == message.model_extra["citations"]
