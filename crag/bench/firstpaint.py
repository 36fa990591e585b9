"""What a user waits for in the app: the first page, a reload, a first answer, and the Stop button.

    .venv/bin/python -m crag.bench.firstpaint [--rounds 3] [--checkout DIR ...] [--out bench/results]

Each checkout runs as ``make run`` starts it (``streamlit run app.py`` from its own folder, its own
``.streamlit/config.toml``), with no Ollama (the packaged models, as a new user has them), written answers
(``CRAG_ANSWER_MODE=generated``) and a knowledge base of three corpus PDFs, built once by this checkout's
``python -m crag index`` and shared by every run. Chromium (Playwright) times, per run:

- ``server_to_chat``: from the server's start to a chat box that takes a question (visible and enabled);
- ``page_to_chat``: the same from the moment the server answers (its health check), as the issue's goal says;
- ``first_answer``: from the server's start to the end of an answer to a question typed as soon as the box
  took it (it waits for the models when they are still loading);
- ``reload_to_chat``: from a reload of the page to a chat box that takes a question;
- ``stop_to_stopped``: from a click on Stop, during a written answer, to the word "stopped" on the page
  (None: not within ``STOP_WAIT`` seconds), and ``stop_to_chat`` to a chat box that takes the next question.

``--checkout`` adds an older checkout (a ``git worktree`` whose ``.venv`` is this one's). Checkouts alternate,
round after round; the report gives each figure's median and its ratio to this checkout's, since absolute times
drift on shared machines. Needs Playwright (requirements-dev.txt) and Debian's ``chromium``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from crag.bench.appbuild import streamlit_app
from crag.bench.corpus import default_cache_dir, fetch_corpus

ROOT = Path(__file__).resolve().parents[2]
PDFS = ("bzip2-manual.pdf", "R-data.pdf", "ctex-faq.pdf")
QUESTION = "How do I decompress a file with bzip2?"
LONG_QUESTION = "Explain in detail, step by step, everything the manuals say about compressing files."
STOP_WAIT = 20.0  # seconds a stopped answer has to say so
FIGURES = ("server_to_chat", "page_to_chat", "first_answer", "reload_to_chat", "stop_to_stopped", "stop_to_chat")


def _knowledge_base(folder: Path, crag_env: dict[str, str]) -> None:
    """The corpus PDFs in ``Files`` and their index, built by this checkout's CLI unless ``folder`` has them."""
    files = folder / "Files"
    if (folder / "chroma_db" / "ACTIVE.json").is_file():
        return
    pdfs = fetch_corpus(default_cache_dir())
    files.mkdir(parents=True, exist_ok=True)
    for name in PDFS:
        shutil.copy(pdfs[name], files / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_")} | crag_env
    quiet = subprocess.DEVNULL
    subprocess.run([sys.executable, "-m", "crag", "index"], cwd=ROOT, env=env, check=True, stdout=quiet, stderr=quiet)


def _ratio(figure: float | None, mine: float | None) -> float | None:
    return round(figure / mine, 2) if figure is not None and mine else None


def _since(start: float) -> float:
    return round(time.perf_counter() - start, 2)


def _stop(page: Any, answer: Any) -> dict[str, float | None]:
    """Stop a written answer once its text streams; how long until the page says it stopped, and takes a question."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import expect

    chat = page.get_by_test_id("stChatInputTextArea")
    expect(answer.get_by_test_id("stMarkdownContainer").first).to_be_visible(timeout=120_000)
    stop = answer.get_by_role("button", name="Stop")
    if not stop.count():  # a checkout without a Stop button in the answer: the chat box's own stop button
        stop = page.get_by_test_id("stChatInputStopButton")
    figures: dict[str, float | None] = {"stop_to_stopped": None, "stop_to_chat": None}
    try:
        stop.click(timeout=STOP_WAIT * 1000)  # an old checkout's stop button may be gone (answer done): no figure
    except PlaywrightTimeout:
        return figures
    start = time.perf_counter()
    try:
        expect(answer).to_contain_text("stopped", ignore_case=True, timeout=STOP_WAIT * 1000)
        figures["stop_to_stopped"] = _since(start)
        expect(chat).to_be_enabled(timeout=STOP_WAIT * 1000)
        figures["stop_to_chat"] = _since(start)
    except (PlaywrightTimeout, AssertionError):
        pass
    return figures


def _one_run(browser: Any, checkout: Path, crag_env: dict[str, str], log: Path) -> dict[str, Any]:
    from playwright.sync_api import expect

    (Path(crag_env["CRAG_CHROMA_DIR"]) / "conversations.sqlite3").unlink(missing_ok=True)
    python = checkout / ".venv/bin/python"
    with log.open("a") as out:
        start = time.perf_counter()
        with streamlit_app(checkout, python, crag_env, out) as url:
            up = time.perf_counter()
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(url)
            chat = page.get_by_test_id("stChatInputTextArea")
            expect(chat).to_be_enabled(timeout=300_000)
            figures: dict[str, Any] = {"server_to_chat": _since(start), "page_to_chat": _since(up)}
            chat.fill(QUESTION)
            chat.press("Enter")
            messages = page.get_by_test_id("stChatMessage")
            expect(messages.nth(1)).to_contain_text("LLM call", timeout=300_000)  # the caption closes an answer
            figures["first_answer"] = _since(start)
            expect(chat).to_be_enabled(timeout=60_000)
            mark = time.perf_counter()
            page.reload()
            expect(chat).to_be_enabled(timeout=300_000)
            figures["reload_to_chat"] = _since(mark)
            expect(messages).to_have_count(2, timeout=60_000)
            chat.fill(LONG_QUESTION)
            chat.press("Enter")
            expect(messages).to_have_count(4, timeout=60_000)
            figures |= _stop(page, messages.nth(3))
            page.close()
    return figures


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 2) if len(known) == len(values) and known else None


def run(checkouts: dict[str, Path], rounds: int, out: Path, data: Path | None = None) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in checkouts}
    with tempfile.TemporaryDirectory(prefix="crag-firstpaint-") as tmp:
        folder = data or Path(tmp)
        crag_env = {
            "CRAG_OLLAMA_URL": "http://127.0.0.1:9",  # no Ollama: the packaged models, as a new user has them
            "CRAG_FILES_DIR": str(folder / "Files"),
            "CRAG_CHROMA_DIR": str(folder / "chroma_db"),
            "CRAG_WEB_SEARCH": "off",
            "CRAG_ANSWER_MODE": "generated",
        }
        _knowledge_base(folder, crag_env)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=shutil.which("chromium"),
                args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
            )
            for _ in range(rounds):
                for name, checkout in checkouts.items():
                    runs[name].append(_one_run(browser, checkout, crag_env, out / "firstpaint-streamlit.log"))
                    print(name, json.dumps(runs[name][-1]), flush=True)
            browser.close()
    medians = {name: {f: _median([r.get(f) for r in rs]) for f in FIGURES} for name, rs in runs.items()}
    mine = medians["this checkout"]
    ratios = {name: {f: _ratio(m[f], mine[f]) for f in FIGURES} for name, m in medians.items()}
    results = {"runs": runs, "median_seconds": medians, "ratio_to_this_checkout": ratios}
    (out / "firstpaint.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crag.bench.firstpaint", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--checkout", type=Path, action="append", default=[], help="another checkout to time")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--data", type=Path, help="keep the PDFs and their index in this folder between runs")
    args = parser.parse_args(argv)
    checkouts = {"this checkout": ROOT} | {str(c.resolve()): c.resolve() for c in args.checkout}
    results = run(checkouts, args.rounds, args.out, args.data)
    print(json.dumps({k: results[k] for k in ("median_seconds", "ratio_to_this_checkout")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
