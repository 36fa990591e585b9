"""The conversation: the open chat replayed from the store, a question, live stages, a streamed answer.

Each turn is saved as it happens: the question at once, the answer when it starts (incomplete) and
again as it streams and when it ends. A reload, a restart or a crash loses nothing that was shown.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

import crag.pipeline
from crag.config import Settings
from crag.conversations import Conversations, Message, title_of
from crag.errors import CragError
from crag.text import clean_question
from crag.types import Answer, AnswerKind
from ui import answer as answer_ui
from ui import state
from ui.text import md_escape, safe_stream, stage_label, stopped

SAVE_EVERY = 1.0  # seconds between two saves of an answer that is streaming


def render(
    settings: Settings,
    pipeline: crag.pipeline.Pipeline | None,
    options: dict[str, Any],
    store: Conversations,
    chat: str | None,
    relist: Callable[[str], None],
) -> None:
    messages = store.messages(chat) if chat else []
    question = ""
    for message in messages:
        replay(message, question, settings)
        question = message.content if message.role == "user" else question
    placeholder = (
        "Ask a question about your documents"
        if pipeline is not None
        else "The chat is off until the model works: see the message above"
    )
    # "stop": while an answer streams, the send button becomes a stop button. Not while a build runs: the
    # build's progress fragment reruns every second, and Streamlit 1.67 then keeps a "stop" input disabled
    # from the question's run until the next full run, which may be the build's end (seen in Chromium).
    mode = "submit" if state.builds(settings).running else "stop"
    if refused := st.session_state.pop("refused", None):
        text, why = refused
        st.error(why, icon=":material/error:")
        st.session_state["question"] = text  # back in the box, to shorten or fix: nothing typed is lost
    prompt = st.chat_input(placeholder, disabled=pipeline is None, key="question", submit_mode=mode)
    if prompt and pipeline is not None:
        ask(prompt, settings, pipeline, options, store, chat, messages, relist)


def replay(message: Message, question: str, settings: Settings) -> None:
    with st.chat_message(message.role):
        if message.role == "user":
            st.text(message.content)
            return
        if message.content:
            answer_ui.text(message.content, message.answer.kind if message.answer else AnswerKind.GENERATED)
        if message.answer is not None:
            answer_ui.render(message.answer, question, settings.files_dir, key=message.id)
        elif not message.complete:
            st.error(message.error or stopped(question))


def ask(
    question: str,
    settings: Settings,
    pipeline: crag.pipeline.Pipeline,
    options: dict[str, Any],
    store: Conversations,
    chat: str | None,
    previous: list[Message],
    relist: Callable[[str], None],
) -> None:
    try:
        question = clean_question(question)  # the one check the CLI and the API make too
    except CragError as exc:
        # Nothing is saved (no question without a reply); the next run says why and gives the text back.
        st.session_state["refused"] = (question, str(exc))
        st.rerun()
    if chat is None:
        chat = store.create(title_of(question)).id
        state.open_chat(chat)
        relist(chat)  # the sidebar was drawn before this chat existed
    history = [(m.role, m.content) for m in previous if m.content and m.complete]
    store.add(chat, "user", question)
    with st.chat_message("user"):
        st.text(question)

    with st.chat_message("assistant"):
        reply = store.add(chat, "assistant", "", complete=False)
        stages = Stages()
        stream = pipeline.stream(question, history=history, on_step=stages.on_step, **options)
        stored = False
        try:
            error = show(stream, pipeline, options.get("answer_mode"), store, reply)
            answer = stream.answer if not error else None
            stages.done(answer, error)
            if answer is None:
                store.update(reply, stream.text, None, complete=False, error=error)
            else:
                store.update(reply, answer.text, answer, complete=answer.complete, error=answer.error)
            stored = True
            if answer is not None:
                answer_ui.render(answer, question, settings.files_dir, key=reply)
        finally:
            # The stop button, or a click elsewhere, ends this run inside the stream (Streamlit raises a
            # BaseException): the model's stream ends now, and what was said so far is kept, marked incomplete.
            stream.close()
            if not stored:
                store.update(reply, stream.text, None, complete=False, error=stopped(question))


class Stages:
    """The answer's status box: a line per stage, which says how long the stage took when it ends
    ("Grading the passages · 0.4 s"), and the outcome on the box's label."""

    def __init__(self) -> None:
        self.status = st.status("Thinking…", expanded=False)
        self.started = time.perf_counter()
        self.lines: list[tuple[str, float, DeltaGenerator]] = []  # each stage, when it began, its line

    def end_stage(self) -> None:
        if self.lines:
            label, began, line = self.lines[-1]
            line.caption(f"{label} · {time.perf_counter() - began:.1f} s")

    def on_step(self, stage: str) -> None:
        self.end_stage()
        label = stage_label(stage)
        self.status.update(label=f"{label}…")
        self.lines.append((label, time.perf_counter(), self.status.empty()))
        self.lines[-1][2].caption(f"{label}…")

    def done(self, answer: Answer | None, error: str) -> None:
        """The last stage ends; the box says how the answer ended, and an answer that failed says why."""
        self.end_stage()
        if answer is None:
            self.status.update(label="Stopped", state="error")
            st.error(error)
        elif answer.complete:
            self.status.update(label=f"Answered in {time.perf_counter() - self.started:.1f} s", state="complete")
        else:
            self.status.update(label="Stopped before the end", state="error")


def show(
    stream: crag.pipeline.AnswerStream,
    pipeline: crag.pipeline.Pipeline,
    answer_mode: str | None,
    store: Conversations,
    reply: int,
) -> str:
    """The answer on the page as it is made, saved as it goes; what stopped it, or "" when nothing did."""
    try:
        if pipeline.answer_kind(answer_mode) is AnswerKind.EVIDENCE:
            for _ in saving(stream, store, reply):  # quotes come whole, at once: set them as quotes
                pass
            answer_ui.text(stream.text, stream.answer.kind)
        else:
            st.write_stream(safe_stream(saving(stream, store, reply)))
    except CragError as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - a failing model must not take the page or the history down
        return (
            f"The answer stopped ({type(exc).__name__}: {md_escape(str(exc))}). "
            f"Check the model server ({pipeline.backend.name} · {pipeline.backend.model}), then ask again."
        )
    return ""


def saving(stream: crag.pipeline.AnswerStream, store: Conversations, reply: int) -> Iterator[str]:
    """The stream, saved now and then as it goes: a crash keeps the partial answer."""
    last = time.perf_counter()
    for delta in stream:
        yield delta
        if time.perf_counter() - last > SAVE_EVERY:
            store.update(reply, stream.text, complete=False)
            last = time.perf_counter()
