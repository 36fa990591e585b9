"""The Streamlit page, driven by AppTest, with crag's pieces swapped for deterministic fakes.

The page reaches crag through module attributes, so each test swaps exactly the piece it needs:
``Pipeline.from_settings`` (a pipeline of fakes: retriever, evaluator, searcher, scripted model),
``crag.ingest.sync`` (a build that reports progress and a failed file), ``crag.models.ollama_health``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import streamlit as st
from streamlit.elements.progress import ProgressMixin
from streamlit.testing.v1 import AppTest

import crag.ingest
import crag.models
import crag.retriever
from crag.errors import BackendUnavailable
from crag.ingest import FileResult, Progress, SyncReport
from crag.models import OllamaHealth, resolve_backend
from crag.pipeline import Pipeline
from crag.store import BuildInProgress, RebuildNeeded
from crag.types import WebResult
from tests import fakes
from tests.pdfs import manual_pdf

APP = str(Path(__file__).resolve().parent.parent / "app.py")
ANSWER = "The widget needs two processor cores [1]."
WEB = [WebResult("Widget FAQ", "https://example.com/faq", "A widget uses two cores.", "The widget uses two cores.")]
CHUNKS = [
    fakes.chunk("The widget needs two processor cores and eight hundred megabytes of memory.", n=0),
    fakes.chunk("Install the dependencies before you run the widget.", page=2, n=1),
]


@pytest.fixture(autouse=True)
def _fresh_caches():
    st.cache_resource.clear()
    st.cache_data.clear()
    yield
    st.cache_resource.clear()
    st.cache_data.clear()


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, closed_port_url: str) -> Path:
    """The app's folders in tmp_path, Ollama on a closed port (auto falls back to the embedded backend)."""
    folder = tmp_path / "Files"
    folder.mkdir()
    monkeypatch.setenv("CRAG_FILES_DIR", str(folder))
    monkeypatch.setenv("CRAG_CHROMA_DIR", str(tmp_path / "chroma_db"))
    monkeypatch.setenv("CRAG_OLLAMA_URL", closed_port_url)
    return folder


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


# ---------------------------------------------------------------------------------------------
# Empty knowledge base


def test_an_empty_knowledge_base_says_what_to_do(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    use_pipeline(monkeypatch, [0.9])
    at = app()
    assert not at.exception
    body = texts(at.main.markdown)
    assert "Your knowledge base is empty" in body
    assert str(files) in body.replace("\\", "") and "Rebuild knowledge base" in body
    assert "Not built yet" in texts(at.sidebar.caption)
    assert not at.chat_input[0].disabled  # the web can still answer


def test_files_waiting_to_be_indexed_get_a_build_button(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    use_pipeline(monkeypatch, [0.9])
    manual_pdf(files / "dropped by hand.pdf")
    calls = []
    monkeypatch.setattr(crag.ingest, "sync", lambda s, e, rebuild, on_progress: calls.append(rebuild) or SyncReport())
    at = app()
    assert "1 file waiting to be indexed" in texts(at.main.caption)
    assert "not indexed yet" in at.sidebar.dataframe[0].value.to_string()
    at.button(key="build_now_main").click().run()
    assert not at.exception
    assert calls == [False]  # the same incremental build as the sidebar's button


# ---------------------------------------------------------------------------------------------
# Rebuild


def fake_sync(calls: list):
    """A build of two files: one indexed, one failed. It reports progress as the real one does."""

    def sync(settings, embedder, *, rebuild=False, on_progress=None):
        calls.append({"rebuild": rebuild, "embedder": embedder.name})
        for p in [
            Progress("scanning"),
            Progress("parsing", "bad.pdf", 1, 2),
            Progress("parsing", "good.pdf", 2, 2),
            Progress("parsing", "good.pdf", 2, 2, 1, 3),
            Progress("parsing", "good.pdf", 2, 2, 3, 3),
            Progress("embedding", "good.pdf", 2, 2, 0, 4),
            Progress("writing", file_count=2),
            Progress("done"),
        ]:
            on_progress(p)
        return SyncReport(
            files=[
                FileResult("bad.pdf", "failed", error="bad.pdf: not a PDF (no PDF header). Convert it to PDF first."),
                FileResult("good.pdf", "indexed", pages=3, chunks=4, seconds=0.4),
            ],
            total_chunks=4,
            seconds=1.2,
        )

    return sync


@pytest.fixture
def progress_spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    """Every value a progress bar took during the run (AppTest keeps only an element's last state)."""
    seen: list[tuple[int, str]] = []
    original = ProgressMixin.progress

    def spy(self, value, text=None, **kwargs):
        seen.append((value, text or ""))
        return original(self, value, text=text, **kwargs)

    monkeypatch.setattr(ProgressMixin, "progress", spy)
    return seen


def test_rebuild_shows_stage_file_and_page_and_a_failed_file_does_not_stop_it(
    monkeypatch: pytest.MonkeyPatch, files: Path, progress_spy: list
) -> None:
    use_pipeline(monkeypatch, [0.9])
    calls: list = []
    monkeypatch.setattr(crag.ingest, "sync", fake_sync(calls))
    at = app()
    at.button(key="rebuild").click().run()
    assert not at.exception
    assert calls == [{"rebuild": False, "embedder": "fake:hash"}]  # incremental, with the pipeline's embedder

    shown = [text for _, text in progress_spy]
    assert "Scanning the files folder…" in shown
    assert "Reading **good\\.pdf** · file 2/2 · page 1/3" in shown
    assert "Reading **good\\.pdf** · file 2/2 · page 3/3" in shown
    assert "Embedding **good\\.pdf** · file 2/2 · chunk 0/4" in shown
    assert [v for v, _ in progress_spy] == sorted(v for v, _ in progress_spy)  # it only moves forward

    # After the build the page reran: the summary and the failed file's reason are in the sidebar.
    assert "1 indexed · 1 failed · 4 chunks" in texts(at.sidebar.warning)
    failed = texts(at.sidebar.error)
    assert "bad\\.pdf" in failed and "not a PDF" in failed


def test_full_rebuild_chooses_the_embedder_afresh(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    use_pipeline(monkeypatch, [0.9])
    calls: list = []
    monkeypatch.setattr(crag.ingest, "sync", fake_sync(calls))
    chosen = []
    monkeypatch.setattr(
        crag.retriever, "index_embedder", lambda s, rebuild: chosen.append(rebuild) or fakes.HashEmbedder()
    )
    at = app()
    at.toggle(key="full_rebuild").set_value(True).run()
    at.button(key="rebuild").click().run()
    assert calls[0]["rebuild"] is True and chosen == [True]
    assert "Rebuilt from scratch" in texts(at.sidebar.warning)


def test_a_failed_build_shows_the_fix_and_keeps_the_chat(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    use_pipeline(monkeypatch, [0.9])

    def busy(*args, **kwargs):
        raise BuildInProgress("A knowledge-base build is already running (pid 42): wait for it to finish.")

    monkeypatch.setattr(crag.ingest, "sync", busy)
    at = ask(app())
    at.button(key="rebuild").click().run()
    assert not at.exception
    assert "wait for it to finish" in texts(at.sidebar.error)
    assert [m.name for m in at.chat_message] == ["user", "assistant"]


def test_a_crash_inside_the_build_is_an_error_not_a_traceback(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    use_pipeline(monkeypatch, [0.9])

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(crag.ingest, "sync", broken)
    at = app()
    at.button(key="rebuild").click().run()
    assert not at.exception
    error = texts(at.sidebar.error)
    assert "disk on fire" in error and "previous knowledge base still answers" in error


def test_a_real_build_lists_a_failed_file_with_its_reason(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    """The real sync (PyMuPDF, chunking, Chroma, BM25) with the fake pipeline's hash embedder."""
    use_pipeline(monkeypatch, [0.9])
    manual_pdf(files / "manual.pdf")
    (files / "broken.pdf").write_bytes(b"this is not a PDF at all")
    at = app()
    at.button(key="rebuild").click().run()
    assert not at.exception
    status = plain(texts(at.sidebar.caption))
    assert "fake:hash" in status and "pymupdf" in status  # embeddings and parser of the new index
    assert [m.value for m in at.sidebar.metric] == ["1", str(at.sidebar.metric[1].value)]
    table = at.sidebar.dataframe[0].value.set_index("file")
    assert table.loc["manual.pdf", "status"] == "✅ indexed"
    assert table.loc["broken.pdf", "status"] == "❌ failed"
    assert "not a PDF" in table.loc["broken.pdf", "problem"]
    assert any("broken\\.pdf" in e.value and "not a PDF" in e.value for e in at.sidebar.error)
    assert "Your knowledge base is empty" not in texts(at.main.markdown)


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
    assert at.status[0].label.startswith("Answered in")
    stages = texts(at.status[0].caption)
    for stage in ("Retrieving passages", "Grading the passages", "Refining the knowledge", "Generating the answer"):
        assert stage in stages
    assert badges(at) == [":green-badge[:material/check_circle: Correct]"]
    assert "1 LLM call" in texts(assistant.caption)

    how, sources = assistant.expander
    assert how.label == "How this answer was made"
    assert "Action: Correct." in texts(how.markdown)
    retrieved = how.dataframe[0].value
    assert list(retrieved["score"]) == [0.9, -0.8] and list(retrieved["file"]) == ["manual.pdf"] * 2
    assert how.get("vega_lite_chart")  # the scores against the two thresholds
    assert "two processor cores" in how.code[0].value  # the refined context
    strips = how.dataframe[1].value
    assert strips["kept"].any() and not strips["kept"].all()  # kept and dropped strips
    assert "The web was not searched" in texts(how.caption)
    assert [m.label for m in how.metric][:1] == ["LLM calls"]

    assert sources.label == "Sources (1)"  # only [1] is cited
    assert "manual\\.pdf · page 1" in texts(sources.markdown)
    assert "two processor cores" in sources.text[0].value
    # The page with the passage highlighted: a close-up, and the whole page behind a popover.
    assert len(sources.image) == 2


@pytest.mark.parametrize(
    ("scores", "badge"),
    [
        ([0.9, -0.9], ":green-badge[:material/check_circle: Correct]"),
        ([0.2, -0.1], ":orange-badge[:material/help: Ambiguous]"),
        ([-0.9, -0.95], ":red-badge[:material/cancel: Incorrect]"),
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


def test_history_survives_reruns_and_new_chat_clears_it(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    use_pipeline(monkeypatch, [0.9])
    at = ask(app(), "How many cores does the widget need?")
    at = ask(at, "And how much memory does the widget need?")
    at.run()  # a rerun replays the history, trace and badge included
    assert [m.name for m in at.chat_message] == ["user", "assistant"] * 2
    assert [m.text[0].value for m in at.chat_message if m.name == "user"] == [
        "How many cores does the widget need?",
        "And how much memory does the widget need?",
    ]
    assert len(badges(at)) == 2
    assert at.session_state.messages[1]["answer"].text == ANSWER

    at.button(key="new_chat").click().run()
    assert len(at.chat_message) == 0 and at.session_state.messages == []


def test_answer_settings_reach_the_pipeline(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    built = use_pipeline(monkeypatch, [0.3])
    at = app()
    at.slider(key="set_top_k").set_value(1).run()
    at.slider(key="set_thresholds").set_value((-0.4, 0.25)).run()
    at.toggle(key="set_web").set_value(False).run()
    at.selectbox(key="set_evaluator").set_value("similarity").run()
    at = ask(at)
    assert badges(at) == [":green-badge[:material/check_circle: Correct]"]  # 0.3 >= the new upper 0.25
    trace = at.session_state.messages[-1]["answer"].trace
    assert len(trace.retrieved) == 1
    assert len(built) == 1, "answer settings are options of a question: the pipeline is not rebuilt"


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
    assert evil in sources.text[0].value  # shown as text, exactly


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
    at.run()
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

    at.button(key="pull-chat").click().run()
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
    messages = at.session_state.messages
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[1]["content"] == "Partial" and not messages[1]["answer"].complete
    at.run()
    assert "server went away" in at.chat_message[1].error[0].value  # replayed with the history
    assert badges(at)  # the trace of the stopped answer is still there


def test_an_error_before_the_answer_keeps_the_history(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    class NeedsRebuild(fakes.FakeRetriever):
        def retrieve(self, question, k, mode="hybrid"):
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


# ---------------------------------------------------------------------------------------------
# Uploads


def test_upload_saves_pdfs_and_refuses_bad_files(monkeypatch: pytest.MonkeyPatch, files: Path, tmp_path: Path) -> None:
    use_pipeline(monkeypatch, [0.9])
    pdf = manual_pdf(tmp_path / "source.pdf").read_bytes()
    at = app()
    at.sidebar.file_uploader[0].set_value(
        [
            ("../../My manual.pdf", pdf, "application/pdf"),
            ("fake.pdf", b"GIF89a not a pdf", "application/pdf"),
            ("copy.pdf", pdf, "application/pdf"),
        ]
    ).run()
    assert not at.exception
    assert sorted(p.name for p in files.iterdir()) == ["My manual.pdf"]
    assert "Added **My manual\\.pdf**" in texts(at.sidebar.success)
    assert "not a PDF" in texts(at.sidebar.error)
    assert "already in the knowledge base folder" in texts(at.sidebar.info)
    # The saved file is waiting for a rebuild, and the uploader is empty again.
    assert "1 new file in the folder" in texts(at.sidebar.info)
    assert not at.sidebar.file_uploader[0].value


def test_ollama_health_is_asked_once_per_interval(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    use_pipeline(monkeypatch, [0.9])
    asked = []
    monkeypatch.setattr(
        crag.models, "ollama_health", lambda url: asked.append(url) or OllamaHealth(url, False, error="refused")
    )
    at = app()
    at.run()
    assert len(asked) == 1
    at.button(key="check_models").click().run()
    assert len(asked) == 2


def test_an_interrupted_answer_keeps_what_was_said(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    """The stop button (or any click during the stream) ends the run inside the stream."""
    from streamlit.runtime.scriptrunner_utils.exceptions import StopException

    class Interrupted(fakes.ScriptedModel):
        async def _stream(self, messages, info):
            self._record(messages, info)
            yield "The widget needs "
            raise StopException()

    def from_settings(cls, settings):
        return fakes.pipeline(settings, CHUNKS, [0.9, 0.1], model=Interrupted())

    monkeypatch.setattr(Pipeline, "from_settings", classmethod(from_settings))
    at = ask(app())
    at.run()
    assert not at.exception
    messages = at.session_state.messages
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[1]["content"].startswith("The widget needs")
    assert "Stopped before the end" in at.chat_message[1].error[0].value


def test_the_highlight_follows_the_chunks_that_were_used() -> None:
    from crag.types import ScoredChunk, Source, Strip, Trace
    from ui.answer import passage_boxes

    used = fakes.chunk("The widget needs two cores.\n\nIt also needs a fan.", n=0)
    other = fakes.chunk("Unrelated text on the same page.", n=1)
    other = type(other)(**{**other.__dict__, "bboxes": ((1, 0, 500, 100, 520),)})
    strips = (
        Strip("The widget needs two cores. It also needs a fan.", 0.8, True, "local", "manual.pdf", (1,)),
        Strip("Unrelated text on the same page.", -0.5, False, "local", "manual.pdf", (1,)),
    )
    trace = Trace("q", "q", retrieved=(ScoredChunk(used, 0.9), ScoredChunk(other, 0.1)), strips=strips)
    # The pipeline took the boxes of the last chunk on that page; the trace knows better.
    source = Source(1, "local", strips[0].text, file="manual.pdf", pages=(1,), bboxes=other.bboxes)
    assert passage_boxes(source, trace) == used.bboxes
    assert passage_boxes(source, None) == other.bboxes
