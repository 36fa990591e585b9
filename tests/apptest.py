"""Helpers of the Streamlit page tests: AppTest on app.py, with crag's pieces swapped for deterministic fakes.

The page reaches crag through module attributes, so each test swaps exactly the piece it needs:
``Pipeline.from_settings`` (a pipeline of fakes: retriever, evaluator, searcher, scripted model),
``crag.ingest.sync`` (a build that reports progress and a failed file), ``crag.models.ollama_health``.
"""

from __future__ import annotations

import contextlib
import re
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
# A written answer shows sentence by sentence: three, to click something after the first.
THREE_SENTENCES = (
    "The widget needs two processor cores [1]. It needs eight hundred megabytes of memory [1]. "
    "Install the dependencies before you run the widget [2]."
)
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
    """A page as a new session gets it, once the models it loads in the background are loaded."""
    return loaded(AppTest.from_file(APP, default_timeout=60).run())


LOADING = "Loading the models"  # what the sidebar says while they load


def loaded(at: AppTest, timeout: float = 60.0) -> AppTest:
    """Rerun the page until it no longer says the models are loading: they load in a thread of the process, and
    the browser's look (a fragment every half second) is a rerun here."""
    deadline = time.monotonic() + timeout
    waited = False
    while LOADING in texts(at.sidebar.markdown):
        if time.monotonic() > deadline:
            raise AssertionError(f"the models still load after {timeout} s")
        time.sleep(0.05)
        at.run()
        waited = True
    # The run in which they finished may have drawn the knowledge base before they were ready (it comes first on the
    # page): one more run draws the page as the next look at it does.
    return at.run() if waited else at


def ask(at: AppTest, question: str = "How many cores does the widget need?") -> AppTest:
    return at.chat_input[0].set_value(question).run()


def texts(elements) -> str:
    return "\n".join(str(e.value) for e in elements)


def plain(markdown: str) -> str:
    """Markdown with its backslash escapes removed, as the reader sees it."""
    return markdown.replace("\\", "")


def badges(at: AppTest) -> list[str]:
    return [m.value for m in at.markdown if "-badge[" in m.value]


def file_statuses(at: AppTest) -> dict[str, str]:
    """The sidebar's Files list: each file's status, by file name."""
    lines = (re.fullmatch(r"(.+) · \*\*(.+)\*\*", m.value) for m in at.sidebar.markdown)
    return {plain(found[2]): found[1] for found in lines if found}


def badge_line(message) -> list[str]:
    """What the line under an answer holds, in order: its badges, then its caption."""
    for node in message.children.values():
        children = list(getattr(node, "children", {}).values())
        if any("-badge[" in str(getattr(child, "value", "")) for child in children):
            return [str(child.value) for child in children]
    return []


def click_while_running(key: str | None, fragment: str | None = None) -> None:
    """A click in the browser on the button ``key`` (None: anywhere) while the page's script runs, as Streamlit takes
    it: the running script is asked to rerun with the click, and stops at its next call into Streamlit. A button drawn
    in the fragment keyed ``fragment`` (when the page has it) asks for that fragment's run, as the browser does: it
    waits for the running script to end. Call it from the script."""
    from streamlit.errors import StreamlitAPIException
    from streamlit.proto.WidgetStates_pb2 import WidgetState, WidgetStates
    from streamlit.runtime.scriptrunner import RerunData, get_script_run_ctx

    ctx = get_script_run_ctx()
    once = {"trigger_value", "json_trigger_value", "string_trigger_value", "chat_input_value"}  # sent with one run
    states = WidgetStates()
    states.widgets.extend(s for s in ctx.session_state.get_widget_states() if s.WhichOneof("value") not in once)
    if key is not None:
        button = next(w for w in ctx.shared.widget_ids_this_run.snapshot() if w.endswith(f"-{key}"))
        states.widgets.append(WidgetState(id=button, trigger_value=True))
    fragment_id = None
    if fragment is not None:
        with contextlib.suppress(StreamlitAPIException):  # no such fragment: the click reruns the whole page
            [fragment_id] = ctx.fragment_storage.resolve_target(fragment)
    ctx.script_requests.request_rerun(
        RerunData(query_string=ctx.query_string, widget_states=states, fragment_id=fragment_id)
    )


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
