"""One real-browser check: `streamlit run app.py` on loopback, driven by Debian's Chromium."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import free_port

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "test-output"
CHROMIUM = shutil.which("chromium")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.integration,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed (make test installs it as root)"),
]


@pytest.fixture
def streamlit_url(closed_port_url: str, tmp_path: Path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_")}
    env |= {
        "CRAG_OLLAMA_URL": closed_port_url,  # no Ollama: the app must fall back to the embedded model
        "CRAG_FILES_DIR": str(tmp_path / "Files"),
        "CRAG_CHROMA_DIR": str(tmp_path / "chroma_db"),
    }
    log = (tmp_path / "streamlit.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/_stcore/health", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail(f"streamlit did not start: {(tmp_path / 'streamlit.log').read_text()}")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_chat_in_a_real_browser(streamlit_url: str) -> None:
    from playwright.sync_api import expect, sync_playwright

    OUTPUT.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
        )
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(streamlit_url)
        chat = page.get_by_test_id("stChatInputTextArea")
        expect(chat).to_be_visible(timeout=120_000)
        expect(page.get_by_test_id("stSidebar")).to_contain_text("embedded", timeout=60_000)
        page.screenshot(path=str(OUTPUT / "browser-start.png"))

        chat.fill("What is 2+2?")
        chat.press("Enter")
        messages = page.get_by_test_id("stChatMessage")
        expect(messages).to_have_count(2, timeout=180_000)
        # The caption under an answer appears once the stream has ended.
        expect(messages.nth(1).get_by_test_id("stCaptionContainer")).to_contain_text("embedded", timeout=180_000)
        page.screenshot(path=str(OUTPUT / "browser-answer.png"), full_page=True)
        answer = messages.nth(1).get_by_test_id("stMarkdownContainer").first.inner_text()
        assert answer.strip(), "the assistant message is empty"
        browser.close()
