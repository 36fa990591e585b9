"""The page's own renderer, in a real browser: written answers full of a document's markup load nothing and link
nowhere hidden.

Streamlit renders Markdown with more than CommonMark: GFM's tables and web addresses, math between dollars,
directives (":name[...]{...}", ":::name"), and it dedents what it is given. Each can read code where markdown-it-py
reads none; ``ui.text.page_markdown`` and ``page_stream`` escape for all of them. Here Chromium renders texts mixing
fences, code spans, math, directives, addresses and markup, and no request may go to the address they name.
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import sys
from pathlib import Path

import pytest

from crag.bench.appbuild import streamlit_app

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium")
HOST = "evil.example"
ADDRESS = f"https://{HOST}/p.png"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed (make test installs it as root)"),
]

PIECES = [
    "x",
    " ",
    "words ",
    "[1]",
    "`",
    "``",
    "`code`",
    f"![x]({ADDRESS})",
    f"![x](<{ADDRESS}>)",
    f"[text]({ADDRESS})",
    f'[text]({ADDRESS} "title `")',
    f"[r]: {ADDRESS}",
    "[r]",
    f"<{ADDRESS}>",
    f"<img src={ADDRESS}>",
    "<a title='`'>",
    "<!--",
    "-->",
    "](",
    "$",
    "$$",
    "$x$",
    "$`$",
    ":red[",
    "]{a='`'}",
    ":x{y='",
    "'}",
    "::x[",
    ":::note",
    f"www.{HOST}/`x",
    f"https://{HOST}/x`y",
    "[^1]: ",
    "|",
    "\\",
]
LINES = ["$$", "$$ x", ":::note", ":::", "```", "``` x ```", "```sh`", "~~~", "    ```", "|---|---|", ""]
PREFIXES = ["", "", "", "> ", "- ", "1. ", "    ", "  ", "\t", "| ", "> > "]
# What a guess, or a reading without the page's extensions, let through (each found so)
FOUND = [
    f"``` x ```\n![x]({ADDRESS})",
    f"\t![x]({ADDRESS})",
    f"    ![x]({ADDRESS})\n\nwords",
    f"$`$ ![x]({ADDRESS}) `",
    f"[a $]$ b]({ADDRESS})",
    f":red[a]{{a='`'}} ![x]({ADDRESS}) `",
    f"` x\n:::note\n[text]({ADDRESS}) `",
    f"$$\n```\n$$\n![x]({ADDRESS})\n```",
    f"www.{HOST}/`x [text]({ADDRESS}) `",
    f"https://{HOST}/`a ` b ` ![x]({ADDRESS}) `",
    f'$$\n> > www.{HOST}/`x$x$[1][text]({ADDRESS} "title `")',
]


def texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)

    def line() -> str:
        if rng.random() < 0.25:
            return rng.choice(LINES)
        return rng.choice(PREFIXES) + "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 6)))

    return [*FOUND, *("\n".join(line() for _ in range(rng.randint(1, 10))) for _ in range(count))]


APP = """
import json, sys
sys.path.insert(0, {root!r})
import streamlit as st
from ui.text import page_markdown, page_stream

cases = json.load(open({cases!r}))
for i, text in enumerate(cases):
    with st.container(key=f"case{{i}}"):
        st.markdown(page_markdown(text))
with st.container(key="streamed"):
    st.write_stream(page_stream(iter([text[i : i + 3] for text in cases[:{streamed}] for i in range(0, len(text), 3)])))
"""


def test_the_page_loads_no_address_an_answer_names(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    cases = texts(300, seed=61)
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    (tmp_path / "app.py").write_text(APP.format(root=str(ROOT), cases=str(tmp_path / "cases.json"), streamed=40))
    requested: list[str] = []
    with (tmp_path / "streamlit.log").open("w") as log, contextlib.ExitStack() as running:
        url = running.enter_context(streamlit_app(tmp_path, Path(sys.executable), {}, log))
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page()

            def route(request) -> None:
                if HOST in request.request.url:
                    requested.append(request.request.url)
                    request.abort()
                else:
                    request.continue_()

            page.route("**/*", route)
            page.goto(url)
            page.wait_for_selector(".st-key-streamed p", state="attached", timeout=180_000)
            page.wait_for_function("!document.querySelector('[data-testid=stSkeleton]')", timeout=60_000)
            found = page.evaluate(
                """() => [...document.querySelectorAll('[class*="st-key-"]')].map(box => [
                    box.className.match(/st-key-(\\w+)/)[1],
                    [...box.querySelectorAll('img')].map(img => img.src),
                    [...box.querySelectorAll('a[href]')].filter(a => !a.getAttribute('href').startsWith('#'))
                        .map(a => [new URL(a.href).host, a.textContent]),
                ])"""
            )
            browser.close()
    assert len(found) == len(cases) + 1, "every text was rendered"
    assert not requested, requested
    images = {key: srcs for key, srcs, _ in found if srcs}
    # A web address in the text is linked by GFM, as text that shows where it leads; no other link is left
    hidden = {key: links for key, _, links in found if any(host not in text for host, text in links)}
    assert not images and not hidden, (images, hidden)
