"""The conversation: the open chat replayed from the store, a question, live stages, a streamed answer.

Each turn is saved as it happens: the question at once, the answer when it starts (incomplete) and
again as it streams and when it ends. A reload, a restart or a crash loses nothing that was shown.

The chat box is drawn before the conversation, and takes a question while the models load: the question waits
for them, its answer's status says so. While an answer is made, its Stop button ends it: a click reruns the page,
which ends this run inside the stream, and the answer is kept as far as it went, marked as stopped by the user.

A chat reopens with its latest answer whole and the earlier ones folded to their first line: each is drawn whole
(its sources, how it was made) only once opened, so a long chat reopens in about the time of one answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from crag.config import Settings
from crag.conversations import Conversations, Message, Stop, title_of
from crag.errors import CragError
from crag.feedback import THUMBS, generation_of
from crag.models.loops import own_event_loop
from crag.parts import Part
from crag.scope import UnknownScope
from crag.text import MAX_QUESTION_CHARS, clean_question
from crag.types import Answer, AnswerKind
from ui import state
from ui.scope import ALL, choose
from ui.settings import WEB_LABEL
from ui.text import ACTIONS, error_text, gist, md_escape, page_markdown, stage_label, stop_of, stopped, user_stopped

if TYPE_CHECKING:
    import crag.pipeline
    import crag.stream

SAVE_EVERY = 1.0  # seconds between two saves of an answer that is streaming
WAIT_LOOK = 0.5  # seconds between two looks at the models' loading, while a question waits for it


def render(
    settings: Settings,
    loading: state.Loading,
    options: dict[str, Any],
    store: Conversations,
    chat: str | None,
    relist: Callable[[str], None],
) -> None:
    placeholder = (
        "The chat is off until the model works: see the message above"
        if loading.error
        # The limit, said before it is reached: the chat box cannot count as one types (it reruns only on Enter), and
        # its max_chars would cut a pasted question silently where clean_question says why and gives it back.
        else f"Ask a question about your documents (up to {MAX_QUESTION_CHARS:,} characters)"
    )
    refused = st.session_state.pop("refused", None)
    if refused:
        st.session_state["question"] = refused[0]  # back in the box, to shorten or fix: nothing typed is lost
    prompt = st.chat_input(placeholder, disabled=bool(loading.error), key="question")
    prompt = prompt or st.session_state.pop("reask", None)  # "Ask it in All documents" under a refused answer
    alone = st.session_state.pop(state.ALONE, None)  # "Ask it on its own" under an answer read as a follow-up
    prompt = prompt or alone
    loading.start()  # the page is usable: the models load while the conversation is drawn and read
    messages = store.messages(chat) if chat else []
    # Earlier answers are drawn folded, and only the latest whole: their sources and how they were made (page images,
    # charts, tables) took seconds each to reopen a long chat. The latest stays whole while a new question is answered
    # below it: folded then, its old parts would stay on the page, greyed, until the new answer ends.
    latest = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1)
    previous = question = ""
    for i, message in enumerate(messages):
        if message.role == "user":
            previous, question = question, message.content
        replay(message, question, previous, settings, folded=i != latest, store=store)
    if refused:
        st.error(refused[1], icon=":material/error:")
    if prompt and loading.error:  # typed before the box was turned off: given back, with why
        st.session_state["refused"] = (prompt, loading.error)
        st.rerun()
    if prompt:
        ask(prompt, settings, loading, options, store, chat, messages, relist, alone=prompt == alone)


def replay(
    message: Message,
    question: str,
    previous: str,
    settings: Settings,
    folded: bool = False,
    store: Conversations | None = None,
) -> None:
    """A message of the open chat. An answer ``folded`` shows its first line, and the rest once opened. ``store``:
    where it is kept, for its thumbs."""
    with st.chat_message(message.role):
        if message.role == "user":
            st.text(message.content)
        elif folded and message.answer is not None:
            unfold = st.expander(fold_label(message), key=f"fold-{message.id}", on_change="rerun")
            if unfold.open:  # drawn only once opened: a closed expander's content is computed and sent all the same
                with unfold:
                    replay_answer(message, question, previous, settings, store)
        else:
            replay_answer(message, question, previous, settings, store)


def fold_label(message: Message) -> str:
    """The line a folded answer shows: its badge, its rating, what it says first, and that it stopped short when it
    did. A long chat is scanned by it for what to trust."""
    label = md_escape(gist(message.answer.parts if message.answer else ())) or "The answer"
    action = message.answer.action if message.answer else None
    marks = [f":{ACTIONS[action].color}-background[{ACTIONS[action].icon} {ACTIONS[action].label}]"] if action else []
    marks += [THUMBS[message.rating.rating]] if message.rating else []
    label = " ".join([*marks, label])
    return label if message.complete else f"{label} · stopped before its end"


def replay_answer(
    message: Message, question: str, previous: str, settings: Settings, store: Conversations | None = None
) -> None:
    from ui import answer as answer_ui  # charts and tables: loaded with the first answer shown, not the first page

    if message.answer is not None:
        answer_ui.text(message.answer)
    elif message.content:  # an answer stopped before its end: the text it had said, as the model's Markdown
        st.markdown(page_markdown(message.content))
    if message.answer is not None:
        answer_ui.render(
            message.answer,
            question,
            settings.files_dir,
            key=message.id,
            previous=previous,
            store=store if message.complete else None,
            rated=message.rating,
        )
    elif not message.complete and stop_of(message) is Stop.USER:  # worded by what is kept (the run may save after)
        st.info(user_stopped(question, said=bool(message.content)), icon=":material/stop_circle:")
    elif not message.complete:
        st.error(message.error or stopped(question))


def ask(
    question: str,
    settings: Settings,
    loading: state.Loading,
    options: dict[str, Any],
    store: Conversations,
    chat: str | None,
    previous: list[Message],
    relist: Callable[[str], None],
    alone: bool = False,
) -> None:
    """Ask ``question`` in the open chat, with the conversation before it; ``alone``: without it, as it is."""
    try:
        question = clean_question(question)  # the one check the CLI and the API make too
    except CragError as exc:
        # Nothing is saved (no question without a reply); the next run says why and gives the text back.
        st.session_state["refused"] = (question, error_text(exc))
        st.rerun()
    if chat is None:
        chat = store.create(title_of(question), scope=options.get("scope", ())).id
        state.open_chat(chat)  # the new chat's scope is its own from now on
        relist(chat)  # the sidebar was drawn before this chat existed
    history = () if alone else tuple((m.role, m.content) for m in previous if m.content and m.complete)
    question_before = "" if alone else next((m.content for m in reversed(previous) if m.role == "user"), "")
    store.add(chat, "user", question)
    with st.chat_message("user"):
        st.text(question)
    with st.chat_message("assistant"):
        reply = store.add(chat, "assistant", "", complete=False)
        with own_event_loop():  # the session's loop may be held by the answer a new question stopped
            LiveAnswer(store, chat, reply, question).answer(settings, loading, options, history, question_before)


class LiveAnswer:
    """One answer being made, in its chat message: the stages, the streamed text, a Stop button under them while it
    runs, then what sits under the answer. Saved as it goes; an answer that does not end is saved as stopped."""

    def __init__(self, store: Conversations, chat: str, reply: int, question: str) -> None:
        self.store, self.chat, self.reply, self.question = store, chat, reply, question
        self.stages = Stages()
        self.body = st.empty()  # the streamed text, above the Stop button
        self.stop = st.empty()
        self.stop.button(
            "Stop",
            icon=":material/stop_circle:",
            key=f"stop-{reply}",
            on_click=mark_stopped,
            args=(store, chat, reply, question),
            help="Stop this answer: what it said so far is kept.",
        )

    def answer(
        self,
        settings: Settings,
        loading: state.Loading,
        options: dict[str, Any],
        history: tuple[tuple[str, str], ...],
        question_before: str,
    ) -> None:
        stream, stored = None, False
        try:
            pipeline = self.models(loading)
            if pipeline is None:
                self.end(None, loading.error)
                stored = True
                return
            try:
                stream = pipeline.stream(self.question, history=history, on_step=self.stages.on_step, **options)
            except UnknownScope as exc:  # the chat's folder is gone: say so, and offer every document
                self.end(None, error_text(exc))
                stored = True
                st.button(
                    f"Ask it in {ALL}",
                    key=f"reask-{self.reply}",
                    icon=":material/select_all:",
                    on_click=ask_everywhere,
                    args=(self.store, self.question),
                )
                return
            with self.body.container():
                error = show(stream, pipeline, options.get("answer_mode"), self.store, self.reply)
            answer = stream.answer if not error else None
            self.end(answer, error, stream.text, generation_of(settings))
            stored = True
            if answer is not None:
                from ui import answer as answer_ui

                answer_ui.render(
                    answer,
                    self.question,
                    settings.files_dir,
                    key=self.reply,
                    previous=question_before,
                    store=self.store,
                )
                tell_if_offline(answer)
        finally:
            # The Stop button, or a click elsewhere, ends this run inside the stream (Streamlit raises a
            # BaseException): the model's stream ends now, and what was said so far is kept, marked incomplete.
            if stream is not None:
                stream.close()
            if not stored:
                text = stream.text if stream is not None else ""
                said = stopped(self.question)
                self.store.update(self.reply, text, complete=False, error=said, keep_error=True, stop=Stop.INTERRUPTED)
                self.reword_stop(text)

    def reword_stop(self, text: str) -> None:
        """A Stop clicked before this run saved its last text said whether anything was kept by what was saved then:
        say it by what is kept now."""
        for message in self.store.messages(self.chat):
            right = user_stopped(self.question, said=bool(text))
            if message.id == self.reply and stop_of(message) is Stop.USER and message.error != right:
                self.store.update(self.reply, text, None, complete=False, error=right, stop=Stop.USER)

    def models(self, loading: state.Loading) -> crag.pipeline.Pipeline | None:
        """The pipeline, once loaded (None when it failed); meanwhile the status says the question waits for it."""
        if not loading.done.is_set():
            self.stages.on_step("waiting for the models")
            while not loading.wait(WAIT_LOOK):
                # Each look redraws the status: a click on Stop is taken here, not only once the models are in.
                self.stages.status.update(label=f"Waiting for the models to load… {loading.seconds:.0f} s")
        return loading.pipeline

    def end(self, answer: Answer | None, error: str, text: str = "", generation: str = "") -> None:
        """The answer ended (whole, cut short, or failed): saved (with the index ``generation`` it was made from),
        the Stop button gone, the status says how."""
        self.stop.empty()
        self.stages.done(answer, error)
        if answer is None:
            self.store.update(self.reply, text, None, complete=False, error=error)
        else:
            self.store.update(
                self.reply, answer.text, answer, complete=answer.complete, error=answer.error, generation=generation
            )


OFFLINE_TOLD = "offline_told"  # the session was told that web search cannot work without a network


def tell_if_offline(answer: Answer) -> None:
    """Once a session, under the first answer whose web search could not connect: why, and the way out. Each
    answer's trace says it too; someone who works offline should not be told under every question."""
    from crag.websearch import offline

    if answer.trace is None or not offline(answer.trace.web_error) or st.session_state.get(OFFLINE_TOLD):
        return
    st.session_state[OFFLINE_TOLD] = True
    st.warning(
        "**Web search cannot work without an internet connection**, and it could not reach the internet from "
        f"here. Answers come from your documents only. To stop trying the web, turn off **{WEB_LABEL}** in "
        "**Answer settings**, in the sidebar.",
        icon=":material/cloud_off:",
    )


def ask_everywhere(store: Conversations, question: str) -> None:
    """The question again, in every document: the chat asks "All documents" from now on."""
    choose(store, [])
    st.session_state["reask"] = question


def mark_stopped(store: Conversations, chat: str, reply: int, question: str) -> None:
    """The Stop button's click, run before the page's next run: the answer says the user stopped it. The run it ends
    may still be writing (Streamlit starts the next run at once, and the stopped one ends at its next call into
    Streamlit): that run keeps this error, and adds what was said until then. An answer that ended meanwhile (a
    click in the last instant) is left whole."""
    for message in store.messages(chat):
        if message.id == reply and not message.complete:
            error = user_stopped(question, said=bool(message.content))
            store.update(reply, message.content, message.answer, complete=False, error=error, stop=Stop.USER)


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
    stream: crag.stream.AnswerStream,
    pipeline: crag.pipeline.Pipeline,
    answer_mode: str | None,
    store: Conversations,
    reply: int,
) -> str:
    """The answer on the page as it is made, saved as it goes; what stopped it, or "" when nothing did."""
    from ui import answer as answer_ui

    try:
        if pipeline.answer_kind(answer_mode) is AnswerKind.EVIDENCE:
            for _ in saving(stream, store, reply):  # quotes come whole, at once
                pass
            answer_ui.text(stream.finished)
        else:
            written = st.empty()
            with written.container():
                answer_ui.live(saving(stream, store, reply))
            if stream.answer is not None:  # set as it is replayed, all its parts at once
                with written.container():
                    answer_ui.text(stream.answer)
    except CragError as exc:
        return error_text(exc)
    except Exception as exc:  # noqa: BLE001 - a failing model must not take the page or the history down
        return (
            f"The answer stopped ({type(exc).__name__}: {md_escape(str(exc))}). "
            f"Check the model server ({pipeline.backend.name} · {pipeline.backend.model}), then ask again."
        )
    return ""


def saving(stream: crag.stream.AnswerStream, store: Conversations, reply: int) -> Iterator[Part | None]:
    """The stream, saved now and then as it goes: a crash keeps the partial answer."""
    last = time.perf_counter()
    for part in stream:
        yield part
        if time.perf_counter() - last > SAVE_EVERY:
            store.update(reply, stream.text, complete=False, keep_error=True)
            last = time.perf_counter()
