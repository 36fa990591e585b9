"""The MCP server's tools over fakes, driven in-process by the official ``mcp`` client.

The transports (stdio, Streamable HTTP on a real ``crag serve``) with real PDFs are in tests/test_mcp_servers.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import anyio
import pytest
from mcp import Client
from pydantic import SecretStr

from crag.config import Settings
from crag.errors import BackendUnavailable
from crag.mcp import ToolBackend, create_server
from crag.pipeline import Pipeline
from crag.types import WebResult
from tests.apiclient import DOC, QUESTION, make_client
from tests.fakes import FakeSearcher, FixedEvaluator, ScriptedModel, chunk, pipeline
from tests.test_api import TOKEN

OTHER = "The gadget weighs three kilograms and runs on batteries."


def talk(source: Callable[[], Pipeline], settings: Settings, session: Callable[[Client], Awaitable[Any]]) -> Any:
    """Run ``session`` with a client connected in-process to the MCP server over ``source``'s pipeline."""

    async def main() -> Any:
        async with Client(create_server(ToolBackend(settings, source))) as client:
            return await session(client)

    return anyio.run(main)


def call(fake: Pipeline, settings: Settings, tool: str, **arguments: Any):
    return talk(lambda: fake, settings, lambda client: client.call_tool(tool, arguments))


def test_three_tools_with_their_schemas(settings: Settings) -> None:
    fake = pipeline(settings, [chunk(DOC)], [0.9])
    tools = {t.name: t for t in talk(lambda: fake, settings, lambda client: client.list_tools()).tools}
    assert set(tools) == {"search", "ask", "list_documents"}
    search, ask, documents = tools["search"], tools["ask"], tools["list_documents"]
    assert search.input_schema["required"] == ["question"]
    assert set(search.input_schema["properties"]) == {"question", "scope", "k"}
    assert set(ask.input_schema["properties"]) == {"question", "scope", "history"}
    assert set(documents.input_schema["properties"]) == {"scope"}
    assert {"passages", "action", "terms"} <= set(search.output_schema["properties"])
    assert {"answer", "action", "citations", "warnings", "sources"} <= set(ask.output_schema["properties"])
    assert {"folders", "files"} <= set(documents.output_schema["properties"])
    assert search.annotations.read_only_hint and ask.annotations.open_world_hint  # ask may search the web


def test_search_grades_the_passages_without_a_model(settings: Settings) -> None:
    model = ScriptedModel()
    fake = pipeline(settings, [chunk(DOC, page=3, n=0), chunk(OTHER, "gadget.pdf", 7, n=1)], [-1.0, -1.0], model)
    fake.evaluators["similarity"] = fake.scorer  # as Pipeline.from_settings has it; the LLM grader says -1 to all
    result = call(fake, settings, "search", question=QUESTION, k=2)
    assert not result.is_error and model.prompts == []
    out = result.structured_content
    first, second = out["passages"]
    assert (first["file"], first["pages"], first["section"], first["text"]) == ("manual.pdf", [3], "Intro", DOC)
    assert first["kept"] is True and first["grade"] > second["grade"] and second["kept"] is False
    assert first["uri"] == "crag://files/manual.pdf?page=3" and out["action"] in ("correct", "ambiguous")
    text = result.content[0].text
    assert "[1] manual.pdf, page 3 — Intro — grade" in text and DOC in text


@pytest.mark.parametrize("backend", ["ollama", "openai"])
@pytest.mark.parametrize(("grade", "action"), [(0.9, "correct"), (0.0, "ambiguous"), (-0.95, "incorrect")])
def test_search_calls_no_model_whatever_the_action(settings: Settings, backend: str, grade: float, action: str) -> None:
    """On a model server, an Ambiguous or Incorrect answer searches again in the model's words: a search does not,
    nor does it grade, write or search the web with the model."""
    model = ScriptedModel(structured={"DocQuery": {"query": "widget memory size"}, "WebQuery": {"query": "widget"}})
    fake = pipeline(settings, [chunk(DOC)], [0.9], model, backend=backend)
    fake.evaluators["similarity"] = FixedEvaluator([grade])  # the similarity grade, whatever the text
    result = call(fake, settings, "search", question=QUESTION)
    assert not result.is_error and result.structured_content["action"] == action
    assert model.prompts == [], "no model call"
    assert fake.retriever.asked == [QUESTION], "searched once, in the question's words"


def test_search_names_the_near_miss_terms(settings: Settings) -> None:
    fake = pipeline(settings, [chunk(DOC), chunk(OTHER, n=1)], [0.9, 0.9])
    result = call(fake, settings, "search", question="How much memory does the Zorblax widget need?")
    out = result.structured_content
    assert out["terms"]["unknown"] == ["Zorblax"] and out["action"] != "correct"
    assert "Near miss: the documents never mention “Zorblax”." in result.content[0].text


def test_ask_cites_file_and_page_with_the_app_warnings(settings: Settings) -> None:
    model = ScriptedModel(answer="It needs eight hundred megabytes [1]. It needs the Quux-9 chip [1].")
    fake = pipeline(settings, [chunk(DOC, page=5)], [0.9], model)
    result = call(fake, settings, "ask", question=QUESTION)
    out = result.structured_content
    [cited] = out["citations"]
    assert (cited["file"], cited["pages"], cited["uri"]) == ("manual.pdf", [5], "crag://files/manual.pdf?page=5")
    assert out["action"] == "correct" and out["kind"] == "generated" and out["complete"] is True
    assert out["warnings"] == [
        "The model's answer named “Quux-9”, which no source given to it mentions: it may have invented it, so those "
        "sentences were cut."
    ]
    text = result.content[0].text
    assert text.startswith("It needs eight hundred megabytes [1].") and "Quux-9 chip" not in text
    assert "[1] manual.pdf, page 5: “" in text and "Warning: The model's answer named" in text


def test_ask_shows_what_a_document_says_and_its_names_as_text(settings: Settings) -> None:
    """The tool's text is Markdown: an image a passage, a heading or a file name holds shows as text, loading
    nothing, as on the page."""
    from markdown_it import MarkdownIt

    hostile = "The widget needs 800 MB ![x](https://evil.example/p.png) of memory."
    heading = "Memory ![y](https://evil.example/h.png)"
    model = ScriptedModel(answer="It needs eight hundred megabytes [1].")
    other = replace(chunk("Memory is sold in modules of 8 GB.", file="<img src=x>.pdf", page=9, n=1), section=heading)
    fake = pipeline(settings, [chunk(hostile, file="<img src=x>.pdf"), other], [0.1, -0.9], model, backend="embedded")
    result = call(fake, settings, "ask", question=QUESTION)
    out, text = result.structured_content, result.content[0].text
    assert out["suggestions"] and out["citations"], "a section offered, a passage cited"
    html = MarkdownIt("commonmark").render(text)
    assert "evil.example" in text and "<img" not in html and "evil.example/p.png" in html


def test_search_and_ask_answer_with_the_thresholds_fitted_to_their_scope(settings: Settings) -> None:
    """A fit applied on the page (or with ``crag evaluate --apply``) answers MCP's questions too."""
    from crag.calibration import Thresholds
    from crag.conversations import Conversations, chats_file

    fake = pipeline(settings, [chunk(DOC)], [0.3], backend="embedded")  # Ambiguous under the settings' 0.55
    assert call(fake, settings, "search", question=QUESTION).structured_content["action"] == "ambiguous"
    Conversations(chats_file(settings)).apply_thresholds(
        [], Thresholds(-0.5, 0.25), Thresholds(-0.8, 0.55), 20, 0.9, 0.6
    )
    for tool in ("search", "ask"):
        fake.evaluators["similarity"] = FixedEvaluator([0.3])
        assert call(fake, settings, tool, question=QUESTION).structured_content["action"] == "correct", tool


def test_ask_takes_the_conversation_for_a_follow_up(settings: Settings) -> None:
    model = ScriptedModel(answer="Eight hundred megabytes [1].", structured={"Standalone": {"question": QUESTION}})
    fake = pipeline(settings, [chunk(DOC)], [0.9], model)
    history = [
        {"role": "user", "content": "How many cores does the widget need?"},
        {"role": "assistant", "content": "Two [1]."},
    ]
    result = call(fake, settings, "ask", question="And memory?", history=history)
    assert not result.is_error and "How many cores does the widget need?" in model.prompts[0]
    assert fake.retriever.asked == [QUESTION]


def test_ask_says_when_the_web_search_failed(settings: Settings) -> None:
    fake = pipeline(settings, [chunk(OTHER)], [-0.9], searcher=FakeSearcher(error="the search engine timed out"))
    out = call(fake, settings, "ask", question=QUESTION).structured_content
    assert "Web search was not available: the search engine timed out." in out["warnings"]


def test_a_web_source_is_cited_by_its_url(settings: Settings) -> None:
    page = WebResult("Widget FAQ", "https://example.org/faq", "The widget needs 800 MB.", "The widget needs 800 MB.")
    model = ScriptedModel(answer="It needs 800 MB [1].")
    fake = pipeline(settings, [chunk(OTHER)], [-0.9], model, searcher=FakeSearcher([page]))
    out = call(fake, settings, "ask", question=QUESTION).structured_content
    [cited] = out["citations"]
    assert (cited["kind"], cited["url"], cited["uri"], cited["file"]) == ("web", "https://example.org/faq", None, None)


# ---------------------------------------------------------------------------------------------
# Errors: tool errors with the messages users see


def test_a_scoped_call_searches_and_lists_only_the_scope(settings: Settings) -> None:
    fake = pipeline(settings, [chunk(DOC, n=0), chunk(OTHER, "projects/alpha/gadget.pdf", n=1)], [0.9, 0.9])
    found = call(fake, settings, "search", question=QUESTION, scope=["projects/alpha"])
    assert not found.is_error and found.structured_content["scope"] == ["projects/alpha"]
    assert [p["file"] for p in found.structured_content["passages"]] == ["projects/alpha/gadget.pdf"]
    assert "CRAG action in `projects/alpha`:" in found.content[0].text
    asked = call(fake, settings, "ask", question=QUESTION, scope=["projects/alpha"])
    assert asked.structured_content["scope"] == ["projects/alpha"]
    assert {s["file"] for s in asked.structured_content["sources"]} == {"projects/alpha/gadget.pdf"}


def test_an_unknown_scope_is_a_tool_error_that_lists_the_folders(settings: Settings) -> None:
    fake = pipeline(settings, [chunk(DOC, n=0), chunk(OTHER, "projects/alpha/gadget.pdf", n=1)], [0.9, 0.9])
    for tool, arguments in (("search", {"question": QUESTION}), ("ask", {"question": QUESTION})):
        result = call(fake, settings, tool, scope=["projects/beta"], **arguments)
        assert result.is_error and "No folder or file “projects/beta”" in result.content[0].text
        assert "`projects/alpha` (1 file)" in result.content[0].text
    assert fake.retriever.asked == []


def test_an_empty_index_is_a_tool_error_that_says_what_to_do(settings: Settings) -> None:
    fake = pipeline(settings, [], [])
    for tool in ("search", "ask"):
        result = call(fake, settings, tool, question=QUESTION)
        assert result.is_error and result.structured_content is None
        assert "Your knowledge base has nothing indexed yet: build it" in result.content[0].text
        assert "`python -m crag index`" in result.content[0].text


def test_a_bad_question_and_a_backend_down_are_tool_errors(settings: Settings) -> None:
    fake = pipeline(settings, [chunk(DOC)], [0.9])
    result = call(fake, settings, "search", question="?!")
    assert result.is_error and "punctuation" in result.content[0].text

    def down() -> Pipeline:
        raise BackendUnavailable("Ollama is not reachable at http://127.0.0.1:1: start it with `ollama serve`.")

    result = talk(down, settings, lambda client: client.call_tool("ask", {"question": QUESTION}))
    assert result.is_error and "start it with `ollama serve`" in result.content[0].text


def test_an_unexpected_failure_is_a_tool_error_without_its_traceback(settings: Settings) -> None:
    fake = pipeline(settings, [chunk(DOC)], [0.9])
    fake.retriever.retrieve = lambda *a, **k: 1 / 0  # type: ignore[method-assign]
    result = call(fake, settings, "search", question=QUESTION)
    assert result.is_error and result.content[0].text == "Error executing tool search"


def test_list_documents_without_an_index_says_how_to_build_it(settings: Settings) -> None:
    fake = pipeline(settings, [], [])
    result = call(fake, settings, "list_documents")
    assert result.structured_content == {"generation": None, "folders": [], "files": []}
    assert "Nothing is indexed yet. Build the knowledge base" in result.content[0].text
    assert "`python -m crag index`" in result.content[0].text


# ---------------------------------------------------------------------------------------------
# /mcp on the HTTP API


LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
ACCEPT = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}


def test_without_a_token_mcp_answers_only_requests_addressed_to_this_machine(settings: Settings) -> None:
    """A web page cannot reach the tools through a name of its own that resolves to 127.0.0.1 (DNS rebinding)."""
    with make_client(settings) as client:
        rebound = client.post("/mcp", json=LIST_TOOLS, headers=ACCEPT | {"Host": "attacker.example:8000"})
        local = client.post("/mcp", json=LIST_TOOLS, headers=ACCEPT | {"Host": "127.0.0.1:8000"})
    assert rebound.status_code == 421
    assert local.status_code == 200 and "search" in local.text


def test_with_a_token_mcp_needs_it_like_every_route(settings: Settings) -> None:
    guarded = settings.model_copy(update={"api_token": SecretStr(TOKEN)})
    with make_client(guarded) as client:
        refused = client.post("/mcp", json=LIST_TOOLS, headers=ACCEPT)
        named = ACCEPT | {"Host": "kb.example.org", "Authorization": f"Bearer {TOKEN}"}
        served = client.post("/mcp", json=LIST_TOOLS, headers=named)
    assert refused.status_code == 401 and "CRAG_API_TOKEN" in refused.json()["error"]
    assert served.status_code == 200 and "search" in served.text  # behind a proxy, under the server's own name


# ---------------------------------------------------------------------------------------------
# `python -m crag mcp`


def test_the_mcp_command_reads_its_settings_before_the_protocol_starts(monkeypatch, capsys, tmp_path) -> None:
    from crag import cli, mcp

    served = []
    monkeypatch.setattr(mcp, "serve_stdio", lambda knowledge: served.append(knowledge.settings))
    assert cli.main(["mcp", "--files", str(tmp_path / "F"), "--db", str(tmp_path / "db")]) == 0
    assert served[0].files_dir == tmp_path / "F" and served[0].chroma_dir == tmp_path / "db"
    assert capsys.readouterr().out == ""  # stdout is the protocol's

    monkeypatch.setenv("CRAG_TOP_K", "0")
    assert cli.main(["mcp"]) == 2 and len(served) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "CRAG_TOP_K" in err and len(err.strip().splitlines()) == 1


def test_the_mcp_server_stands_on_the_core() -> None:
    """It imports neither the HTTP API (which mounts it) nor the CLI (which starts it); the SDK is imported in one
    module of it, the server."""
    from tests.test_architecture import MODULES, graph, imports

    own = {name: path for name, path in MODULES.items() if name == "crag.mcp" or name.startswith("crag.mcp.")}
    edges = graph()
    assert not {m for name in own for m in edges[name] if m.startswith(("crag.api", "crag.cli"))}
    sdk = {name for name, path in own.items() if any(m == "mcp" or m.startswith("mcp.") for m in imports(path))}
    assert sdk == {"crag.mcp.server"}
