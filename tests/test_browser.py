"""One real-browser check: `streamlit run app.py` on loopback, driven by Debian's Chromium.

It walks the product's path once, for real: the first page, drawn while the models load (the sidebar and a
chat box that takes a question); upload an English and a Chinese PDF, rebuild the knowledge base, ask in English
and in Chinese on the embedded backend (no Ollama: it points at a closed port; no web search), check that each
answer quotes the document's sentence with its citation, open "How this answer was made" and the sources; then
rebuild from scratch while asking (the answer comes from the current index and the rebuild completes), reload
(the conversation is still there), and ask a question over the length limit (refused with the reason, its text
given back); then a written answer from the opt-in 135M model (labelled weak, and the chat box usable after it),
another stopped with its Stop button (it says so at once, and the chat box takes the next question); last, the
chat deleted in one trip (its popover, then the dialog that confirms). Screenshots go to test-output/.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import sys
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
def streamlit_url(closed_port_url: str, tmp_path: Path):
    crag_env = {
        "CRAG_OLLAMA_URL": closed_port_url,  # no Ollama: the app must fall back to the embedded model
        "CRAG_FILES_DIR": str(tmp_path / "Files"),
        "CRAG_CHROMA_DIR": str(tmp_path / "chroma_db"),
        "CRAG_WEB_SEARCH": "off",  # nothing may reach the internet
        "CRAG_WATCH": "off",  # this walk clicks Rebuild; tests/test_browser_watch.py walks a watched folder
    }
    log_path = tmp_path / "streamlit.log"
    # The shipped .streamlit/config.toml (cwd is the repo): loopback, no file watcher, no forced GC.
    try:
        with log_path.open("w") as log, contextlib.ExitStack() as running:
            try:
                url = running.enter_context(streamlit_app(ROOT, Path(sys.executable), crag_env, log))
            except RuntimeError as exc:
                pytest.fail(f"{exc}: {log_path.read_text()}")
            yield url
    finally:
        OUTPUT.mkdir(exist_ok=True)
        shutil.copy(log_path, OUTPUT / "browser-streamlit.log")


def test_upload_rebuild_ask_and_inspect_in_a_real_browser(streamlit_url: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    OUTPUT.mkdir(exist_ok=True)
    pdf = manual_pdf(tmp_path / "widget manual.pdf", topic="widget", pages=2)
    zh_pdf = manual_pdf(tmp_path / "小部件手册.pdf", topic="小部件", pages=1, chinese=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(streamlit_url)
        main = page.get_by_test_id("stMainBlockContainer")
        sidebar = page.get_by_test_id("stSidebar")

        # The first page does not wait for the models: the sidebar and the chat box come first, while they load.
        chat = page.get_by_test_id("stChatInputTextArea")
        expect(chat).to_be_enabled(timeout=120_000)
        expect(sidebar).to_contain_text("Loading the models")
        expect(sidebar.get_by_role("button", name="Rebuild knowledge base")).to_be_visible()
        page.screenshot(path=str(OUTPUT / "browser-first-page.png"))

        # The empty knowledge base says what to do, and the model status says which backend runs.
        expect(main).to_contain_text("Your knowledge base is empty", timeout=120_000)
        expect(sidebar).to_contain_text("embedded", timeout=60_000)
        expect(sidebar).to_contain_text("not reachable")
        page.screenshot(path=str(OUTPUT / "browser-empty.png"))

        # Upload: the file lands in Files/ under its own (sanitised) name.
        sidebar.get_by_test_id("stFileUploaderDropzoneInput").first.set_input_files([str(pdf), str(zh_pdf)])
        expect(sidebar).to_contain_text("Added widget manual.pdf", timeout=60_000)
        expect(sidebar).to_contain_text("Added 小部件手册.pdf", timeout=60_000)
        assert (tmp_path / "Files" / "widget manual.pdf").read_bytes() == pdf.read_bytes()

        # Rebuild: the progress bar runs, then the summary replaces it and the status shows the index.
        sidebar.get_by_role("button", name="Rebuild knowledge base").click()
        expect(sidebar).to_contain_text("2 indexed", timeout=300_000)
        expect(sidebar).to_contain_text("local:use-multilingual-v3")
        expect(main).not_to_contain_text("Your knowledge base is empty")
        page.screenshot(path=str(OUTPUT / "browser-built.png"))

        # Ask in English: the answer quotes the document's sentence with its citation; no model wrote it.
        chat.fill("How many processor cores does the widget need?")
        chat.press("Enter")
        messages = page.get_by_test_id("stChatMessage")
        expect(messages).to_have_count(2, timeout=60_000)
        answer = messages.nth(1)
        expect(answer).to_contain_text("no model wrote this", timeout=300_000)  # the caption comes last
        expect(answer.get_by_text("Correct").first).to_be_visible()
        quoted = answer.get_by_test_id("stMarkdownContainer").filter(has_text="From your documents").first.inner_text()
        assert "From your documents:" in quoted and "It needs two processor cores" in quoted, quoted
        assert "[1]" in quoted, quoted

        # How this answer was made: the scores chart, the retrieved passages, the timings.
        answer.get_by_text("How this answer was made").click()
        expect(answer).to_contain_text("Each passage was scored", timeout=30_000)
        expect(answer.get_by_test_id("stVegaLiteChart").first).to_be_visible(timeout=30_000)

        # Sources: the cited file and page, its snippet, and the page image with the passage highlighted.
        answer.get_by_text("Sources (").click()
        expect(answer).to_contain_text("widget manual.pdf")
        image = answer.get_by_test_id("stImage").first
        expect(image).to_be_visible(timeout=30_000)
        # The conversation scrolls inside the page: make the window as tall as it to photograph all of it.
        height = page.evaluate(
            "() => document.querySelector('[data-testid=stAppScrollToBottomContainer]').scrollHeight"
        )
        page.set_viewport_size({"width": 1400, "height": height + 600})
        page.mouse.wheel(0, -100_000)
        expect(image).to_be_in_viewport()
        page.wait_for_timeout(1000)  # let the chart and images settle after the resize
        page.screenshot(path=str(OUTPUT / "browser-answer.png"), full_page=True)
        page.set_viewport_size({"width": 1400, "height": 1000})

        # Ask in Chinese: a Chinese lead line, and the Chinese sentence quoted as the document has it.
        chat.fill("小部件需要几个处理器核心？")
        chat.press("Enter")
        expect(messages).to_have_count(4, timeout=60_000)
        zh_answer = messages.nth(3)
        expect(zh_answer).to_contain_text("no model wrote this", timeout=300_000)
        page.screenshot(path=str(OUTPUT / "browser-chinese.png"), full_page=True)
        quoted = zh_answer.get_by_test_id("stMarkdownContainer").filter(has_text="文档中的相关内容").first.inner_text()
        assert "文档中的相关内容" in quoted and "它需要两个处理器核心" in quoted and "[1]" in quoted, quoted

        # A full rebuild runs in the background: a question asked meanwhile is answered from the current
        # index, and the rebuild completes. A longer manual makes sure the build is still running.
        long = manual_pdf(tmp_path / "long manual.pdf", topic="gadget", pages=40)
        shutil.copy(long, tmp_path / "Files" / long.name)
        sidebar.get_by_text("Full rebuild").click()
        sidebar.get_by_role("button", name="Rebuild knowledge base").click()
        expect(sidebar.get_by_role("button", name="Cancel the build")).to_be_visible(timeout=60_000)
        chat.fill("How much memory does the widget need?")
        chat.press("Enter")
        expect(messages).to_have_count(6, timeout=60_000)
        expect(messages.nth(5)).to_contain_text("no model wrote this", timeout=300_000)
        assert "eight hundred megabytes" in messages.nth(5).inner_text()
        assert sidebar.get_by_role("button", name="Cancel the build").is_visible(), "answered during the build"
        page.screenshot(path=str(OUTPUT / "browser-during-rebuild.png"), full_page=True)
        expect(sidebar).to_contain_text("Rebuilt from scratch", timeout=300_000)
        expect(sidebar).to_contain_text("3 indexed")

        # A reload keeps the conversation (it is in the URL and in the store), with its answers' details: the
        # earlier answers folded to their first line, each drawn whole once opened.
        page.reload()
        expect(messages).to_have_count(6, timeout=120_000)
        expect(messages.nth(5)).to_contain_text("no model wrote this", timeout=60_000)
        # Folded: its badge and first line only (the badge on that line), its details drawn once opened.
        expect(messages.nth(1).locator("summary").first).to_contain_text("Correct")
        expect(messages.nth(1).get_by_text("How this answer was made")).to_have_count(0)
        messages.nth(1).locator("summary").first.click()
        expect(messages.nth(1).get_by_text("How this answer was made").first).to_be_visible(timeout=30_000)
        page.screenshot(path=str(OUTPUT / "browser-reloaded.png"), full_page=True)

        # "New chat" starts an empty conversation; the previous one stays in the sidebar.
        sidebar.get_by_role("button", name="New chat").click()
        expect(messages).to_have_count(0, timeout=30_000)
        expect(sidebar.get_by_role("button", name="How many processor cores does the widget need?")).to_be_visible()

        # A question over the limit is refused with the reason, and what was typed is back in the box to shorten.
        long = "Why does the widget need " + "so very " * 300 + "many cores?"
        chat.fill(long)
        chat.press("Enter")
        expect(main).to_contain_text("the limit is 2000", timeout=60_000)
        expect(chat).to_have_value(long)
        expect(messages).to_have_count(0)

        # The opt-in written answers: the 135M model's answer says it is weak, and the chat box takes the next
        # question once it ends: a status fragment rerunning during an answer longer than its 5 s look would leave
        # the box disabled until another click.
        sidebar.locator("summary", has_text="Answer settings").click()
        answers = sidebar.get_by_test_id("stSelectbox").filter(has_text="Answers")
        combo = answers.get_by_role("combobox")
        page.wait_for_timeout(1000)  # the expander opening: a click before it ends is lost
        combo.click()
        page.wait_for_timeout(500)
        page.keyboard.press("ArrowDown")  # opens the list
        page.get_by_role("option").filter(has_text="a model writes the answer").click()
        expect(combo).to_have_value(re.compile("^a model writes the answer"), timeout=30_000)
        # (A model writes only from passages graded relevant: the question is one the manual answers. What the 135M
        # model writes may all be cut by grounding: then the sources are quoted instead.)
        chat.fill("How many processor cores does the widget need?")
        chat.press("Enter")
        expect(messages).to_have_count(2, timeout=60_000)
        weak_or_quoted = re.compile("a weak model that may invent facts|no model wrote this")
        expect(messages.nth(1)).to_contain_text(weak_or_quoted, timeout=300_000)
        expect(chat).to_be_enabled(timeout=15_000)
        page.screenshot(path=str(OUTPUT / "browser-written.png"), full_page=True)

        # Stop: a written answer stopped as it streams says so at once, and the chat box takes the next question.
        chat.fill("How much memory does the widget need?")
        chat.press("Enter")
        expect(messages).to_have_count(4, timeout=60_000)
        stopping = messages.nth(3)
        expect(stopping).to_contain_text("Generating the answer", timeout=300_000)
        stopping.get_by_role("button", name="Stop").click()  # as it writes: said or not, the answer says it was stopped
        expect(stopping).to_contain_text("You stopped this answer", timeout=30_000)
        expect(chat).to_be_enabled()
        page.screenshot(path=str(OUTPUT / "browser-stopped.png"), full_page=True)
        chat.fill("How many processor cores does the widget need?")
        chat.press("Enter")
        expect(messages).to_have_count(6, timeout=60_000)

        # Deleting the chat takes one trip: its popover, then the dialog that names it and confirms.
        sidebar.get_by_text("Rename, export or delete this chat").click()
        page.get_by_test_id("stPopoverBody").get_by_role("button", name="Delete this chat…").click()
        dialog = page.get_by_role("dialog", name="Delete this chat?")
        expect(dialog).to_contain_text("cannot be undone", timeout=30_000)
        page.screenshot(path=str(OUTPUT / "browser-delete.png"))
        dialog.get_by_role("button", name="Delete", exact=True).click()
        expect(messages).to_have_count(0, timeout=30_000)
        expect(sidebar.get_by_role("button", name=re.compile("^Explain in detail"))).to_have_count(0)
        browser.close()
