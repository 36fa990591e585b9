"""The conversation: history replayed from session state, a question, live stages, a streamed answer."""

from __future__ import annotations

import time
from typing import Any

import streamlit as st

import crag.pipeline
from crag.config import Settings
from crag.errors import CragError
from crag.types import AnswerKind
from ui import answer as answer_ui
from ui import state
from ui.text import md_escape, safe_stream, stage_label


def render(settings: Settings, pipeline: crag.pipeline.Pipeline | None, options: dict[str, Any]) -> None:
    for message in st.session_state.messages:
        replay(message, settings)
    placeholder = (
        "Ask a question about your documents"
        if pipeline is not None
        else "The chat is off until the model works: see the message above"
    )
    # "stop": while an answer streams, the send button becomes a stop button.
    prompt = st.chat_input(placeholder, disabled=pipeline is None, key="question", submit_mode="stop")
    if prompt and pipeline is not None:
        ask(prompt, settings, pipeline, options)


def replay(message: dict[str, Any], settings: Settings) -> None:
    with st.chat_message(message["role"]):
        if message["role"] == "user":
            st.text(message["content"])
            return
        if message["content"]:
            kind = message["answer"].kind if message["answer"] is not None else AnswerKind.GENERATED
            answer_ui.text(message["content"], kind)
        if message["error"]:
            st.error(message["error"])
        if message["answer"] is not None:
            thresholds = message.get("thresholds", (settings.lower_threshold, settings.upper_threshold))
            answer_ui.render(message["answer"], thresholds, settings.files_dir, key=message["id"])


def ask(question: str, settings: Settings, pipeline: crag.pipeline.Pipeline, options: dict[str, Any]) -> None:
    history = [(m["role"], m["content"]) for m in st.session_state.messages if m["content"] and not m["error"]]
    state.add_message("user", question)
    with st.chat_message("user"):
        st.text(question)

    with st.chat_message("assistant"):
        key = st.session_state.next_id  # the id the answer gets in the history below
        status = st.status("Thinking…", expanded=False)
        started = time.perf_counter()

        def on_step(stage: str) -> None:
            label = stage_label(stage)
            status.update(label=f"{label}…")
            status.caption(f"{label} · {time.perf_counter() - started:.1f} s")

        stream = pipeline.stream(question, history=history, on_step=on_step, **options)
        stored = False
        try:
            error = ""
            try:
                if pipeline.answer_kind(options.get("answer_mode")) is AnswerKind.EVIDENCE:
                    for _ in stream:  # quotes come whole, at once: set them as quotes
                        pass
                    answer_ui.text(stream.text, stream.answer.kind)
                else:
                    st.write_stream(safe_stream(stream))
            except CragError as exc:
                error = str(exc)
            except Exception as exc:  # noqa: BLE001 - a failing model must not take the page or the history down
                error = (
                    f"The answer stopped ({type(exc).__name__}: {md_escape(str(exc))}). "
                    f"Check the model server ({pipeline.backend.name} · {pipeline.backend.model}), then ask again."
                )

            answer = stream.answer if not error else None
            if answer is None:
                status.update(label="Stopped", state="error")
                st.error(error)
                state.add_message("assistant", stream.text, None, error)
                stored = True
                return
            if answer.complete:
                status.update(label=f"Answered in {time.perf_counter() - started:.1f} s", state="complete")
            else:
                status.update(label="Stopped before the end", state="error")
            thresholds = (options["lower_threshold"], options["upper_threshold"])
            message = state.add_message("assistant", answer.text, answer)
            message["thresholds"] = thresholds
            stored = True
            answer_ui.render(answer, thresholds, settings.files_dir, key=key)
        finally:
            # The stop button, or a click elsewhere, ends this run inside the stream (Streamlit raises a
            # BaseException): keep what was said so far, so the history has no question without an answer.
            if not stored:
                state.add_message("assistant", stream.text, None, "Stopped before the end of the answer.")
