"""A watched files folder in a real browser: `streamlit run app.py` on loopback, driven by Debian's Chromium.

The page is open on an empty knowledge base; a PDF is copied into the files folder, as a user drops one there. With
no click, the sidebar shows it waiting, then being read, then indexed, and a question answers from it; then it is
deleted from the folder, and the sidebar says it was removed. Screenshots go to test-output/ (``watch-*.png``).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from crag.bench.appbuild import streamlit_app
from tests.pdfs import manual_pdf

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "test-output"
CHROMIUM = shutil.which("chromium")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed (make test installs it as root)"),
]


@pytest.fixture
def watched_url(closed_port_url: str, tmp_path: Path):
    (tmp_path / "Files").mkdir()
    crag_env = {
        "CRAG_OLLAMA_URL": closed_port_url,
        "CRAG_FILES_DIR": str(tmp_path / "Files"),
        "CRAG_CHROMA_DIR": str(tmp_path / "chroma_db"),
        "CRAG_WEB_SEARCH": "off",
        "CRAG_WATCH": "on",
        "CRAG_WATCH_QUIET": "2",
    }
    log_path = tmp_path / "streamlit.log"
    try:
        with log_path.open("w") as log, contextlib.ExitStack() as running:
            try:
                url = running.enter_context(streamlit_app(ROOT, Path(sys.executable), crag_env, log))
            except RuntimeError as exc:
                pytest.fail(f"{exc}: {log_path.read_text()}")
            yield url
    finally:
        OUTPUT.mkdir(exist_ok=True)
        shutil.copy(log_path, OUTPUT / "browser-watch-streamlit.log")


def test_a_pdf_dropped_into_the_folder_is_indexed_without_a_click_and_answers(watched_url: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    OUTPUT.mkdir(exist_ok=True)
    pdf = manual_pdf(tmp_path / "widget manual.pdf", topic="widget", pages=16)  # long enough to be seen being read
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(watched_url)
        main = page.get_by_test_id("stMainBlockContainer")
        sidebar = page.get_by_test_id("stSidebar")
        chat = page.get_by_test_id("stChatInputTextArea")
        expect(main).to_contain_text("Your knowledge base is empty", timeout=120_000)
        expect(main).to_contain_text("They are indexed by themselves")
        expect(sidebar).to_contain_text("is watched: changes are synced by themselves", timeout=60_000)
        expect(sidebar).to_contain_text("embedded", timeout=120_000)  # the models are loaded

        shutil.copy(pdf, tmp_path / "Files" / pdf.name)  # dropped into Files/ while the page is open
        expect(sidebar).to_contain_text("waiting to be read", timeout=30_000)
        page.screenshot(path=str(OUTPUT / "watch-1-waiting.png"))
        expect(sidebar).to_contain_text("being read", timeout=60_000)
        page.screenshot(path=str(OUTPUT / "watch-2-being-read.png"))
        expect(sidebar).to_contain_text("✅ indexed", timeout=300_000)
        expect(sidebar).to_contain_text("in step with the index", timeout=60_000)
        expect(main).not_to_contain_text("Your knowledge base is empty")
        page.screenshot(path=str(OUTPUT / "watch-3-indexed.png"))

        chat.fill("How many processor cores does the widget need?")
        chat.press("Enter")
        messages = page.get_by_test_id("stChatMessage")
        expect(messages).to_have_count(2, timeout=60_000)
        answer = messages.nth(1)
        expect(answer).to_contain_text("no model wrote this", timeout=300_000)
        assert "It needs two processor cores" in answer.inner_text()
        answer.get_by_text("Sources (").click()
        expect(answer).to_contain_text("widget manual.pdf")
        page.screenshot(path=str(OUTPUT / "watch-4-answer.png"), full_page=True)

        # The knowledge base as one file: the download is made when clicked, and is an archive that lists the PDF.
        sidebar.get_by_text("Export or import").click()
        with page.expect_download(timeout=120_000) as download:
            sidebar.get_by_role("button", name="Download the knowledge base").click()
        saved = tmp_path / "downloaded.crag"
        download.value.save_as(saved)
        with zipfile.ZipFile(saved) as archive:
            listed = json.loads(archive.read("crag-archive.json"))
        assert listed["generation"]["files"] == 1 and listed["generation"]["embedder"] == "local:use-multilingual-v3"

        (tmp_path / "Files" / pdf.name).unlink()
        expect(sidebar).to_contain_text("🗑️ removed", timeout=60_000)
        page.screenshot(path=str(OUTPUT / "watch-5-removed.png"))
        browser.close()
