"""Ratings in a real browser: `streamlit run app.py` on loopback, Debian's Chromium.

Three answers rated under them (👍, 👎 with what was wrong and a note, 👍), their folded lines with badge and rating;
the Evaluate page; more ratings imported from a file (made here: answers graded between 0.25 and 0.5 that held, shown
Ambiguous, so that the ratings support a fit); Re-run my questions; the fit applied, an answer whose expander says the
fitted thresholds answered, and the fit reverted. Screenshots go to test-output/feedback-*.png.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from crag.bench.appbuild import streamlit_app
from crag.feedback import labels_json
from tests.test_feedback import separable
from tests.test_feedback_rerun import ALPHA, BETA, two_manuals

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
def app_url(closed_port_url: str, tmp_path: Path) -> Iterator[str]:
    """The app over a built index of two small manuals (``tests.test_feedback_rerun``), the embedded backend."""
    from crag.ingest import sync
    from crag.retriever import index_embedder

    offline = two_manuals(tmp_path, closed_port_url)
    sync(offline, index_embedder(offline))
    env = {
        "CRAG_OLLAMA_URL": closed_port_url,
        "CRAG_FILES_DIR": str(offline.files_dir),
        "CRAG_CHROMA_DIR": str(offline.chroma_dir),
        "CRAG_WEB_SEARCH": "off",
    }
    log_path = tmp_path / "streamlit.log"
    try:
        with log_path.open("w") as log, contextlib.ExitStack() as running:
            try:
                yield running.enter_context(streamlit_app(ROOT, Path(sys.executable), env, log))
            except RuntimeError as exc:
                pytest.fail(f"{exc}: {log_path.read_text()}")
    finally:
        OUTPUT.mkdir(exist_ok=True)
        shutil.copy(log_path, OUTPUT / "feedback-streamlit.log")


def shot(page, name: str) -> None:
    """The whole page: the window as tall as the conversation, so that all of it shows."""
    height = page.evaluate(
        "() => Math.max(...['stAppScrollToBottomContainer', 'stMain'].map("
        "id => document.querySelector(`[data-testid=${id}]`)?.scrollHeight || 0))"
    )
    page.mouse.move(0, 0)  # no tooltip in the picture
    page.set_viewport_size({"width": 1400, "height": max(1000, height + 300)})
    page.wait_for_timeout(800)
    page.screenshot(path=str(OUTPUT / f"feedback-{name}.png"), full_page=True)
    page.set_viewport_size({"width": 1400, "height": 1000})


def ask(page, question: str, count: int):
    from playwright.sync_api import expect

    chat = page.get_by_test_id("stChatInputTextArea")
    chat.fill(question)
    chat.press("Enter")
    messages = page.get_by_test_id("stChatMessage")
    expect(messages).to_have_count(count, timeout=60_000)
    answer = messages.nth(count - 1)
    expect(answer).to_contain_text("Export as Markdown", timeout=300_000)  # the last line under it
    return answer


def thumb(answer, which: str):
    """The thumb ``up`` or ``down`` under an answer (st.feedback's radio buttons)."""
    return answer.get_by_role("radio", name=f"Thumbs {which}")


def test_rate_evaluate_rerun_apply_and_revert_in_a_real_browser(app_url: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    OUTPUT.mkdir(exist_ok=True)
    imported = tmp_path / "ratings.json"
    imported.write_text(json.dumps(labels_json(separable(30))), encoding="utf-8")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(app_url)
        main, sidebar = page.get_by_test_id("stMainBlockContainer"), page.get_by_test_id("stSidebar")
        expect(main).to_contain_text("Ready:", timeout=180_000)

        # Three answers rated: 👍, 👎 with what was wrong and a note, 👍.
        first = ask(page, ALPHA, 2)
        thumb(first, "up").click()
        expect(first).to_contain_text("Kept: 👍", timeout=30_000)
        second = ask(page, BETA, 4)
        thumb(second, "down").click()
        expect(second).to_contain_text("What was wrong?", timeout=30_000)
        second.get_by_role("button", name="The sources").click()
        expect(second).to_contain_text("wrong: the sources", timeout=30_000)
        second.get_by_label("A note (optional)").fill("The port is on page 1, first line")
        second.get_by_label("A note (optional)").press("Enter")
        expect(second).to_contain_text("The port is on page 1", timeout=30_000)
        third = ask(page, "What is the capital of Australia?", 6)
        thumb(third, "up").click()
        expect(third).to_contain_text("Kept: 👍", timeout=30_000)
        messages = page.get_by_test_id("stChatMessage")
        expect(messages.nth(1).locator("summary").first).to_contain_text("👍", timeout=30_000)  # folded: badge, rating
        expect(messages.nth(3).locator("summary").first).to_contain_text("👎")
        shot(page, "1-rated")

        # The Evaluate page: the three ratings; then more imported, which support a fit.
        sidebar.get_by_role("link", name="Evaluate your rated answers").click()
        expect(main).to_contain_text("Evaluate your answers", timeout=60_000)
        expect(main.get_by_test_id("stMetric").first).to_contain_text("3", timeout=120_000)
        expect(main).to_contain_text("2 / 1")
        expect(main).to_contain_text("more rated answers here", timeout=120_000)
        shot(page, "2-evaluate")
        main.get_by_text("Export or import ratings").click()
        main.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(str(imported))
        expect(main).to_contain_text("30 ratings imported", timeout=60_000)
        expect(main).to_contain_text("Proposed: lower", timeout=120_000)

        # Re-run my questions: each rated question asked again, the same or changed.
        main.get_by_role("button", name="Re-run my questions").click()
        expect(main).to_contain_text("Asked again at", timeout=600_000)
        shot(page, "3-rerun")

        # Apply the fit; an answer then says the fitted thresholds answered it; revert.
        main.get_by_role("button", name="Apply to this knowledge base").click()
        expect(main).to_contain_text("Applied to All documents", timeout=60_000)
        expect(main).to_contain_text("fitted to your ratings", timeout=60_000)
        shot(page, "4-applied")
        main.get_by_role("link", name="Back to the chat").click()
        answer = ask(page, ALPHA, 8)
        answer.get_by_text("How this answer was made").click()
        expect(answer).to_contain_text("fitted to your ratings", timeout=30_000)
        shot(page, "5-fitted-answer")
        sidebar.get_by_role("link", name="Evaluate your rated answers").click()
        main.get_by_role("button", name="Revert to the thresholds before").click()
        expect(main).to_contain_text("the app's thresholds answer again", timeout=60_000)
        shot(page, "6-reverted")
        browser.close()
