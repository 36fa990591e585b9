"""A watched files folder, for real: watchdog on a temporary folder, real PDFs copied, replaced, renamed and removed,
the real incremental build (the hashing embedder, so that no model loads), and questions asked of the index it
commits. No fake watcher: every change is a real file system event. Waits are on conditions, with generous limits."""

from __future__ import annotations

import importlib
import os
import shutil
import threading
from pathlib import Path

import pytest

from crag.config import load_settings
from crag.ingest.pymupdf import PyMuPDFParser
from crag.jobs import Builds, Trigger
from crag.store import open_store
from crag.watch import Waiting, Watcher, whole
from tests.pdfs import corrupt_pdf, manual_pdf, text_pdf
from tests.watching import PlainParser, Watched, cited_files, pipeline_over, wait_for, watched_settings, watching

pytestmark = pytest.mark.reliability
sync_module = importlib.import_module("crag.ingest.sync")

ZORBLAX = "How many processor cores does the zorblax need?"


def zorblax(path: Path, cores: str) -> Path:
    return text_pdf(
        path,
        [
            f"The zorblax needs {cores} processor cores to run its calibration.",
            "Calibration of the zorblax takes an hour and must not be interrupted.",
        ],
    )


def synced_files(kb: Watched) -> dict[str, str]:
    """The index's files and their statuses ("indexed" whether read by the last build or an earlier one)."""
    return {m.file: "indexed" if m.status == "unchanged" else m.status for m in open_store(kb.settings).manifest()}


def reads_of(kb: Watched, name: str) -> int:
    """How many builds read ``name`` (indexed it, or failed it)."""
    return sum(
        1
        for job in kb.synced
        if job.report
        for f in job.report.files
        if f.file == name and f.status in ("indexed", "failed")
    )


@pytest.fixture
def kb(tmp_path: Path) -> Watched:
    settings = watched_settings(tmp_path)
    manual_pdf(settings.files_dir / "widget.pdf", topic="widget")
    with watching(settings) as watched:
        watched.idle()
        yield watched


def test_a_pdf_copied_in_answers_its_new_version_changes_the_answer_and_once_deleted_nothing_cites_it(
    kb: Watched, tmp_path: Path
) -> None:
    assert synced_files(kb) == {"widget.pdf": "indexed"}  # the folder as it was when watching began: caught up
    pipeline = pipeline_over(kb.settings, kb.embedder)

    shutil.copy(zorblax(tmp_path / "v1.pdf", "two"), kb.files / "zorblax.pdf")
    wait_for(lambda: "zorblax.pdf" in synced_files(kb), 60, "zorblax.pdf to be indexed")
    first = pipeline.ask(ZORBLAX, web=False)
    assert "zorblax.pdf" in cited_files(first) and "two processor cores" in first.text

    shutil.copy(zorblax(tmp_path / "v2.pdf", "sixteen"), kb.files / "zorblax.pdf")  # replaced in place
    wait_for(lambda: "sixteen processor cores" in pipeline.ask(ZORBLAX, web=False).text, 60, "the new version")
    second = pipeline.ask(ZORBLAX, web=False)
    assert "two processor cores" not in second.text and "zorblax.pdf" in cited_files(second)

    (kb.files / "zorblax.pdf").unlink()
    wait_for(lambda: "zorblax.pdf" not in synced_files(kb), 60, "the deletion to be synced")
    gone = pipeline.ask(ZORBLAX, web=False)
    assert "zorblax.pdf" not in {s.file for s in gone.sources} and "processor cores to run" not in gone.text
    wait_for(lambda: kb.watcher.state.removed == ("zorblax.pdf",), 30, "the watcher to say it was removed")
    assert all(job.trigger is Trigger.WATCH for job in kb.synced)  # no click: the watcher started every build


def test_a_file_written_in_pieces_with_pauses_is_read_once_and_whole(kb: Watched, tmp_path: Path) -> None:
    data = manual_pdf(tmp_path / "slow.pdf", topic="slow", pages=3).read_bytes()
    cuts = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    target = kb.files / "slow.pdf"
    seen_writing = []
    for n, (start, end) in enumerate(zip(cuts, cuts[1:], strict=False)):
        with target.open("ab") as fh:  # each piece opened and closed: every pause looks like the end of a copy
            fh.write(data[start:end])
        if n < 2:  # a pause longer than the quiet period: the watcher must see that the file has no end yet
            wait_for(lambda: kb.watcher.state.waiting.get("slow.pdf") == Waiting.WRITING, 30, "the file to wait")
            seen_writing.append(n)
            threading.Event().wait(3 * kb.settings.watch_quiet)
            assert kb.watcher.state.waiting.get("slow.pdf") == Waiting.WRITING  # still not read
    wait_for(lambda: "slow.pdf" in synced_files(kb), 60, "slow.pdf to be indexed")
    kb.idle()
    assert seen_writing == [0, 1]
    assert reads_of(kb, "slow.pdf") == 1
    record = next(m for m in open_store(kb.settings).manifest() if m.file == "slow.pdf")
    assert (record.status, record.pages) == ("indexed", 3)


def test_a_burst_of_100_files_into_a_subfolder_is_one_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sync_module, "choose_parser", lambda settings, name=None: PlainParser())
    settings = watched_settings(tmp_path / "kb", watch_quiet=2.0)  # a loaded machine may pause a copy this long
    staged = tmp_path / "staged"
    staged.mkdir()
    pdfs = [
        text_pdf(staged / f"note {n:03d}.pdf", [f"Note {n} says the part number is P-{n:04d}."]) for n in range(100)
    ]
    with watching(settings) as kb:
        (kb.files / "burst").mkdir()
        for pdf in pdfs:
            shutil.copy(pdf, kb.files / "burst" / pdf.name)
        wait_for(lambda: len(synced_files(kb)) == 100, 120, "the burst to be indexed")
        kb.idle()
        assert kb.watcher.state.syncs == 1
        assert set(synced_files(kb).values()) == {"indexed"}


def test_a_rename_and_a_move_into_another_folder_embed_nothing(kb: Watched) -> None:
    manual_pdf(kb.files / "gadget.pdf", topic="gadget")
    wait_for(lambda: "gadget.pdf" in synced_files(kb), 60, "gadget.pdf to be indexed")
    kb.idle()
    embedded = kb.embedder.documents
    (kb.files / "widget.pdf").rename(kb.files / "widget manual.pdf")
    (kb.files / "projects").mkdir()
    (kb.files / "gadget.pdf").rename(kb.files / "projects" / "gadget.pdf")
    wait_for(lambda: set(synced_files(kb)) == {"widget manual.pdf", "projects/gadget.pdf"}, 60, "the moves")
    kb.idle()
    assert kb.embedder.documents == embedded  # nothing was embedded again
    moves = [n for job in kb.synced if job.report for n in job.report.notes if "was moved to" in n]
    assert any("widget.pdf was moved to widget manual.pdf" in n for n in moves), moves
    answer = pipeline_over(kb.settings, kb.embedder).ask("How many processor cores does the gadget need?", web=False)
    assert cited_files(answer) == {"projects/gadget.pdf"}


def test_hidden_and_temporary_files_are_not_synced(kb: Watched) -> None:
    for name in (".draft.pdf", "~$report.pdf", "report.pdf.crdownload", "report.pdf~", "#report.pdf#"):
        manual_pdf(kb.files / name, topic="junk")
    (kb.files / "notes.txt").write_text("not a PDF: never indexed, so no reason to sync")
    junk = [".draft.pdf", "~$report.pdf", "report.pdf.crdownload", "notes.txt", ".hidden/inside.pdf"]
    kb.watcher.saw([str(kb.files / name) for name in junk], False)
    assert not kb.watcher._dirty and kb.watcher.state.waiting == {}
    manual_pdf(kb.files / "report.pdf", topic="report")
    wait_for(lambda: "report.pdf" in synced_files(kb), 60, "report.pdf to be indexed")
    kb.idle()
    assert set(synced_files(kb)) == {"widget.pdf", "report.pdf", "notes.txt"}  # the next build lists it as skipped
    assert synced_files(kb)["notes.txt"] == "skipped"


def test_a_symlink_loop_a_broken_pdf_and_a_file_that_vanishes_while_read_each_say_so_and_the_rest_indexes(
    kb: Watched, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = PyMuPDFParser()

    class Vanishing(PyMuPDFParser):
        """PyMuPDF, except that a file named ``vanishing`` is deleted as its parse begins, as a user might."""

        def parse(self, path, pages=None, on_page=None):
            if path.stem == "vanishing":
                path.unlink()
            return real.parse(path, pages, on_page)

    monkeypatch.setattr(sync_module, "choose_parser", lambda settings, name=None: Vanishing())
    os.symlink("loop.pdf", kb.files / "loop.pdf")
    corrupt_pdf(kb.files / "broken.pdf")
    manual_pdf(kb.files / "vanishing.pdf", topic="vanishing")
    manual_pdf(kb.files / "good.pdf", topic="good")
    wait_for(lambda: "good.pdf" in synced_files(kb), 60, "good.pdf to be indexed")
    kb.idle()
    state = kb.watcher.state
    assert "loops back on itself" in state.problems["loop.pdf"]
    records = {m.file: m for m in open_store(kb.settings).manifest()}
    assert records["broken.pdf"].status == "failed" and "broken.pdf" in records["broken.pdf"].error
    assert {records["good.pdf"].status, records["widget.pdf"].status} <= {"indexed", "unchanged"}
    vanished = [f for job in kb.synced if job.report for f in job.report.files if f.file == "vanishing.pdf"]
    assert vanished[0].status == "failed" and "vanishing.pdf" in vanished[0].error
    assert "vanishing.pdf" not in records  # gone from the folder: the next sync dropped it


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its permissions")
def test_a_file_that_cannot_be_read_says_so_and_is_read_once_its_permissions_are_fixed(kb: Watched) -> None:
    locked = manual_pdf(kb.files / "locked.pdf", topic="locked")
    locked.chmod(0)
    wait_for(lambda: synced_files(kb).get("locked.pdf") == "failed", 60, "the file to fail")
    record = next(m for m in open_store(kb.settings).manifest() if m.file == "locked.pdf")
    assert "Permission denied" in record.error
    locked.chmod(0o644)  # an attribute change is an event: the file is tried again
    wait_for(lambda: synced_files(kb).get("locked.pdf") == "indexed", 60, "the file to be read")


def test_a_full_disk_fails_the_sync_with_its_reason_the_old_index_answers_and_the_next_change_syncs(
    kb: Watched, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crag.store.common import blocked_is_said
    from crag.store.generation import GenerationWriter

    real_add = GenerationWriter.add

    def full(self, chunks, embeddings):  # what a write to Chroma meets on a full disk
        with blocked_is_said(self.store.where):
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(GenerationWriter, "add", full)
    manual_pdf(kb.files / "gadget.pdf", topic="gadget")
    wait_for(lambda: "The last sync failed" in kb.watcher.state.failed, 60, "the sync to fail")
    assert "disk is full" in kb.watcher.state.failed
    assert kb.watcher.state.waiting == {"gadget.pdf": Waiting.CHANGED}  # still waiting, not lost
    assert synced_files(kb) == {"widget.pdf": "indexed"}  # the index that answered still does
    answer = pipeline_over(kb.settings, kb.embedder).ask("How many processor cores does the widget need?", web=False)
    assert cited_files(answer) == {"widget.pdf"}
    monkeypatch.setattr(GenerationWriter, "add", real_add)
    manual_pdf(kb.files / "sprocket.pdf", topic="sprocket")  # the next change: tried again at once
    wait_for(lambda: {"gadget.pdf", "sprocket.pdf"} <= set(synced_files(kb)), 60, "the sync after the fault")
    kb.idle()
    assert kb.watcher.state.failed == ""


def test_the_files_folder_renamed_away_syncs_nothing_and_is_watched_again_once_back(kb: Watched) -> None:
    syncs = kb.watcher.state.syncs
    away = kb.files.with_name("Files.moved")
    kb.files.rename(away)
    wait_for(lambda: not kb.watcher.state.watching, 30, "the watcher to see the folder go")
    assert "is not there" in kb.watcher.state.error
    manual_pdf(away / "gadget.pdf", topic="gadget")  # changes in the folder renamed away are not this index's
    away.rename(kb.files)
    wait_for(lambda: kb.watcher.state.watching and not kb.watcher.state.error, 30, "the folder to be watched again")
    kb.idle()
    assert synced_files(kb) == {"widget.pdf": "indexed", "gadget.pdf": "indexed"}  # nothing was removed meanwhile
    assert kb.watcher.state.syncs == syncs + 1  # one sync: for gadget.pdf, once the folder was back


def test_a_subfolder_moved_out_of_the_files_folder_removes_its_files_only(kb: Watched, tmp_path: Path) -> None:
    (kb.files / "projects").mkdir()
    manual_pdf(kb.files / "projects" / "gadget.pdf", topic="gadget")
    wait_for(lambda: "projects/gadget.pdf" in synced_files(kb), 60, "the subfolder to be indexed")
    (kb.files / "projects").rename(tmp_path / "projects")
    wait_for(lambda: "projects/gadget.pdf" not in synced_files(kb), 60, "the subfolder's files to be removed")
    assert synced_files(kb) == {"widget.pdf": "indexed"}


def test_an_answer_asked_during_a_sync_comes_whole_from_the_index_that_answered(
    kb: Watched, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(zorblax(tmp_path / "v1.pdf", "two"), kb.files / "zorblax.pdf")
    wait_for(lambda: "zorblax.pdf" in synced_files(kb), 60, "zorblax.pdf to be indexed")
    kb.idle()
    gate, reading = threading.Event(), threading.Event()
    real = PyMuPDFParser()

    class Held(PyMuPDFParser):
        def parse(self, path, pages=None, on_page=None):
            reading.set()
            assert gate.wait(60)
            return real.parse(path, pages, on_page)

    monkeypatch.setattr(sync_module, "choose_parser", lambda settings, name=None: Held())
    shutil.copy(zorblax(tmp_path / "v2.pdf", "sixteen"), kb.files / "zorblax.pdf")
    assert reading.wait(60)  # the sync is reading the new version now
    pipeline = pipeline_over(kb.settings, kb.embedder)
    during = pipeline.ask(ZORBLAX, web=False)
    assert during.complete and "two processor cores" in during.text
    gate.set()
    wait_for(lambda: "sixteen processor cores" in pipeline.ask(ZORBLAX, web=False).text, 60, "the new version")


def test_two_watchers_of_one_index_read_each_file_once_and_both_follow(tmp_path: Path) -> None:
    settings = watched_settings(tmp_path)
    with watching(settings) as first, watching(settings) as second:
        for topic in ("widget", "gadget", "sprocket"):
            manual_pdf(settings.files_dir / f"{topic}.pdf", topic=topic)
        wait_for(lambda: len(synced_files(first)) == 3, 120, "the three files to be indexed")
        first.idle(120)
        second.idle(120)
        reads = {name: reads_of(first, name) + reads_of(second, name) for name in ("widget.pdf", "gadget.pdf")}
        assert reads == {"widget.pdf": 1, "gadget.pdf": 1}
        for kb in (first, second):
            answer = pipeline_over(settings, kb.embedder).ask(
                "How many processor cores does the gadget need?", web=False
            )
            assert cited_files(answer) == {"gadget.pdf"}


def test_a_polled_folder_syncs_too(tmp_path: Path) -> None:
    settings = watched_settings(tmp_path, watch="poll")
    with watching(settings) as kb:
        manual_pdf(kb.files / "widget.pdf", topic="widget")
        wait_for(lambda: "widget.pdf" in synced_files(kb), 60, "the polled folder to be synced")


def test_watching_off_starts_no_watcher(tmp_path: Path) -> None:
    settings = watched_settings(tmp_path, watch="off")
    watcher = Watcher(settings, Builds(settings, lambda rebuild: None, lambda e: None)).start()
    assert watcher._thread is None and watcher.state.mode == "off" and not watcher.state.watching


def test_a_pdf_is_whole_once_its_end_is_written(tmp_path: Path) -> None:
    data = manual_pdf(tmp_path / "a.pdf").read_bytes()
    cut = tmp_path / "cut.pdf"
    cut.write_bytes(data[: len(data) // 2])
    assert whole(tmp_path / "a.pdf") and not whole(cut)


def test_a_folder_is_watched_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CRAG_WATCH", raising=False)  # the suite's default is off (conftest)
    assert load_settings().watch == "on"
    monkeypatch.setenv("CRAG_WATCH", "off")
    assert load_settings().watch == "off"


def test_the_http_api_watches_its_files_folder(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from crag.api import create_app
    from tests.apiclient import LOCAL, hash_embedder

    settings = watched_settings(tmp_path)
    app = create_app(settings, pipeline_factory=lambda s: None, embedder_factory=hash_embedder, watch=True)
    with TestClient(app, base_url=LOCAL) as client:
        manual_pdf(settings.files_dir / "widget.pdf", topic="widget")
        wait_for(lambda: client.get("/files").json()["files"], 60, "the API's index to hold the file")
        files = client.get("/files").json()["files"]
        assert [(f["file"], f["status"]) for f in files] == [("widget.pdf", "indexed")]
        wait_for(lambda: app.state.service.builds.running is None, 60, "the build to end")
    assert not app.state.watcher._thread.is_alive()  # stopped with the app


@pytest.mark.slow
@pytest.mark.integration
def test_crag_watch_prints_each_sync_and_stops_on_sigterm(tmp_path: Path, closed_port_url: str) -> None:
    import signal
    import subprocess
    import sys

    from tests.conftest import ROOT

    files = tmp_path / "Files"
    files.mkdir()
    env = {**os.environ, "CRAG_OLLAMA_URL": closed_port_url, "CRAG_WATCH": "off", "CRAG_WATCH_QUIET": "0.5"}
    command = [sys.executable, "-m", "crag", "watch", "--files", str(files), "--db", str(tmp_path / "db")]
    with subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert "Watching" in proc.stderr.readline()  # CRAG_WATCH=off does not stop the command that asks for it
            manual_pdf(files / "widget.pdf", topic="widget")
            lines = [proc.stdout.readline() for _ in range(3)]
            assert "synced" in lines[0] and "indexed  widget.pdf  2 pages" in lines[1], lines
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
        finally:
            proc.kill()


@pytest.mark.slow
def test_two_app_instances_on_one_chroma_server_one_syncs_and_both_answer(tmp_path: Path) -> None:
    from tests.chroma_server import chroma_server

    with chroma_server(tmp_path / "chroma-server") as url:
        one = watched_settings(tmp_path, chroma_url=url, chroma_dir=tmp_path / "one", build_lease_seconds=10)
        two = watched_settings(tmp_path, chroma_url=url, chroma_dir=tmp_path / "two", build_lease_seconds=10)
        with watching(one) as first, watching(two) as second:
            for topic in ("widget", "gadget"):
                manual_pdf(one.files_dir / f"{topic}.pdf", topic=topic)
            wait_for(lambda: len(synced_files(first)) == 2, 120, "the two files to be indexed")
            first.idle(120)
            second.idle(120)
            assert {name: reads_of(first, name) + reads_of(second, name) for name in ("widget.pdf", "gadget.pdf")} == {
                "widget.pdf": 1,
                "gadget.pdf": 1,
            }
            for kb in (first, second):
                answer = pipeline_over(kb.settings, kb.embedder).ask(
                    "How many processor cores does the gadget need?", web=False
                )
                assert cited_files(answer) == {"gadget.pdf"}
