"""The Streamlit page, driven by AppTest, with crag's pipeline swapped for a deterministic fake."""

from __future__ import annotations

from pathlib import Path

import pytest
import streamlit as st
from pydantic_ai.models.function import AgentInfo, FunctionModel
from streamlit.testing.v1 import AppTest

from crag.errors import BackendUnavailable
from crag.models import BackendInfo
from crag.pipeline import Pipeline

APP = str(Path(__file__).resolve().parent.parent / "app.py")


async def _words(messages, info: AgentInfo):
    for word in ["Four", " is", " the", " answer."]:
        yield word


def _fake_pipeline(settings) -> Pipeline:
    return Pipeline(settings, FunctionModel(stream_function=_words), BackendInfo("embedded", "fake-model", "because"))


@pytest.fixture(autouse=True)
def _fresh_cache():
    st.cache_resource.clear()
    yield
    st.cache_resource.clear()


def test_chat_streams_an_answer_and_keeps_history(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Pipeline, "from_settings", classmethod(lambda cls, s: _fake_pipeline(s)))
    at = AppTest.from_file(APP, default_timeout=30).run()
    assert not at.exception
    assert "fake-model" in at.sidebar.markdown[0].value
    at.chat_input[0].set_value("What is 2+2?").run()
    assert [m.name for m in at.chat_message] == ["user", "assistant"]
    assert at.chat_message[1].markdown[0].value == "Four is the answer."
    at.run()  # a rerun replays the history
    assert len(at.chat_message) == 2
    assert at.session_state.messages[1] == {"role": "assistant", "content": "Four is the answer."}


def test_new_chat_clears_history(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Pipeline, "from_settings", classmethod(lambda cls, s: _fake_pipeline(s)))
    at = AppTest.from_file(APP, default_timeout=30).run()
    at.chat_input[0].set_value("hi").run()
    at.sidebar.button[0].click().run()
    assert len(at.chat_message) == 0


def test_backend_down_shows_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    def down(cls, settings):
        raise BackendUnavailable("Ollama is not reachable at http://127.0.0.1:1: start it with `ollama serve`")

    monkeypatch.setattr(Pipeline, "from_settings", classmethod(down))
    at = AppTest.from_file(APP, default_timeout=30).run()
    assert not at.exception
    assert "ollama serve" in at.error[0].value
    assert at.chat_input[0].disabled


def test_a_model_failure_mid_answer_keeps_the_page(monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(messages, info):
        yield "Partial"
        raise ConnectionError("server went away")

    def pipeline(cls, settings):
        return Pipeline(settings, FunctionModel(stream_function=broken), BackendInfo("ollama", "m", "r"))

    monkeypatch.setattr(Pipeline, "from_settings", classmethod(pipeline))
    at = AppTest.from_file(APP, default_timeout=30).run()
    at.chat_input[0].set_value("question").run()
    assert not at.exception
    assert "server went away" in at.error[0].value
    assert at.session_state.messages[0] == {"role": "user", "content": "question"}
