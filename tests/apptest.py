"""Helpers of the Streamlit page tests: AppTest on app.py, with crag's pieces swapped for deterministic fakes.

The page reaches crag through module attributes, so each test swaps exactly the piece it needs:
``Pipeline.from_settings`` (a pipeline of fakes: retriever, evaluator, searcher, scripted model),
``crag.ingest.sync`` (a build that reports progress and a failed file), ``crag.models.ollama_health``.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from crag.conversations import Conversations, Message
from crag.pipeline import Pipeline
from crag.types import WebResult
from tests import fakes

APP = str(Path(__file__).resolve().parent.parent / "app.py")
ANSWER = "The widget needs two processor cores [1]."
WEB = [WebResult("Widget FAQ", "https://example.com/faq", "A widget uses two cores.", "The widget uses two cores.")]
CHUNKS = [
    fakes.chunk("The widget needs two processor cores and eight hundred megabytes of memory.", n=0),
    replace(fakes.chunk("Install the dependencies before you run the widget.", page=2, n=1), section="Installation"),
]


def use_pipeline(monkeypatch: pytest.MonkeyPatch, scores: list[float], answer: str = ANSWER, chunks=CHUNKS) -> list:
    """Swap Pipeline.from_settings for a pipeline of fakes; returns the settings it was built with."""
    built = []
    scores = scores + [-1.0] * (len(chunks) - len(scores))  # one grade per retrieved chunk

    def from_settings(cls, settings):
        built.append(settings)
        model = fakes.ScriptedModel(answer=answer, structured={"WebQuery": {"query": "widget cores"}})
        return fakes.pipeline(settings, chunks, scores, model=model, searcher=fakes.FakeSearcher(list(WEB)))

    monkeypatch.setattr(Pipeline, "from_settings", classmethod(from_settings))
    return built


def app() -> AppTest:
    return AppTest.from_file(APP, default_timeout=60).run()


def ask(at: AppTest, question: str = "How many cores does the widget need?") -> AppTest:
    return at.chat_input[0].set_value(question).run()


def texts(elements) -> str:
    return "\n".join(str(e.value) for e in elements)


def plain(markdown: str) -> str:
    """Markdown with its backslash escapes removed, as the reader sees it."""
    return markdown.replace("\\", "")


def badges(at: AppTest) -> list[str]:
    return [m.value for m in at.markdown if "-badge[" in m.value]


def settle(at: AppTest, timeout: float = 60.0) -> AppTest:
    """Rerun the page until the process runs no build (builds run in a background thread), then once more:
    a build that ended during a run leaves that run's upper part (the index's status) drawn before it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        at.run()
        if not _has_button(at, "cancel_build"):
            return at.run()
        time.sleep(0.05)
    raise AssertionError(f"the build still runs after {timeout} s")


def _has_button(at: AppTest, key: str) -> bool:
    return any(b.key == key for b in at.button)


def saved(files: Path) -> list[Message]:
    """The messages of the most recently active conversation, as stored."""
    store = Conversations(files.parent / "chroma_db" / "conversations.sqlite3")
    chats = store.list()
    return store.messages(chats[0].id) if chats else []
