"""The page as a session lives it: the first page while the models load, Stop, answer settings kept in the address."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from crag.conversations import Conversations, Stop
from crag.errors import BackendUnavailable
from crag.pipeline import Pipeline
from tests import fakes
from tests.apptest import (
    APP,
    CHUNKS,
    LOADING,
    THREE_SENTENCES,
    app,
    ask,
    badges,
    click_while_running,
    file_statuses,
    loaded,
    plain,
    saved,
    texts,
    use_pipeline,
)
from tests.pdfs import manual_pdf

# ---------------------------------------------------------------------------------------------
# The first page


def load_once_a_question_waits(monkeypatch: pytest.MonkeyPatch, load) -> None:
    """``Pipeline.from_settings`` does ``load(settings)`` once a question waits for the models: the page is caught
    while they load, with no timing involved."""
    import ui.chat

    waiting = threading.Event()

    def from_settings(cls, settings):
        assert waiting.wait(10), "no question waited for the models"
        return load(settings)

    on_step = ui.chat.Stages.on_step

    def step(self, stage: str) -> None:
        on_step(self, stage)
        if stage == "waiting for the models":
            waiting.set()

    monkeypatch.setattr(Pipeline, "from_settings", classmethod(from_settings))
    monkeypatch.setattr(ui.chat.Stages, "on_step", step)


def test_the_page_is_usable_while_the_models_load_and_a_question_waits_for_them(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    manual_pdf(files / "manual.pdf")
    load_once_a_question_waits(monkeypatch, lambda settings: fakes.pipeline(settings, CHUNKS, [0.9, -1.0]))
    at = AppTest.from_file(APP, default_timeout=60).run()
    # Drawn at once, the models still loading: the sidebar with the files and the Rebuild button, the chat box.
    assert LOADING in texts(at.sidebar.markdown)
    assert file_statuses(at) == {"manual.pdf": "🆕 not indexed yet"} and at.button(key="rebuild")
    assert not at.chat_input[0].disabled
    # A question asked now waits for them, saying so, then is answered.
    at = ask(at)
    assert not at.exception
    stages = [c.value for c in at.status[0].caption]
    assert stages[0].startswith("Waiting for the models to load · "), stages
    assert at.status[0].label.startswith("Answered in") and badges(at)
    assert LOADING not in texts(loaded(at).sidebar.markdown)
    assert "**ollama** · `fake`" in texts(at.sidebar.markdown)


def test_models_that_fail_to_load_say_why_and_the_waiting_question_is_kept(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    def down(settings):
        raise BackendUnavailable("Ollama is not reachable at http://127.0.0.1:1: start it with `ollama serve`")

    load_once_a_question_waits(monkeypatch, down)
    at = ask(AppTest.from_file(APP, default_timeout=60).run())
    assert not at.exception
    assert "ollama serve" in at.chat_message[1].error[0].value
    assert [m.role for m in saved(files)] == ["user", "assistant"] and not saved(files)[1].complete
    at.run()  # the page's next run: the chat box is off, and says why
    assert at.chat_input[0].disabled and "ollama serve" in at.main.error[0].value
    assert [m.name for m in at.chat_message] == ["user", "assistant"], "the question and why it failed are kept"


# ---------------------------------------------------------------------------------------------
# Stop


def test_stop_ends_a_written_answer_at_once_and_says_it_was_stopped(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    import ui.chat

    use_pipeline(monkeypatch, [0.9], answer=THREE_SENTENCES)
    streamed, clicks = ui.chat.saving, []

    def clicked_stop(stream, store, reply):
        for delta in streamed(stream, store, reply):
            yield delta
            if delta and not clicks:  # a sentence into the first answer, the user clicks its Stop button
                clicks.append(reply)
                click_while_running(f"stop-{reply}")

    monkeypatch.setattr(ui.chat, "saving", clicked_stop)
    at = ask(app())
    assert not at.exception
    # The click's own run shows the answer as far as it went, and says it was stopped: no second click needed.
    assert [m.name for m in at.chat_message] == ["user", "assistant"]
    answer = at.chat_message[1]
    assert answer.markdown[0].value.startswith("The widget needs") and "dependencies" not in answer.markdown[0].value
    assert "You stopped this answer" in texts(answer.info)
    assert not answer.get("status"), "no answer is being made any more"
    [message] = [m for m in saved(files) if m.role == "assistant"]
    assert not message.complete and message.error.startswith("You stopped this answer")
    assert not at.chat_input[0].disabled
    at = ask(at, "How much memory does the widget need?")  # the chat box takes the next question
    assert len(at.chat_message) == 4 and badges(at)


def test_a_stop_before_the_answer_said_anything_does_not_say_text_was_kept(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    import ui.chat

    use_pipeline(monkeypatch, [0.9], answer=THREE_SENTENCES)
    on_step = ui.chat.Stages.on_step

    def step(self, stage: str) -> None:
        on_step(self, stage)
        if stage == "grading":  # while the passages are graded, the user clicks the answer's Stop button
            click_while_running("stop-2")  # the first chat's first answer

    monkeypatch.setattr(ui.chat.Stages, "on_step", step)
    at = ask(app())
    assert not at.exception
    answer = at.chat_message[1]
    assert texts(answer.info) == "You stopped this answer before it said anything: ask again for an answer."
    assert not answer.markdown, "nothing was written, and nothing says it was kept"
    [message] = [m for m in saved(files) if m.role == "assistant"]
    assert message.content == "" and message.error == texts(answer.info) and not message.complete


def test_a_stop_the_next_run_takes_before_the_stopped_run_ends_is_kept(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    """Streamlit starts the run a click causes at once, in another thread (fast reruns): the Stop's callback may mark
    the answer before the stopped run, still streaming, saves it. Its mark stays, with the text said until then."""
    import ui.chat
    from ui.chat import mark_stopped
    from ui.text import user_stopped

    use_pipeline(monkeypatch, [0.9], answer=THREE_SENTENCES)
    streamed, store = ui.chat.saving, Conversations(files.parent / "chroma_db" / "conversations.sqlite3")

    def stopped_meanwhile(stream, conversations, reply):
        said = (d for d in streamed(stream, conversations, reply) if d)  # sentences, not the beats between them
        for n, delta in enumerate(said):
            yield delta
            if n == 0 and not store.messages(store.list()[0].id)[1].error:
                ui.chat.SAVE_EVERY = 0.0  # the stopped run saves its text once more, as it would a second later
                mark_stopped(store, store.list()[0].id, reply, "How many cores does the widget need?")
            elif n == 1:
                click_while_running(None)  # the stopped run ends at its next call into Streamlit

    monkeypatch.setattr(ui.chat, "saving", stopped_meanwhile)
    monkeypatch.setattr(ui.chat, "SAVE_EVERY", 1.0)
    ask(app())
    [message] = [m for m in saved(files) if m.role == "assistant"]
    # Marked while nothing was saved yet, it says what is kept now: the text said until then.
    assert message.error == user_stopped("How many cores?", said=True), message.error
    assert message.stop is Stop.USER, "the stopped run's own mark (interrupted) does not replace the user's"
    assert message.content.startswith("The widget needs") and not message.complete


@pytest.mark.parametrize(
    ("question", "said", "remedy"),
    [
        ("How many cores does the widget need?", "nothing indexed yet", "Build it: **Rebuild knowledge base**"),
        ("这个部件需要几个核心？", "还没有已索引的文档", "构建方法：侧边栏中的 **Rebuild knowledge base**"),
    ],
)
def test_an_answer_from_an_empty_knowledge_base_says_how_to_build_it_here(
    monkeypatch: pytest.MonkeyPatch, files: Path, question: str, said: str, remedy: str
) -> None:
    def from_settings(cls, settings):
        return fakes.pipeline(settings, [], [], searcher=fakes.FakeSearcher([]))

    monkeypatch.setattr(Pipeline, "from_settings", classmethod(from_settings))
    at = ask(app(), question)
    for _ in ("as it is written", "replayed from the history"):
        assert [m.name for m in at.chat_message] == ["user", "assistant"], texts(at.error)
        shown = texts(at.chat_message[1].markdown)
        assert said in shown and remedy in shown, shown
        assert "python -m crag" not in shown, "the command line's words are not the page's"
        at.run()


def test_a_stop_after_the_answer_ended_leaves_it_whole(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    from ui.chat import mark_stopped

    use_pipeline(monkeypatch, [0.9])
    ask(app())
    store = Conversations(files.parent / "chroma_db" / "conversations.sqlite3")
    [chat] = store.list()
    mark_stopped(store, chat.id, saved(files)[1].id, "How many cores does the widget need?")  # in the last instant
    assert saved(files)[1].complete and not saved(files)[1].error


# ---------------------------------------------------------------------------------------------
# Answer settings


def test_answer_settings_survive_a_reload_in_the_address(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    built = use_pipeline(monkeypatch, [0.9])
    at = app()
    assert not at.query_params.get("answer"), "defaults are not written into the address"
    at.selectbox(key="set_answer").set_value("generated").run()
    at.slider(key="set_top_k").set_value(1).run()
    at.slider(key="set_thresholds").set_value((-0.5, 0.25)).run()
    at.toggle(key="set_web").set_value(False).run()
    params = {k: at.query_params[k] for k in ("answer", "top_k", "thresholds", "web")}
    assert params == {"answer": "generated", "top_k": "1", "thresholds": "-0.5,0.25", "web": "off"}

    reloaded = AppTest.from_file(APP, default_timeout=60)  # a reload: a new session, the same address
    for name, value in at.query_params.items():
        reloaded.query_params[name] = value
    reloaded = ask(loaded(reloaded.run()))
    assert reloaded.selectbox(key="set_answer").value == "generated"
    assert reloaded.slider(key="set_top_k").value == 1 and reloaded.slider(key="set_thresholds").value == (-0.5, 0.25)
    assert reloaded.toggle(key="set_web").value is False
    assert len(saved(files)[-1].answer.trace.retrieved) == 1, "the next question is asked with them"
    assert len(built) == 1

    reloaded.selectbox(key="set_answer").set_value(built[0].answer_mode).run()  # back to the default
    assert "answer" not in reloaded.query_params


def test_an_address_with_settings_it_cannot_hold_falls_back_to_the_defaults(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    use_pipeline(monkeypatch, [0.9])
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params.update({"answer": "poetry", "top_k": "999", "thresholds": "x", "evaluator": "llm"})
    at = loaded(at.run())
    assert not at.exception
    assert at.selectbox(key="set_answer").value == "auto" and at.slider(key="set_top_k").value == 5
    assert at.selectbox(key="set_evaluator").value == "llm", "a value it can hold is kept"
    assert dict(at.query_params) == {"evaluator": "llm"}


# ---------------------------------------------------------------------------------------------
# A long chat reopened


def test_a_reopened_chat_shows_earlier_answers_folded_and_the_latest_whole(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    """Each answer's sources and how it was made (page images, a chart, tables) made a long chat slow to reopen:
    earlier answers show their first line, and the rest is drawn once opened."""
    use_pipeline(monkeypatch, [0.9])
    at = app()
    for n in range(3):
        at = ask(at, f"How many cores does the widget need, take {n}?")
    chat = at.query_params["chat"]
    reopened = AppTest.from_file(APP, default_timeout=60)  # another tab, or a reload
    reopened.query_params["chat"] = chat
    at = loaded(reopened.run())
    answers = [m for m in at.chat_message if m.name == "assistant"]
    *earlier, latest = answers
    for answer in earlier:
        [fold] = answer.expander
        assert (
            plain(fold.label)
            == ":green-background[:material/check_circle: Correct] The widget needs two processor cores [1]."
        )
        assert not list(fold.children.values()), "nothing of a folded answer is drawn until it is opened"
        assert not answer.dataframe
    assert [e.label for e in latest.expander] == ["How this answer was made", "Sources (1)"]
    assert latest.dataframe and badges(at)

    first = saved(files)[1]
    at.session_state[f"fold-{first.id}"] = True  # the user opens the first answer
    at.run()
    [fold] = at.chat_message[1].expander[:1]
    inside = [e.label for e in fold.expander]
    assert inside == ["How this answer was made", "Sources (1)"], inside
    assert "The widget needs two processor cores" in fold.markdown[0].value
