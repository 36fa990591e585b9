"""The page with a watched files folder: a PDF dropped into the folder shows as waiting, then indexed, without a click;
a removed one as removed; a link no build can read as failed, with why; and the download and upload of a knowledge
base. AppTest on app.py with the real watcher and the real build (the hashing embedder: no model loads)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import crag.retriever
from tests import fakes
from tests.apptest import app, file_statuses, plain, texts, use_pipeline
from tests.pdfs import manual_pdf
from ui import state


@pytest.fixture
def watched_app(files: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AppTest]:
    monkeypatch.setenv("CRAG_WATCH", "on")
    monkeypatch.setenv("CRAG_WATCH_QUIET", "2")  # long enough for a rerun to see a file wait
    monkeypatch.setattr(crag.retriever, "index_embedder", lambda s, rebuild: fakes.HashEmbedder())
    use_pipeline(monkeypatch, [0.9])
    at = app()
    try:
        yield at
    finally:
        settings = state.load_base_settings()
        watcher = state.watcher(settings)
        if watcher is not None:  # the process's watcher outlives the page: stopped with the test
            watcher.stop()
        deadline = time.monotonic() + 60
        while state.builds(settings).running and time.monotonic() < deadline:
            time.sleep(0.05)


def until(at: AppTest, check, timeout: float = 60) -> AppTest:
    """Rerun the page until ``check(at)`` holds: a browser's fragment looks every second; a rerun is that look."""
    deadline = time.monotonic() + timeout
    while not check(at):
        if time.monotonic() > deadline:
            raise AssertionError(f"the page did not get there in {timeout} s: {file_statuses(at)}")
        time.sleep(0.1)
        at.run()
    return at


def test_a_pdf_dropped_into_the_watched_folder_waits_then_is_indexed_without_a_click(
    watched_app: AppTest, files: Path, tmp_path: Path
) -> None:
    at = watched_app
    assert "is watched: changes are synced by themselves" in texts(at.sidebar.caption)
    shutil.copy(manual_pdf(tmp_path / "widget.pdf", topic="widget"), files / "widget.pdf")
    until(at, lambda at: file_statuses(at).get("widget.pdf") == "🕒 waiting to be read")  # the quiet period: 2 s
    until(at, lambda at: file_statuses(at).get("widget.pdf") == "✅ indexed")
    assert "in step with the index" in texts(at.sidebar.caption)
    assert "Rebuild knowledge base" in [b.label for b in at.sidebar.button]  # the button stays
    (files / "widget.pdf").unlink()
    until(at, lambda at: file_statuses(at).get("widget.pdf") == "🗑️ removed")


def test_a_sync_that_ends_while_the_page_is_drawn_redraws_it(
    watched_app: AppTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Files list read the watcher before the sync ended: the page must know it is behind, or the list stays
    without the file the sync removed until something else moves."""
    from ui import watching

    listed, drawn = watching.listed, []

    def sync_ends_meanwhile(settings, files):
        shown = listed(settings, files)
        drawn.append(state.watcher(settings).state.version)
        if len(drawn) == 1:
            state.watcher(settings)._set()  # the state moves once, after the list read it (a sync ends)
        return shown

    monkeypatch.setattr(watching, "listed", sync_ends_meanwhile)
    watched_app.run()
    assert len(drawn) >= 2 and drawn[-1] == drawn[0] + 1, "drawn again, with the state the sync left"


def test_a_link_that_loops_is_listed_as_failed_with_why(watched_app: AppTest, files: Path) -> None:
    os.symlink("loop.pdf", files / "loop.pdf")
    at = until(watched_app, lambda at: file_statuses(at).get("loop.pdf") == "❌ failed")
    assert "loops back on itself" in texts(at.sidebar.error)


def exported_kb(root: Path, with_files: bool = False) -> Path:
    """An archive of a knowledge base built elsewhere, of one manual, with the hashing embedder."""
    from crag.archive import export_archive
    from crag.config import load_settings
    from crag.ingest import sync

    (root / "Files").mkdir(parents=True)
    manual_pdf(root / "Files" / "gadget.pdf", topic="gadget")
    settings = load_settings(files_dir=root / "Files", chroma_dir=root / "db", parser="pymupdf")
    sync(settings, fakes.HashEmbedder())
    return export_archive(settings, root / "gadget.crag", with_files=with_files).path


def test_an_archive_uploaded_in_the_sidebar_is_checked_then_answers(
    watched_app: AppTest, files: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import crag.archive

    archive = exported_kb(tmp_path / "elsewhere")
    at = watched_app
    at.file_uploader(key="importer-0").set_value(("gadget.crag", archive.read_bytes(), "application/zip")).run()
    at = until(at, lambda at: "was not imported" in plain(texts(at.sidebar.error)))  # no one has the tests' embedder
    said = plain(texts(at.sidebar.error))
    assert "gadget.crag was not imported: it was built with fake:hash embeddings, which this installation" in said

    monkeypatch.setattr(crag.archive, "embedder_named", lambda settings, name: fakes.HashEmbedder())
    at.file_uploader(key="importer-1").set_value(("gadget.crag", archive.read_bytes(), "application/zip")).run()
    at = until(at, lambda at: "Imported **gadget.crag**" in plain(texts(at.sidebar.success)))
    assert "1 files without their PDF here" in plain(texts(at.sidebar.caption))
    until(at, lambda at: file_statuses(at).get("gadget.pdf") == "✅ indexed")  # kept by the watcher's syncs
    assert "imported without its PDF" in texts(at.sidebar.caption)
    assert any(b.label == "Download the knowledge base" for b in at.sidebar.get("download_button"))
