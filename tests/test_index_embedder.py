"""The index keeps its embedder. An index built with Ollama's bge-m3 (a loopback stub speaking Ollama's API),
then Ollama stopped: questions are answered from the lexical index with a note that names the embedder and the
two ways out, an incremental build refuses to mix embedders, and the index is left as it was. Only a full rebuild,
which the user asks for, moves it to the built-in embedder.

An index built with MiniLM, the built-in embedder before USE, which is no longer installed: it is answered from its
lexical half with a note, as when Ollama is down, an incremental build refuses, and the page, the CLI and /health
offer the full rebuild that moves it to the multilingual embedder."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator
from contextlib import AbstractContextManager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import crag.models
from crag.api import create_app
from crag.cli import main
from crag.config import Settings, load_settings
from crag.ingest import sync
from crag.ingest.sync import EmbedderMismatch
from crag.mcp import ToolBackend
from crag.models import MINILM, EmbedderUnavailable, USEEmbedder, local_embedder
from crag.pipeline import Pipeline
from crag.retriever import index_embedder
from crag.store import open_store
from crag.text import lexical_tokens
from tests.apiclient import LOCAL, mcp_call, wait_for_job
from tests.apptest import app, texts
from tests.fakes import HashEmbedder
from tests.helpers import hold_closed, http_server
from tests.pdfs import manual_pdf

QUESTION = "How much memory does the widget need?"
WAYS_OUT = ("`bge-m3`", "ollama serve", "full rebuild with the built-in embedder", "lexical (BM25)")


class Ollama(AbstractContextManager):
    """Ollama's model list and embed API on loopback, with bge-m3: words hashed into 32 dimensions."""

    def __init__(self) -> None:
        self.embedded = 0

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, payload: dict) -> None:
                body = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self._send({"models": [{"model": "bge-m3:latest", "name": "bge-m3:latest"}]})

            def do_POST(self) -> None:  # noqa: N802
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                texts = [request["input"]] if isinstance(request["input"], str) else request["input"]
                outer.embedded += len(texts)
                self._send({"model": "bge-m3", "embeddings": [vector(t) for t in texts]})

        outer = self
        self._server = http_server(Handler)
        self.url = self._server.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._server.__exit__(*exc)


def vector(text: str) -> list[float]:
    v = [0.0] * 32
    for token in lexical_tokens(text):
        v[int(hashlib.md5(token.encode()).hexdigest(), 16) % 32] += 1.0
    norm = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / norm for x in v]


@pytest.fixture
def built(tmp_path: Path) -> Iterator[Settings]:
    """An index built with Ollama's bge-m3, then Ollama stopped (its port is closed from then on)."""
    (tmp_path / "Files").mkdir()
    manual_pdf(tmp_path / "Files" / "widget.pdf")
    with Ollama() as ollama:
        settings = load_settings(
            files_dir=tmp_path / "Files", chroma_dir=tmp_path / "chroma_db", ollama_url=ollama.url, web_search=False
        )
        sync(settings, index_embedder(settings))
        assert ollama.embedded > 0
    with hold_closed(settings.ollama_url):  # else another test process's server may take the port and answer
        assert open_store(settings).active().embedder == "ollama:bge-m3"
        yield settings


def test_questions_are_answered_from_the_lexical_index_with_a_note(built: Settings) -> None:
    before = open_store(built).active()
    pipeline = Pipeline.from_settings(built)
    assert pipeline.retriever.embedder.name == USEEmbedder.name, "the built-in embedder scores text meanwhile"

    assert not pipeline.retriever.moved(), "a missing embedder is no move: the lexical half answers meanwhile"
    answer = pipeline.ask(QUESTION)
    assert answer.sources and "eight hundred megabytes" in answer.text, "found by its words"
    note = next(n for n in answer.trace.notes if "bge-m3" in n)
    assert all(way in note for way in WAYS_OUT), note

    with pytest.raises(EmbedderUnavailable, match="built with Ollama's `bge-m3`.*ollama serve.*full rebuild"):
        index_embedder(built)  # what an incremental build asks for
    with pytest.raises(EmbedderMismatch, match="built with ollama:bge-m3 .*never mixes embedders.*ollama serve"):
        sync(built, local_embedder(built))  # given another embedder anyway
    after = open_store(built).active()
    assert (after.id, after.embedder) == (before.id, "ollama:bge-m3"), "the index is unchanged"

    # The full rebuild the note offers: the same pipeline then answers from both halves again, without a note.
    sync(built, index_embedder(built, rebuild=True), rebuild=True)
    assert open_store(built).active().embedder == USEEmbedder.name
    again = pipeline.ask(QUESTION)
    assert again.sources and not [n for n in again.trace.notes if "bge-m3" in n]
    assert not pipeline.retriever.moved(), "rebuilt with the embedder it scores with"


def test_the_cli_and_the_api_say_which_embedder_the_index_needs(
    built: Settings, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {"CRAG_FILES_DIR": built.files_dir, "CRAG_CHROMA_DIR": built.chroma_dir}.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.setenv("CRAG_OLLAMA_URL", built.ollama_url)
    monkeypatch.setenv("CRAG_WEB_SEARCH", "off")

    assert main(["index"]) == 2
    refused = capsys.readouterr().err
    assert all(way in refused for way in WAYS_OUT), "the incremental build refuses, saying why"
    assert "`python -m crag index --rebuild`" in refused and "POST /index" not in refused
    assert main(["ask", QUESTION]) == 0
    out = capsys.readouterr()
    assert "eight hundred megabytes" in out.out and all(way in out.err for way in WAYS_OUT)

    with TestClient(create_app(built), base_url=LOCAL) as client:
        answer = client.post("/ask", json={"question": QUESTION}).json()
        assert answer["sources"] and any(all(way in n for way in WAYS_OUT) for n in answer["notes"])
        state = wait_for_job(client, client.post("/index", json={}).json()["job"])
        assert state["state"] == "failed" and "never mixes embedders" in state["error"]
        assert 'POST /index with {"rebuild": true}' in state["error"] and "python -m crag" not in state["error"]
    assert open_store(built).active().embedder == "ollama:bge-m3"


def test_the_page_says_so_and_a_page_run_neither_reloads_nor_probes(
    built: Settings, files_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads, probes = [], []
    from_settings, health = Pipeline.from_settings.__func__, crag.models.ollama_health
    monkeypatch.setattr(Pipeline, "from_settings", classmethod(lambda cls, s: loads.append(1) or from_settings(cls, s)))
    monkeypatch.setattr(crag.models, "ollama_health", lambda url: probes.append(url) or health(url))

    at = app()
    assert not at.exception
    warning = texts(at.sidebar.warning)
    assert all(way in warning for way in WAYS_OUT), warning
    for _ in range(3):
        at.run()
    assert len(loads) == 1, "the pipeline is loaded once, not on every page run"
    assert len(probes) <= 1, "a page run asks Ollama nothing: the sidebar's answer is cached"


@pytest.fixture
def files_env(built: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The page's settings point at the built index; Streamlit's caches are empty before and after."""
    import streamlit as st

    monkeypatch.setenv("CRAG_FILES_DIR", str(built.files_dir))
    monkeypatch.setenv("CRAG_CHROMA_DIR", str(built.chroma_dir))
    monkeypatch.setenv("CRAG_OLLAMA_URL", built.ollama_url)
    st.cache_resource.clear()
    st.cache_data.clear()
    yield
    st.cache_resource.clear()
    st.cache_data.clear()


# ---------------------------------------------------------------------------------------------
# An index built with MiniLM

OFFER = ("MiniLM", "no longer installs", "lexical (BM25)", "full rebuild", USEEmbedder.name)


class FormerMiniLM(HashEmbedder):
    """What an index built with MiniLM, the built-in embedder before USE, records: its name (the model is gone)."""

    name = MINILM


@pytest.fixture
def minilm(tmp_path: Path, closed_port_url: str) -> Settings:
    """An index built with MiniLM; Ollama is not there."""
    (tmp_path / "Files").mkdir()
    manual_pdf(tmp_path / "Files" / "widget.pdf")
    settings = load_settings(
        files_dir=tmp_path / "Files", chroma_dir=tmp_path / "chroma_db", ollama_url=closed_port_url, web_search=False
    )
    sync(settings, FormerMiniLM())
    assert open_store(settings).active().embedder == MINILM
    return settings


def test_a_minilm_index_answers_from_its_lexical_half_with_the_full_rebuild_offer(minilm: Settings) -> None:
    assert index_embedder(minilm, rebuild=True).name == USEEmbedder.name, "a new index gets the multilingual one"
    pipeline = Pipeline.from_settings(minilm)
    assert pipeline.retriever.embedder.name == USEEmbedder.name, "the built-in embedder scores text meanwhile"
    answer = pipeline.ask(QUESTION)
    assert answer.sources and "eight hundred megabytes" in answer.text, "found by its words"
    note = next(n for n in answer.trace.notes if "MiniLM" in n)
    assert all(part in note for part in OFFER), note

    # An incremental build (a new file) cannot run: vectors of two embedders are never mixed.
    manual_pdf(minilm.files_dir / "gadget.pdf", topic="gadget")
    before = open_store(minilm).active()
    with pytest.raises(EmbedderUnavailable, match="MiniLM.*no longer installs.*full rebuild"):
        index_embedder(minilm)
    assert open_store(minilm).active().id == before.id

    sync(minilm, index_embedder(minilm, rebuild=True), rebuild=True)
    assert open_store(minilm).active().embedder == USEEmbedder.name
    again = pipeline.ask(QUESTION)  # the same pipeline: both halves answer again, without the note
    assert "eight hundred megabytes" in again.text and not [n for n in again.trace.notes if "MiniLM" in n]


def test_a_rebuild_made_elsewhere_with_another_embedder_is_followed_by_the_api_and_mcp(minilm: Settings) -> None:
    """`crag serve` and `crag mcp` keep their pipeline between questions. A full rebuild made elsewhere (the app,
    `crag index --rebuild`) moves the index from MiniLM to the multilingual embedder: the next question opens the
    new generation with it, instead of asking for yet another rebuild."""
    stdio = ToolBackend(minilm)  # what `crag mcp` serves, with a pipeline of its own
    assert "eight hundred megabytes" in stdio.search(QUESTION, None, None).text
    with TestClient(create_app(minilm), base_url=LOCAL) as client:
        assert client.post("/ask", json={"question": QUESTION}).status_code == 200
        # MiniLM is gone: the index answers from its words, the built-in embedder scoring text meanwhile.
        assert client.get("/health").json()["embedder"] == USEEmbedder.name and stdio.pipeline().retriever.missing
        assert not stdio.pipeline().retriever.moved()

        sync(minilm, index_embedder(minilm, rebuild=True), rebuild=True)  # neither server built it
        generation = open_store(minilm).active()
        assert generation.embedder == USEEmbedder.name

        for _ in range(2):  # followed, and kept: no reload per question
            asked = client.post("/ask", json={"question": QUESTION})
            assert asked.status_code == 200 and "eight hundred megabytes" in asked.json()["answer"], asked.text
        assert client.get("/health").json()["embedder"] == USEEmbedder.name
        searched = mcp_call(client, "search")
        assert not searched["isError"] and "eight hundred megabytes" in searched["content"][0]["text"]
    found = stdio.search(QUESTION, None, None)
    assert "eight hundred megabytes" in found.text and stdio.pipeline().retriever.embedder.name == USEEmbedder.name
    assert stdio.pipeline().retriever.current().generation.id == generation.id
    assert not stdio.pipeline().retriever.missing, "both halves answer again"


def test_the_cli_and_the_api_offer_the_full_rebuild(
    minilm: Settings, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {"CRAG_FILES_DIR": minilm.files_dir, "CRAG_CHROMA_DIR": minilm.chroma_dir}.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.setenv("CRAG_OLLAMA_URL", minilm.ollama_url)
    monkeypatch.setenv("CRAG_WEB_SEARCH", "off")

    assert main(["ask", QUESTION]) == 0
    out = capsys.readouterr()
    assert "eight hundred megabytes" in out.out
    assert all(part in out.err for part in OFFER), out.err
    assert main(["index"]) == 2
    refused = capsys.readouterr().err
    assert all(part in refused for part in OFFER), "the incremental build refuses, saying why"
    assert "`python -m crag index --rebuild`" in refused, "how, in the command line's words"
    assert open_store(minilm).active().embedder == MINILM

    with TestClient(create_app(minilm), base_url=LOCAL) as client:
        health = client.get("/health").json()
        assert health["status"] == "ok" and all(part in health["index_upgrade"] for part in OFFER)
        assert 'POST /index with {"rebuild": true}' in health["index_upgrade"], "how, in the API's words"
        state = wait_for_job(client, client.post("/index", json={"rebuild": True}).json()["job"])
        assert state["state"] == "done", state
        health = client.get("/health").json()
        assert health["index"]["embedder"] == USEEmbedder.name and health["index_upgrade"] is None
    assert main(["ask", QUESTION]) == 0
    assert "MiniLM" not in capsys.readouterr().err


def test_the_page_offers_the_full_rebuild(minilm: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    import streamlit as st

    from tests.apptest import plain, settle

    monkeypatch.setenv("CRAG_FILES_DIR", str(minilm.files_dir))
    monkeypatch.setenv("CRAG_CHROMA_DIR", str(minilm.chroma_dir))
    monkeypatch.setenv("CRAG_OLLAMA_URL", minilm.ollama_url)
    st.cache_resource.clear()
    st.cache_data.clear()
    try:
        at = app()
        assert not at.exception
        said = texts(at.sidebar.warning) + texts(at.sidebar.info)
        assert all(part in said for part in OFFER), said
        assert said.count("MiniLM") == 1, "said once"
        settle(at.button(key="rebuild_multilingual").click().run())
        assert open_store(minilm).active().embedder == USEEmbedder.name
        assert "MiniLM" not in texts(at.sidebar.info) + texts(at.sidebar.warning)
        assert USEEmbedder.name in plain(texts(at.sidebar.caption))
    finally:
        st.cache_resource.clear()
        st.cache_data.clear()
