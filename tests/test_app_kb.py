"""The Streamlit page's knowledge base: the empty state, rebuilds with progress, uploads."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import crag.ingest
import crag.jobs
import crag.models
import crag.retriever
from crag.ingest import SyncReport
from crag.models import OllamaHealth
from crag.pipeline import Pipeline
from crag.store import BuildInProgress
from crag.types import FileResult, Progress
from tests import fakes
from tests.apptest import (
    CHUNKS,
    THREE_SENTENCES,
    app,
    ask,
    badges,
    click_while_running,
    file_statuses,
    loaded,
    plain,
    saved,
    settle,
    texts,
    use_pipeline,
)
from tests.pdfs import manual_pdf

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
    assert file_statuses(at) == {"dropped by hand.pdf": "🆕 not indexed yet"}
    settle(at.button(key="build_now_main").click().run())
    assert not at.exception
    assert calls == [False]  # the same incremental build as the sidebar's button


# ---------------------------------------------------------------------------------------------
# Rebuild


class Gate:
    """A sync that stops at its n-th progress step (or the first that ``pause_at`` accepts) until the test lets it
    go: a build caught running."""

    def __init__(self, sync, pause_at: int | Callable[[Progress], bool]) -> None:
        self.sync, self.pause_at = sync, pause_at
        self.paused, self.go = threading.Event(), threading.Event()

    def __call__(self, settings, embedder, *, rebuild=False, on_progress=None):
        steps = []

        def report(p: Progress) -> None:
            steps.append(p)
            on_progress(p)
            here = self.pause_at(p) if callable(self.pause_at) else len(steps) == self.pause_at
            if here and not self.paused.is_set():
                self.paused.set()
                assert self.go.wait(30)

        return self.sync(settings, embedder, rebuild=rebuild, on_progress=report)


def fake_sync(calls: list, clock: list[float] | None = None):
    """A build of two files: one indexed, one failed. It reports progress as the real one does; with ``clock``, it sets
    the time of each step there (for the build's pace, ``crag.jobs.monotonic``): ten minutes to read two thirds of the
    second file."""

    def sync(settings, embedder, *, rebuild=False, on_progress=None):
        calls.append({"rebuild": rebuild, "embedder": embedder.name})
        good = dict(file="good.pdf", file_index=2, file_count=2, pages_total=30)
        first = dict(pages_read=2, pages_chunked=2, passages=8)
        read = dict(pages_read=20, pages_chunked=20, passages=80, embedded=80, embed_seconds=100.0)
        done = dict(pages_read=30, pages_chunked=30, passages=120, embedded=120, embed_seconds=300.0)
        for t, p in [
            (0, Progress(stage="scanning")),
            (0, Progress(stage="parsing", file="bad.pdf", file_index=1, file_count=2, pages_total=32)),
            (5, Progress(stage="parsing", **good)),
            (60, Progress(stage="parsing", page=2, page_count=30, **good, **first)),
            (600, Progress(stage="parsing", page=20, page_count=30, **good, **read)),
            (1100, Progress(stage="parsing", page=30, page_count=30, **good, **dict(done, embedded=80))),
            (1200, Progress(stage="embedding", page=80, page_count=120, **good, **dict(done, embedded=80))),
            (1300, Progress(stage="writing", file_count=2, **done)),
            (1305, Progress(stage="done")),
        ]:
            if clock is not None:
                clock[0] = t
            on_progress(p)
        return SyncReport(
            files=[
                FileResult(
                    file="bad.pdf",
                    status="failed",
                    error="bad.pdf: not a PDF (no PDF header). Convert it to PDF first.",
                ),
                FileResult(file="good.pdf", status="indexed", pages=3, chunks=4, seconds=0.4),
            ],
            total_chunks=4,
            seconds=1.2,
        )

    return sync


def test_a_rebuild_runs_in_the_background_with_live_progress_while_questions_are_answered(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    use_pipeline(monkeypatch, [0.9])
    calls: list = []
    clock = [0.0]
    gate = Gate(fake_sync(calls, clock), pause_at=5)
    monkeypatch.setattr(crag.ingest, "sync", gate)
    monkeypatch.setattr(crag.jobs, "monotonic", lambda: clock[0])
    manual_pdf(files / "waiting.pdf")
    at = app()
    assert "1 new file in the folder" in texts(at.sidebar.info)
    at.button(key="rebuild").click().run()
    assert gate.paused.wait(30)
    at.run()  # a rerun (a click, a reload) leaves the build alone and shows where it is
    assert not at.exception
    assert calls == [{"rebuild": False, "embedder": "fake:hash"}]  # incremental, with the pipeline's embedder
    [bar] = at.sidebar.get("progress")
    # From the first pages read (at 60 s) on: 18 pages in 540 s, 100 s of it embedding 80 passages, so 24.4 s a page
    # and 1.25 s a passage; 10 pages and 40 passages left: 294 s
    assert bar.proto.text == "Reading **good\\.pdf** · file 2/2 · page 20/30 · about 5 min left"
    assert bar.proto.value == 67, "the bar: the time spent, of the time it takes"
    assert at.button(key="rebuild").disabled and at.button(key="cancel_build")
    assert at.selectbox(key="remove_file").disabled and at.button(key="remove").disabled  # the build reads them
    # Nothing indexed yet: the page says a build runs, rather than "files waiting" with a button to build them
    assert "Your knowledge base is being built" in texts(at.main.markdown)
    assert "waiting to be indexed" not in texts(at.main.caption)
    assert not [b for b in at.button if b.key == "build_now_main"]
    assert "new file" not in texts(at.sidebar.info)

    at = ask(at)  # the current knowledge base keeps answering
    assert [m.name for m in at.chat_message] == ["user", "assistant"] and badges(at)

    gate.go.set()
    at = settle(at)
    assert "1 indexed · 1 failed · 4 passages" in texts(at.sidebar.warning)
    assert "Not indexed: bad\\.pdf" in texts(at.sidebar.warning)


def test_a_running_build_shows_its_progress_at_the_top_of_the_sidebar(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    """Under the Files list and the upload, the progress was below the fold: it is above the chats while it runs,
    and says the time left only once it has a pace to estimate from."""
    use_pipeline(monkeypatch, [0.9])
    gate = Gate(fake_sync([]), pause_at=2)  # reading the first file, no page of it read yet
    monkeypatch.setattr(crag.ingest, "sync", gate)
    at = ask(app())  # a chat listed in the sidebar
    at.button(key="rebuild").click().run()
    assert gate.paused.wait(30)
    at.run()
    order = [node for node in at.sidebar if node.type in ("progress", "button")]
    assert order[0].type == "progress" and order[1].key == "cancel_build", [n.type for n in order]
    assert [b.key for b in order[2:4]] == ["new_chat", f"chat-{at.query_params['chat']}"]
    assert order[0].proto.text == "Reading **bad\\.pdf** · file 1/2", "nothing read yet: no time left to say"
    assert "Updating the knowledge base" in texts(at.sidebar.markdown)
    gate.go.set()
    at = settle(at)
    assert not at.sidebar.get("progress") and "1 indexed · 1 failed" in texts(at.sidebar.warning)


WAITS = "An answer is being written: a build you start now begins when it ends."


def test_while_an_answer_is_written_the_rebuild_button_says_when_a_build_would_start(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    """The page cannot answer a click while it writes an answer (26 to 40 s offline): what a click does is said
    beforehand, beside the button, and only then."""
    use_pipeline(monkeypatch, [0.9])
    at = app()
    assert WAITS not in plain(texts(at.sidebar.caption))
    at = ask(at)  # the run that writes the answer draws the sidebar first
    assert WAITS in plain(texts(at.sidebar.caption))
    at.run()  # the next run (a click, a reload) writes no answer
    assert WAITS not in plain(texts(at.sidebar.caption))


def test_a_rebuild_started_while_an_answer_is_written_lets_the_answer_end(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    """The build runs in the background and the old index answers meanwhile: its button must not cut the answer."""
    import ui.chat

    use_pipeline(monkeypatch, [0.9], answer=THREE_SENTENCES)
    calls: list = []
    monkeypatch.setattr(crag.ingest, "sync", fake_sync(calls))
    streamed, clicks = ui.chat.saving, []

    def clicked_rebuild(stream, store, reply):
        for delta in streamed(stream, store, reply):
            yield delta
            if delta and not clicks:  # a sentence into the answer, the user clicks Rebuild in the sidebar
                clicks.append(reply)
                click_while_running("rebuild", fragment="rebuild_controls")

    monkeypatch.setattr(ui.chat, "saving", clicked_rebuild)
    at = app()
    assert WAITS not in texts(at.sidebar.caption), "no answer is being written"
    at = ask(at)
    assert not at.exception and clicks
    # The click's run (the page redrawn once the build started) shows the answer written on after the click, whole,
    # and nothing says it stopped.
    answer = at.chat_message[1]
    assert "eight hundred megabytes of memory [1]." in answer.markdown[0].value
    assert not answer.error and not answer.info and badges(at)
    [message] = [m for m in saved(files) if m.role == "assistant"]
    assert message.complete and not message.error and message.content == message.answer.text
    at = settle(at)
    assert calls == [{"rebuild": False, "embedder": "fake:hash"}], "the click started the build"
    assert "1 indexed · 1 failed" in texts(at.sidebar.warning)


def test_the_files_list_follows_a_build_and_says_which_pages_were_read_with_ocr(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    """The real sync (PyMuPDF, OCR with a fake engine, chunking, Chroma, BM25), caught reading the second file."""
    from tests.test_ocr import FakeEngine, scans, use_engine

    use_pipeline(monkeypatch, [0.9])
    use_engine(monkeypatch, FakeEngine(fail=[2]))  # page 2 of the scan cannot be read
    scans(files / "a scan.pdf", pages=3)
    manual_pdf(files / "b manual.pdf", pages=3)
    gate = Gate(crag.ingest.sync, pause_at=lambda p: (p.file, p.stage, p.page) == ("b manual.pdf", "parsing", 2))
    monkeypatch.setattr(crag.ingest, "sync", gate)
    at = app()
    assert file_statuses(at) == {"a scan.pdf": "🆕 not indexed yet", "b manual.pdf": "🆕 not indexed yet"}
    assert "None" not in texts(at.sidebar.caption) + texts(at.sidebar.markdown)
    at.button(key="rebuild").click().run()
    assert gate.paused.wait(60)
    at.run()  # the list's own look, every second in the browser
    assert file_statuses(at) == {
        "a scan.pdf": "✅ read: in use when the build ends",  # done, while the build goes on
        "b manual.pdf": "⏳ being read",  # its page is on the progress bar: one counter
    }
    gate.go.set()
    at = settle(at)
    assert file_statuses(at) == {"a scan.pdf": "✅ indexed", "b manual.pdf": "✅ indexed"}
    details = plain(texts(at.sidebar.caption))
    # Whole, under the file's name: what was read with OCR, and the page that could not be, in a narrow sidebar too.
    assert "3 pages, 2 read with OCR · " in details
    assert "page 2: OCR failed (onnxruntime: bad allocation); skipped" in details
    assert "3 pages · " in details and "None" not in details


def test_a_full_rebuild_lists_the_files_it_has_not_read_again_as_waiting(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    """A full rebuild reads every file anew: until it reaches one, the file is not "indexed" by this build."""
    use_pipeline(monkeypatch, [0.9])
    monkeypatch.setattr(crag.retriever, "index_embedder", lambda s, rebuild: fakes.HashEmbedder())
    manual_pdf(files / "a manual.pdf")
    manual_pdf(files / "b manual.pdf")
    at = settle(app().button(key="rebuild").click().run())
    assert file_statuses(at) == {"a manual.pdf": "✅ indexed", "b manual.pdf": "✅ indexed"}
    gate = Gate(crag.ingest.sync, pause_at=lambda p: (p.file, p.stage, p.page) == ("a manual.pdf", "parsing", 1))
    monkeypatch.setattr(crag.ingest, "sync", gate)
    at.toggle(key="full_rebuild").set_value(True).run()
    at.button(key="rebuild").click().run()
    assert gate.paused.wait(60)
    at.run()
    assert file_statuses(at) == {
        "a manual.pdf": "⏳ being read",
        "b manual.pdf": "🕒 waiting to be read again",
    }
    gate.go.set()
    at = settle(at)
    assert file_statuses(at) == {"a manual.pdf": "✅ indexed", "b manual.pdf": "✅ indexed"}


def test_a_build_can_be_cancelled_and_the_old_index_stays(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    use_pipeline(monkeypatch, [0.9])
    gate = Gate(fake_sync([]), pause_at=2)
    monkeypatch.setattr(crag.ingest, "sync", gate)
    at = app()
    at.button(key="rebuild").click().run()
    assert gate.paused.wait(30)
    at.run().button(key="cancel_build").click().run()
    gate.go.set()
    at = settle(at)
    assert "cancelled" in texts(at.sidebar.info) and "previous knowledge base still answers" in texts(at.sidebar.info)
    assert not at.button(key="rebuild").disabled


def test_two_sessions_share_one_build(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    """A second browser (or a reload) sees the build the first started, and cannot start another."""
    use_pipeline(monkeypatch, [0.9])
    gate = Gate(fake_sync([]), pause_at=3)
    monkeypatch.setattr(crag.ingest, "sync", gate)
    first = app()
    first.button(key="rebuild").click().run()
    assert gate.paused.wait(30)
    second = app()
    assert second.button(key="rebuild").disabled and second.button(key="cancel_build")
    gate.go.set()
    assert "1 indexed · 1 failed" in texts(settle(second).sidebar.warning)


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
    settle(at.button(key="rebuild").click().run())
    assert calls[0]["rebuild"] is True and chosen == [True]
    assert "Rebuilt from scratch" in texts(at.sidebar.warning)
    # A full rebuild is a one-off: left on, the toggle would make the next click read everything again.
    assert at.toggle(key="full_rebuild").value is False
    settle(at.button(key="rebuild").click().run())
    assert [c["rebuild"] for c in calls] == [True, False]


def test_a_failed_build_shows_the_fix_and_keeps_the_chat(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    use_pipeline(monkeypatch, [0.9])

    def busy(*args, **kwargs):
        raise BuildInProgress("A knowledge-base build is already running (pid 42): wait for it to finish.")

    monkeypatch.setattr(crag.ingest, "sync", busy)
    at = ask(app())
    settle(at.button(key="rebuild").click().run())
    assert not at.exception
    assert "wait for it to finish" in texts(at.sidebar.error)
    assert [m.name for m in at.chat_message] == ["user", "assistant"]


def test_a_crash_inside_the_build_is_an_error_not_a_traceback(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    use_pipeline(monkeypatch, [0.9])

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(crag.ingest, "sync", broken)
    at = app()
    settle(at.button(key="rebuild").click().run())
    assert not at.exception
    error = texts(at.sidebar.error)
    assert "disk on fire" in error and "previous knowledge base still answers" in error


def test_a_real_build_lists_a_failed_file_with_its_reason(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    """The real sync (PyMuPDF, chunking, Chroma, BM25) with the fake pipeline's hash embedder."""
    use_pipeline(monkeypatch, [0.9])
    manual_pdf(files / "manual.pdf")
    (files / "broken.pdf").write_bytes(b"this is not a PDF at all")
    at = app()
    settle(at.button(key="rebuild").click().run())
    assert not at.exception
    status = plain(texts(at.sidebar.caption))
    assert "fake:hash" in status and "pymupdf" in status  # embeddings and parser of the new index
    assert [m.value for m in at.sidebar.metric] == ["1", str(at.sidebar.metric[1].value)]
    assert file_statuses(at) == {"broken.pdf": "❌ failed", "manual.pdf": "✅ indexed"}
    # Why it failed is said once, under its name in the Files list; the build's summary names it.
    [why] = [e.value for e in at.sidebar.error if "not a PDF" in e.value]
    assert "broken\\.pdf" in why
    assert "Not indexed: broken\\.pdf. The Files list says why." in texts(at.sidebar.warning)
    assert "Your knowledge base is empty" not in texts(at.main.markdown)
    assert "no longer in the folder" not in texts(at.sidebar.warning)
    (files / "broken.pdf").unlink()  # it was never indexed: nothing to warn about
    assert "no longer in the folder" not in texts(app().sidebar.warning)
    # A PDF deleted from Files/ is counted and quoted until a rebuild: the sidebar says so at once.
    (files / "manual.pdf").unlink()
    at = app()
    assert file_statuses(at)["manual.pdf"] == "⚠️ no longer in the folder"
    assert "1 indexed file is no longer in the folder: answers may still quote it until you rebuild." in texts(
        at.sidebar.warning
    )


def test_a_file_removed_in_the_app_is_moved_aside_and_the_next_build_drops_it(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    use_pipeline(monkeypatch, [0.9])
    manual_pdf(files / "manual.pdf")
    manual_pdf(files / "other.pdf", topic="gadget")
    at = settle(app().button(key="rebuild").click().run())
    assert at.selectbox(key="remove_file").options == ["manual.pdf", "other.pdf"]
    at.selectbox(key="remove_file").select("manual.pdf").run()
    at.button(key="remove").click().run()
    assert not at.exception
    assert (files / ".removed" / "manual.pdf").is_file() and not (files / "manual.pdf").exists()  # not deleted
    assert "Moved **manual\\.pdf**" in texts(at.sidebar.success)
    assert file_statuses(at)["manual.pdf"] == "⚠️ no longer in the folder"
    assert "answers may still quote it until you rebuild" in texts(at.sidebar.warning)
    assert at.selectbox(key="remove_file").options == ["other.pdf"]
    at = settle(at.button(key="rebuild").click().run())
    assert file_statuses(at) == {"other.pdf": "✅ indexed"}
    assert "Moved" not in texts(at.sidebar.success)
    assert "no longer in the folder" not in texts(at.sidebar.warning)


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
    loaded(at.button(key="check_models").click().run())
    assert len(asked) == 2


def test_an_interrupted_answer_keeps_what_was_said(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    """The stop button (or any click during the stream) ends the run inside the stream."""
    from streamlit.runtime.scriptrunner_utils.exceptions import StopException

    class Interrupted(fakes.ScriptedModel):
        async def _stream(self, messages, info):
            self._record(messages, info)
            yield "The widget needs two processor cores. It also "  # a sentence shows once whole
            raise StopException()

    def from_settings(cls, settings):
        return fakes.pipeline(settings, CHUNKS, [0.9, 0.1], model=Interrupted())

    monkeypatch.setattr(Pipeline, "from_settings", classmethod(from_settings))
    at = ask(app())
    at.run()
    assert not at.exception
    messages = saved(files)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[1].content == "The widget needs two processor cores [1]." and not messages[1].complete
    assert "stopped before its end" in at.chat_message[1].error[0].value


def test_the_highlight_follows_the_chunks_that_were_used() -> None:
    from crag.types import ScoredChunk, Source, Strip, Trace
    from ui.sources import passage_boxes

    used = fakes.chunk("The widget needs two cores.\n\nIt also needs a fan.", n=0)
    other = fakes.chunk("Unrelated text on the same page.", n=1)
    other = type(other)(**{**other.__dict__, "bboxes": ((1, 0, 500, 100, 520),)})
    strips = (
        Strip(
            text="The widget needs two cores. It also needs a fan.",
            score=0.8,
            kept=True,
            kind="local",
            file="manual.pdf",
            pages=(1,),
        ),
        Strip(
            text="Unrelated text on the same page.", score=-0.5, kept=False, kind="local", file="manual.pdf", pages=(1,)
        ),
    )
    trace = Trace(
        question="q",
        standalone_question="q",
        retrieved=(ScoredChunk(chunk=used, score=0.9), ScoredChunk(chunk=other, score=0.1)),
        strips=strips,
    )
    # The pipeline took the boxes of the last chunk on that page; the trace knows better.
    source = Source(n=1, kind="local", text=strips[0].text, file="manual.pdf", pages=(1,), bboxes=other.bboxes)
    assert passage_boxes(source, trace) == used.bboxes
    assert passage_boxes(source, None) == other.bboxes
