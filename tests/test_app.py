"""The Streamlit page: asking, the answer with its badge, trace and sources, and errors on the way."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pymupdf
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from crag.errors import BackendUnavailable
from crag.models import PACKAGED_LABEL, BackendInfo, resolve_backend
from crag.pipeline import Pipeline
from crag.store import RebuildNeeded
from tests import fakes
from tests.apptest import (
    ANSWER,
    APP,
    CHUNKS,
    app,
    ask,
    badge_line,
    badges,
    loaded,
    plain,
    saved,
    texts,
    use_pipeline,
)
from tests.pdfs import manual_pdf

# ---------------------------------------------------------------------------------------------
# Asking


def test_ask_streams_the_answer_with_its_badge_trace_and_sources(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    use_pipeline(monkeypatch, [0.9, -0.8])
    manual_pdf(files / "manual.pdf")  # the cited chunk's file: its page is rendered
    at = ask(app())
    assert not at.exception
    user, assistant = at.chat_message
    assert (user.name, assistant.name) == ("user", "assistant")
    assert assistant.markdown[0].value == ANSWER
    # Under it, what it rests on: the source's sentences, set as quotes.
    assert assistant.markdown[1].value.startswith("**From your documents\\:**\n\n> “The widget needs two processor")
    assert at.status[0].label.startswith("Answered in")
    stages = [c.value for c in at.status[0].caption]
    for stage in ("Retrieving passages", "Grading the passages", "Refining the knowledge", "Generating the answer"):
        assert any(line.startswith(stage) for line in stages)
    assert all(re.fullmatch(r".+ · \d+\.\d s", line) for line in stages), stages  # how long each stage took
    assert badges(at) == [":green-badge[:material/check_circle: Your documents: relevant (CRAG: Correct)]"]
    assert "2 LLM calls" in texts(assistant.caption)  # the question read, the answer written
    assert not assistant.warning, "it states only what its source says"

    how, sources = assistant.expander
    assert how.label == "How this answer was made"
    assert "Action: Correct." in texts(how.markdown)
    retrieved = how.dataframe[0].value
    assert list(retrieved["score"]) == [0.9, -0.8] and list(retrieved["file"]) == ["manual.pdf"] * 2
    # Passages are P1, P2 (a rank is no citation), each with the number it has in the answer, if any.
    assert list(retrieved["passage"]) == [1, 2] and list(retrieved["source in the answer"]) == ["[1]", ""]
    assert how.get("vega_lite_chart")  # the scores against the two thresholds
    assert "two processor cores" in how.code[0].value  # the refined context
    strips = how.dataframe[1].value
    assert strips["kept"].any() and not strips["kept"].all()  # kept and dropped strips
    assert "The web was not searched" in texts(how.caption)
    assert [m.label for m in how.metric][:1] == ["LLM calls"]

    assert sources.label == "Sources (1)"  # only [1] is cited
    assert "manual\\.pdf · page 1" in texts(sources.markdown)
    assert "Intro" in texts(sources.caption)  # the headings above the passage
    assert "not cited" not in texts(sources.caption)  # [1] is shown as cited, and there is no other source
    assert "two processor cores" in sources.text[0].value
    # The page with the passage highlighted: a close-up, and the whole page behind a popover.
    assert len(sources.image) == 2


def test_a_source_shows_the_page_number_its_manual_prints(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    use_pipeline(monkeypatch, [0.9, -0.8])
    manual = manual_pdf(files / "manual.pdf")
    with pymupdf.open(manual) as doc:  # the cited page 1 is the manual's page "ix": its index and references say so
        doc.set_page_labels([{"startpage": 0, "prefix": "", "style": "r", "firstpagenum": 9}])
        doc.saveIncr()
    sources = ask(app()).chat_message[1].expander[1]
    assert "manual\\.pdf · page 1 \\(printed ix\\)" in texts(sources.markdown)


def test_each_stage_says_how_long_it_took_not_when_it_began(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    import ui.chat

    ticks = iter(range(1000))  # a clock that moves one second each time it is read
    monkeypatch.setattr(ui.chat, "time", SimpleNamespace(perf_counter=lambda: float(next(ticks))))
    use_pipeline(monkeypatch, [0.9, -0.8])
    stages = [c.value for c in ask(app()).status[0].caption]
    # Read once as a stage begins and once as it ends: one second each, not 1, 2, 3 s since the question.
    took = [
        "Asking the model how your documents would word the answer · 1.0 s",
        "Retrieving passages · 1.0 s",
        "Grading the passages · 1.0 s",
        "Refining the knowledge · 1.0 s",
    ]
    assert stages[:4] == took


@pytest.mark.parametrize(
    ("scores", "badge"),
    [
        ([0.9, -0.9], ":green-badge[:material/check_circle: Your documents: relevant (CRAG: Correct)]"),
        ([0.2, -0.1], ":orange-badge[:material/help: Your documents: partly relevant (CRAG: Ambiguous)]"),
        ([-0.9, -0.95], ":red-badge[:material/cancel: Your documents: not relevant (CRAG: Incorrect)]"),
    ],
)
def test_each_action_has_its_badge(monkeypatch: pytest.MonkeyPatch, files: Path, scores: list, badge: str) -> None:
    use_pipeline(monkeypatch, scores)
    at = ask(app())
    assert not at.exception
    assert badges(at) == [badge]
    how = at.chat_message[1].expander[0]
    if "Correct" in badge:
        assert "The web was not searched" in texts(how.caption)
        return
    assert how.code[-1].value == "widget cores"  # the web query
    web = how.dataframe[-2].value  # the web results, before the timings
    assert list(web["title"]) == ["Widget FAQ"] and list(web["url"]) == ["https://example.com/faq"]


def test_an_incorrect_answer_cites_the_web(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    use_pipeline(monkeypatch, [-0.9, -0.95])
    at = ask(app())
    sources = at.chat_message[1].expander[1]
    assert "Widget FAQ" in texts(sources.markdown)
    assert "(https://example.com/faq)" in texts(sources.caption)  # the URL, as a link
    assert not sources.image


def test_a_question_in_the_other_language_than_the_documents_is_told_to_ask_in_theirs(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    monkeypatch.setattr(fakes.HashEmbedder, "multilingual", False)
    use_pipeline(monkeypatch, [0.1])
    at = ask(app(), "小部件需要多少内存？")
    assert not at.exception
    assert "如果答案可能在其中，请用英文提问" in plain(texts(at.chat_message[1].caption))
    at = ask(at, "How many cores does the widget need?")  # in the documents' language: no hint
    assert "Tip:" not in texts(at.chat_message[3].caption) and "提示" not in texts(at.chat_message[3].caption)


def test_what_a_written_answer_invents_is_cut_and_said_on_its_badge_line(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    use_pipeline(
        monkeypatch, [0.9], answer="It needs two processor cores [1]. Enable TURBO_MODE to run it on 16 cores [1]."
    )
    at = ask(app())
    assert not at.exception
    # One line: what CRAG judged (the passages, not the answer), what the answer states that they do not, who wrote it.
    judged, flagged, caption = badge_line(at.chat_message[1])
    assert judged == ":green-badge[:material/check_circle: Your documents: relevant (CRAG: Correct)]"
    assert flagged.startswith(":orange-background[:material/report: The model\\'s answer named")
    assert "“TURBO_MODE”, “16”" in plain(flagged) and "those sentences were cut" in plain(flagged)
    assert "TURBO_MODE" not in texts(at.chat_message[1].markdown)
    assert "written by ollama" in caption
    assert not at.chat_message[1].warning, "the warning is on the badge line, not a box below it"
    at = ask(at, "小部件需要几个核？")  # in the question's language
    assert "资料里没有的“TURBO_MODE”、“16”" in plain(badge_line(at.chat_message[3])[1])


@pytest.mark.parametrize(("label", "weak"), [(PACKAGED_LABEL, True), ("qwen2.5-0.5b-instruct.gguf", False)])
def test_an_answer_the_packaged_embedded_model_wrote_says_it_is_weak(
    monkeypatch: pytest.MonkeyPatch, files: Path, label: str, weak: bool
) -> None:
    def from_settings(cls, settings):
        model = fakes.ScriptedModel(answer="The widget needs two processor cores [1].")
        p = fakes.pipeline(settings, CHUNKS, [0.9, -1.0], model=model, backend="embedded")
        p.backend = BackendInfo("embedded", label, "test")  # the packaged model, or a GGUF the user chose
        return p

    monkeypatch.setattr(Pipeline, "from_settings", classmethod(from_settings))
    monkeypatch.setenv("CRAG_ANSWER_MODE", "generated")
    at = ask(app())
    assert not at.exception
    caption = texts(at.chat_message[1].caption)
    assert "written by embedded" in caption and ("a weak model that may invent facts" in caption) is weak
    # The sidebar says the same: the packaged model is weak; a model of the user's own is held to its sources.
    assert ("135M model writes the answers" in texts(at.sidebar.warning)) is weak
    assert ("only the sentences its sources back" in texts(at.sidebar.markdown)) is not weak
    monkeypatch.setenv("CRAG_ANSWER_MODE", "evidence")
    at = ask(app())
    assert "weak model" not in texts(at.chat_message[-1].caption), "quotes: no model wrote them"


def test_an_answer_read_as_a_follow_up_says_so_and_can_be_asked_on_its_own(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    rewrite = {"Standalone": {"question": "How much memory does the widget need?"}}
    histories = []

    def from_settings(cls, settings):
        model = fakes.ScriptedModel(answer=ANSWER, structured=rewrite)
        return fakes.pipeline(settings, CHUNKS, [0.9, 0.1], model=model)

    stream = Pipeline.stream

    def recorded(self, question, history=(), **kwargs):
        histories.append(tuple(history))
        return stream(self, question, history, **kwargs)

    monkeypatch.setattr(Pipeline, "from_settings", classmethod(from_settings))
    monkeypatch.setattr(Pipeline, "stream", recorded)
    at = ask(ask(app()), "And its memory?")
    follow_up = badge_line(at.chat_message[3])[-1]
    assert follow_up.startswith("Read as a follow-up of “How many cores does the widget need?” · "), follow_up
    assert len(histories[1]) == 2

    next(b for b in at.chat_message[3].button if b.label == "Ask it on its own").click().run()
    assert not at.exception
    assert [m.text[0].value for m in at.chat_message if m.name == "user"][-1] == "And its memory?"
    assert histories[-1] == (), "asked again with no conversation before it"
    again = saved(files)[-1].answer.trace
    assert again.standalone_question == again.question == "And its memory?"
    assert "follow-up" not in badge_line(at.chat_message[-1])[-1]
    assert not [b for b in at.chat_message[-1].button if b.label == "Ask it on its own"]


def test_history_survives_reruns_reloads_and_restarts(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    use_pipeline(monkeypatch, [0.9])
    at = ask(app(), "How many cores does the widget need?")
    at = ask(at, "And how much memory does the widget need?")
    at.run()  # a rerun replays the history, trace and badge included
    assert [m.name for m in at.chat_message] == ["user", "assistant"] * 2
    assert [m.text[0].value for m in at.chat_message if m.name == "user"] == [
        "How many cores does the widget need?",
        "And how much memory does the widget need?",
    ]
    assert len(badges(at)) == 1, "the latest answer is shown whole; the earlier one is folded"
    assert saved(files)[1].answer.text.startswith(ANSWER + "\n\nFrom your documents:") and saved(files)[1].complete
    chat = at.query_params["chat"]

    st.cache_resource.clear()  # a restart: nothing of the process is left, the store is
    reloaded = AppTest.from_file(APP, default_timeout=60)
    reloaded.query_params["chat"] = chat  # a reload: the URL keeps the open conversation
    loaded(reloaded.run())
    assert [m.name for m in reloaded.chat_message] == ["user", "assistant"] * 2
    assert len(badges(reloaded)) == 1, "the trace came back with the latest answer"
    folded = reloaded.chat_message[1].expander[0].label
    assert folded.startswith(":green-background[:material/check_circle: Correct] The widget needs"), (
        "the earlier one is folded to its badge and its first line"
    )
    assert "How many cores does the widget need?" in [b.label for b in reloaded.sidebar.button]

    reloaded.button(key="new_chat").click().run()
    assert len(reloaded.chat_message) == 0 and "chat" not in reloaded.query_params
    reloaded.button(key=f"chat-{chat}").click().run()  # reopened from the sidebar
    assert len(reloaded.chat_message) == 4


def test_a_chat_can_be_renamed_deleted_and_exported(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    use_pipeline(monkeypatch, [0.9])
    at = ask(app(), "How many cores does the widget need?")
    chat = at.query_params["chat"]
    at.text_input(key=f"title-{chat}").set_value("   ").run()
    at.button(key=f"rename-{chat}").click().run()
    assert "cannot be blank" in texts(at.sidebar.warning), "a blank title is refused, and says so"
    at.text_input(key=f"title-{chat}").set_value("Widget cores").run()
    at.button(key=f"rename-{chat}").click().run()
    assert "Widget cores" in [b.label for b in at.sidebar.button]
    export = at.chat_message[1].get("download_button")[0]
    assert export.proto.label == "Export as Markdown"
    whole = at.sidebar.get("download_button")[0]
    assert whole.proto.label == "Export the whole chat as Markdown"
    # Delete asks once, in a dialog that names the chat; "Keep it" keeps it.
    at.button(key=f"delete-{chat}").click().run()
    assert saved(files), "one click deletes nothing: it must be confirmed"
    assert "Widget cores" in plain(texts(at.markdown)) and "cannot be undone" in texts(at.markdown)
    at.button(key=f"keep-{chat}").click().run()
    assert saved(files) and not [b for b in at.button if b.key == f"confirm-delete-{chat}"]
    at.button(key=f"delete-{chat}").click().run()
    at.button(key=f"confirm-delete-{chat}").click().run()
    assert len(at.chat_message) == 0 and saved(files) == []
    assert not at.toast, "the chat deleted here is no stale link"


def test_a_link_to_a_deleted_chat_opens_a_new_chat_and_says_so(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    use_pipeline(monkeypatch, [0.9])
    at = app()
    at.query_params["chat"] = "0123abcd"  # a bookmark, or a tab left open on a chat deleted in another
    at.run()
    assert len(at.chat_message) == 0 and "chat" not in at.query_params
    assert "no longer exists" in texts(at.toast)


def test_a_new_chat_is_listed_as_soon_as_it_is_asked(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    use_pipeline(monkeypatch, [0.9])
    at = ask(app(), "How many cores does the widget need?")  # no further run: listed by the run that answers
    assert not at.exception
    assert "How many cores does the widget need?" in [b.label for b in at.sidebar.button]
    at.button(key="new_chat").click().run()
    at = ask(at, "How much memory does the widget need?")  # the first chat is listed twice in this run
    assert not at.exception
    labels = [b.label for b in at.sidebar.button]
    assert "How many cores does the widget need?" in labels and "How much memory does the widget need?" in labels
    at.run()  # the next run lists each once, the open one marked
    listed = [b for b in at.sidebar.button if b.key.startswith("chat-")]
    assert sorted(b.label for b in listed) == [
        "How many cores does the widget need?",
        "How much memory does the widget need?",
    ]
    # The open chat is the primary button; the others are buttons too, not bare labels.
    assert {b.label[:8]: b.proto.type for b in listed} == {"How much": "primary", "How many": "secondary"}


def test_the_chat_box_says_how_long_a_question_may_be(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    from crag.text import MAX_QUESTION_CHARS

    use_pipeline(monkeypatch, [0.9])
    box = app().chat_input[0]
    assert box.placeholder == f"Ask a question about your documents (up to {MAX_QUESTION_CHARS:,} characters)"


def test_a_bad_question_is_refused_and_leaves_no_dangling_turn(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    use_pipeline(monkeypatch, [0.9])
    at = ask(app(), "why? " * 500)
    assert "limit is 2000" in at.error[0].value
    assert len(at.chat_message) == 0 and saved(files) == []
    at = ask(at, "\u200b\u200b")
    assert "empty" in at.error[0].value and saved(files) == []


def test_answer_settings_reach_the_pipeline(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    built = use_pipeline(monkeypatch, [0.3])
    at = app()
    at.slider(key="set_top_k").set_value(1).run()
    at.slider(key="set_thresholds").set_value((-0.4, 0.25)).run()
    at.toggle(key="set_web").set_value(False).run()
    at.selectbox(key="set_evaluator").set_value("similarity").run()
    at = ask(at)
    assert badges(at) == [
        ":green-badge[:material/check_circle: Your documents: relevant (CRAG: Correct)]"
    ]  # 0.3 >= the new upper 0.25
    trace = saved(files)[-1].answer.trace
    assert len(trace.retrieved) == 1
    assert len(built) == 1, "answer settings are options of a question: the pipeline is not rebuilt"


def test_web_search_turned_off_for_the_app_cannot_be_turned_on_in_a_session(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    """Started with CRAG_WEB_SEARCH=off, the toggle shows off and cannot be turned on: on, it would do nothing."""
    monkeypatch.setenv("CRAG_WEB_SEARCH", "off")
    use_pipeline(monkeypatch, [-0.9, -0.95])  # Incorrect: the web would be searched if it could be
    at = app()
    toggle = at.toggle(key="set_web")
    assert toggle.disabled and toggle.value is False and "CRAG_WEB_SEARCH=on" in toggle.help
    at.session_state["set_web"] = True  # left on by an earlier start of the app in this browser session
    at = ask(at.run())
    assert at.toggle(key="set_web").value is False
    trace = saved(files)[-1].answer.trace
    assert trace.web_results == () and trace.web_error
    assert "Widget FAQ" not in texts(at.chat_message[1].markdown)


def test_web_search_without_a_network_is_explained_once_a_session(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    """Web search is on by default: offline, every question tries it and fails. The first failure says why and how
    to stop it; the next questions' answers do not repeat it (their traces still say it)."""

    def from_settings(cls, settings):
        searcher = fakes.FakeSearcher(error="offline: no network")
        return fakes.pipeline(settings, CHUNKS, [-0.9, -0.95], searcher=searcher)  # Incorrect: the web is tried

    monkeypatch.setattr(Pipeline, "from_settings", classmethod(from_settings))
    at = app()
    assert "internet connection" in at.toggle(key="set_web").help
    at = ask(at)
    told = [w.value for w in at.main.warning if "without an internet connection" in w.value]
    assert len(told) == 1 and "Search the web when the documents fall short" in told[0], told
    assert "Answer settings" in told[0]
    at = ask(at, "How much memory does the widget need?")
    assert not [w for w in at.main.warning if "without an internet connection" in w.value], "said once is enough"
    assert saved(files)[-1].answer.trace.web_error == "offline: no network"


def test_document_and_web_text_is_never_html_and_images_are_not_fetched(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    evil = "The widget needs <script>alert(1)</script> **two** ![x](http://attacker.example/leak.png) cores."
    use_pipeline(
        monkeypatch,
        [0.9],
        answer=f"Here [1]. ![pixel](http://attacker.example/p.png) {evil}",
        chunks=[fakes.chunk(evil, n=0)],
    )
    at = ask(app())
    assert not at.exception
    assert not at.get("html")
    rendered = texts(at.markdown)
    assert "![" not in rendered  # every image became text
    sources = at.chat_message[1].expander[1]
    # Shown as text, exactly as the answer quotes it (the layout parser's bold markers are no part of a quote).
    assert evil.replace("**two**", "two") in sources.text[0].value


# ---------------------------------------------------------------------------------------------
# Errors


def test_ollama_down_shows_the_fix_disables_the_chat_and_keeps_history(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    real = Pipeline.__dict__["from_settings"]
    use_pipeline(monkeypatch, [0.9])
    at = ask(app())
    # Now the user insists on Ollama, which is down: the real from_settings refuses with the fix.
    monkeypatch.setattr(Pipeline, "from_settings", real)
    monkeypatch.setenv("CRAG_LLM_BACKEND", "ollama")
    loaded(at.run())
    assert not at.exception
    assert "ollama serve" in at.main.error[0].value
    assert "ollama serve" in texts(at.sidebar.error)
    assert at.chat_input[0].disabled
    assert [m.name for m in at.chat_message] == ["user", "assistant"]
    assert badges(at)  # the old answer is still whole


def test_backend_unavailable_from_the_pipeline_is_shown_as_is(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    def down(cls, settings):
        raise BackendUnavailable("Ollama is not reachable at http://127.0.0.1:1: start it with `ollama serve`")

    monkeypatch.setattr(Pipeline, "from_settings", classmethod(down))
    at = app()
    assert not at.exception
    assert at.error[0].value.endswith("start it with `ollama serve`")
    assert at.chat_input[0].disabled


def test_a_missing_model_can_be_pulled_from_the_sidebar(
    monkeypatch: pytest.MonkeyPatch, files: Path, fake_ollama, progress_spy: list
) -> None:
    fake_ollama.models = ["bge-m3:latest"]
    fake_ollama.pullable = ["qwen3:4b"]
    monkeypatch.setenv("CRAG_OLLAMA_URL", fake_ollama.url)
    monkeypatch.setenv("CRAG_LLM_BACKEND", "ollama")

    def from_settings(cls, settings):
        backend = resolve_backend(settings)  # the real check against the (fake) Ollama
        pipeline = fakes.pipeline(settings, CHUNKS, [0.9])
        pipeline.backend = backend
        return pipeline

    monkeypatch.setattr(Pipeline, "from_settings", classmethod(from_settings))
    at = app()
    assert "ollama pull qwen3:4b" in at.main.error[0].value
    assert at.chat_input[0].disabled
    assert "`qwen3:4b` (chat) is not in Ollama" in texts(at.sidebar.error)

    loaded(at.button(key="pull-chat").click().run())
    assert not at.exception
    assert any("pulling 1a2b3c" in text and "1000 B" in text for _, text in progress_spy)
    assert "Pulled `qwen3:4b`" in texts(at.sidebar.success)
    assert not at.main.error and not at.chat_input[0].disabled
    assert "**ollama** · `qwen3:4b`" in texts(at.sidebar.markdown)


def test_a_failed_pull_says_why(monkeypatch: pytest.MonkeyPatch, files: Path, fake_ollama) -> None:
    fake_ollama.models = []
    monkeypatch.setenv("CRAG_OLLAMA_URL", fake_ollama.url)
    use_pipeline(monkeypatch, [0.9])
    at = app()
    assert "Until then the built-in model is used" in texts(at.sidebar.warning)
    at.button(key="pull-embeddings").click().run()
    assert not at.exception
    assert "file does not exist" in texts(at.sidebar.error)


def test_a_model_failure_mid_answer_keeps_the_page_and_the_partial_text(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    class Broken(fakes.ScriptedModel):
        async def _stream(self, messages, info):
            self._record(messages, info)
            yield "Partial "
            raise ConnectionError("server went away")

    def from_settings(cls, settings):
        return fakes.pipeline(settings, CHUNKS, [0.9, 0.1], model=Broken())

    monkeypatch.setattr(Pipeline, "from_settings", classmethod(from_settings))
    at = ask(app())
    assert not at.exception
    assert "server went away" in at.error[0].value and "ask again" in at.error[0].value
    assert at.status[0].label == "Stopped before the end"
    messages = saved(files)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[1].content == "Partial" and not messages[1].answer.complete and not messages[1].complete
    at.run()
    assert "server went away" in at.chat_message[1].error[0].value  # replayed with the history
    assert badges(at)  # the trace of the stopped answer is still there


def test_an_error_before_the_answer_keeps_the_history(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    class NeedsRebuild(fakes.FakeRetriever):
        def retrieve(self, question, k, mode="hybrid", scope=None):
            raise RebuildNeeded("Rebuild needed: the index was built with other embeddings. Run a full rebuild.")

    def from_settings(cls, settings):
        pipeline = fakes.pipeline(settings, CHUNKS, [0.9, 0.1])
        pipeline.retriever = NeedsRebuild(CHUNKS)
        return pipeline

    monkeypatch.setattr(Pipeline, "from_settings", classmethod(from_settings))
    at = ask(app())
    assert not at.exception
    assert "Run a full rebuild" in at.error[0].value
    assert at.status[0].label == "Stopped"
    at.run()
    assert [m.name for m in at.chat_message] == ["user", "assistant"]
    assert "Run a full rebuild" in at.chat_message[1].error[0].value
