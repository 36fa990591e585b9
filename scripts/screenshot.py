"""Make docs/images/answer.png, the README's screenshot, from a real run of the app.

    .venv/bin/python scripts/screenshot.py [--question TEXT] [--pdf FILE ...] [--out PNG]

It starts ``streamlit run app.py`` on 127.0.0.1 as ``make run`` does (the shipped .streamlit/config.toml),
with a temporary files folder and index holding the sample PDF (Files/crag-user-guide.pdf) and any
``--pdf`` given; web search is off, so nothing leaves the machine. In Debian's Chromium, driven by
Playwright, it builds the knowledge base, asks the question, opens the answer's sources and saves the
whole page. The model is whatever the CRAG_ settings of the environment choose (the built-in one when
Ollama does not answer). Needs Playwright (requirements-dev.txt) and ``apt-get install chromium``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from any folder: the app's own package

from crag.bench.appbuild import streamlit_app  # noqa: E402

SAMPLE = ROOT / "Files" / "crag-user-guide.pdf"
OUTPUT = ROOT / "docs" / "images" / "answer.png"
QUESTION = "How do I rebuild the knowledge base?"
CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WIDTH = 1400
MINUTES = 60_000  # Playwright counts milliseconds


def shoot(url: str, question: str, out: Path) -> None:
    """Build, ask, open the sources, and save the page at ``out``."""
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        page = browser.new_page(viewport={"width": WIDTH, "height": 900})
        page.goto(url)
        sidebar = page.get_by_test_id("stSidebar")

        rebuild = sidebar.get_by_role("button", name="Rebuild knowledge base")
        expect(rebuild).to_be_enabled(timeout=3 * MINUTES)
        rebuild.click()
        expect(sidebar.get_by_text(re.compile(r"\b\d+ indexed\b")).first).to_be_visible(timeout=10 * MINUTES)

        chat = page.get_by_test_id("stChatInputTextArea")
        chat.fill(question)
        chat.press("Enter")
        answer = page.get_by_test_id("stChatMessage").nth(1)
        # The export button is drawn last, once the answer and its trace are complete.
        expect(answer.get_by_text("Export as Markdown")).to_be_visible(timeout=10 * MINUTES)
        answer.get_by_text(re.compile(r"^Sources \(\d+\)$")).click()
        expect(answer.get_by_test_id("stImage").last).to_be_visible(timeout=MINUTES)
        fit_the_conversation(page)
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out), full_page=True)
        browser.close()
    shrink(out)


def fit_the_conversation(page) -> None:
    """The conversation scrolls inside the page: make the window taller until nothing is left to scroll (the
    page images grow it as they load)."""
    height = page.viewport_size["height"]
    for _ in range(10):
        page.wait_for_timeout(1000)
        hidden = page.evaluate(
            "() => { const c = document.querySelector('[data-testid=stAppScrollToBottomContainer]');"
            " return c.scrollHeight - c.clientHeight; }"
        )
        if hidden <= 0:
            break
        height += hidden
        page.set_viewport_size({"width": WIDTH, "height": height})
    page.mouse.wheel(0, -100_000)
    page.wait_for_timeout(1000)


def shrink(png: Path) -> None:
    """A palette of 256 colours keeps text and page images sharp at a third of the size."""
    from PIL import Image

    with Image.open(png) as image:
        small = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    small.save(png, optimize=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--question", default=QUESTION, help=f"default: {QUESTION!r}")
    parser.add_argument("--pdf", type=Path, action="append", default=[], help="another PDF for the knowledge base")
    parser.add_argument("--out", type=Path, default=OUTPUT, help="default: docs/images/answer.png")
    args = parser.parse_args(argv)
    if not Path(CHROMIUM).exists():
        print(f"{CHROMIUM} is missing: apt-get install chromium fonts-noto-cjk", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="crag-screenshot-") as tmp:
        files = Path(tmp) / "Files"
        files.mkdir()
        for pdf in [SAMPLE, *args.pdf]:
            shutil.copy(pdf, files / pdf.name)
        crag_env = {
            "CRAG_FILES_DIR": str(files),
            "CRAG_CHROMA_DIR": str(Path(tmp) / "chroma_db"),
            "CRAG_WEB_SEARCH": "off",
            "CRAG_WATCH": "off",  # the script clicks Rebuild itself
        }
        log_path = Path(tmp) / "streamlit.log"
        try:
            with log_path.open("w") as log, streamlit_app(ROOT, Path(sys.executable), crag_env, log) as url:
                shoot(url, args.question, args.out)
        except Exception:
            print(log_path.read_text(), file=sys.stderr)
            raise
    print(f"saved {args.out} ({args.out.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
