"""Build speed in the real app: ``streamlit run app.py`` from a checkout, a full rebuild clicked in Chromium.

    .venv/bin/python -m crag.bench.appbuild [--rounds 2] [--watcher] [--checkout DIR ...] [--out bench/results]

``crag.bench.build`` times the app's job runner in-process; this times what a user waits for: the page,
the fragment that polls the build, and Streamlit around them. Each checkout runs as ``make run`` starts it
(its own ``.streamlit/config.toml``, from its own folder, so a file watcher sees its ``.venv``), with the
benchmark corpus in a ``Files`` folder and the index in a ``chroma_db`` folder made inside the checkout
and removed afterwards. ``--watcher`` adds this checkout with Streamlit's file watcher on, and
``--checkout`` an older one (a ``git worktree`` whose ``.venv`` is this one's). Variants alternate, round
after round, and the report gives their ratios: absolute times drift on shared machines.
Needs Playwright (requirements-dev.txt) and Debian's ``chromium``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from crag.bench.corpus import default_cache_dir, fetch_corpus

ROOT = Path(__file__).resolve().parents[2]
DONE = re.compile(r"^Rebuilt from scratch:")


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(f"{url}/_stcore/health", timeout=1)
    except OSError:
        return False
    return True


@contextlib.contextmanager
def streamlit_app(
    checkout: Path, python: Path, crag_env: dict[str, str], log: IO[str] | int, extra: Sequence[str] = ()
) -> Iterator[str]:
    """``python -m streamlit run app.py`` in ``checkout``, as ``make run`` starts it (its own config), on a
    free loopback port, with the CRAG_ settings ``crag_env`` and no others; yields its URL once it answers,
    stops it at the end. The browser test uses it too."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_")} | crag_env
    cmd = [str(python), "-m", "streamlit", "run", "app.py", "--server.port", str(port), *extra]
    proc = subprocess.Popen(cmd, cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            if _answers(url):
                break
            if proc.poll() is not None:
                raise RuntimeError(f"streamlit did not start in {checkout}: it exited")
            time.sleep(0.5)
        else:
            raise RuntimeError(f"streamlit did not start in {checkout}: no answer in 2 minutes")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _click_rebuild(url: str) -> dict[str, Any]:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        side = page.get_by_test_id("stSidebar")
        button = side.get_by_role("button", name="Rebuild knowledge base")
        expect(button).to_be_enabled(timeout=300_000)
        side.get_by_text("Full rebuild").click()
        page.wait_for_timeout(1000)
        start = time.perf_counter()
        button.click()
        done = side.get_by_text(DONE)
        expect(done).to_be_visible(timeout=3_600_000)
        seconds = time.perf_counter() - start
        summary = done.inner_text()
        browser.close()
    return {"seconds": round(seconds, 1), "summary": summary}


def _build_once(checkout: Path, pdfs: dict[str, Path], extra: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=checkout, prefix=".bench-appbuild-") as tmp:
        files, db = Path(tmp) / "Files", Path(tmp) / "chroma_db"
        files.mkdir()
        for name, path in pdfs.items():
            shutil.copy(path, files / name)
        crag_env = {
            "CRAG_OLLAMA_URL": "http://127.0.0.1:9",  # no Ollama: the packaged embedder, as a new user has it
            "CRAG_FILES_DIR": str(files),
            "CRAG_CHROMA_DIR": str(db),
            "CRAG_WEB_SEARCH": "off",
            "CRAG_WATCH": "off",  # the build timed is the one clicked, not one the watcher starts first
        }
        python = checkout / ".venv/bin/python"
        with streamlit_app(checkout, python, crag_env, subprocess.DEVNULL, extra) as url:
            return _click_rebuild(url)


def run(variants: dict[str, tuple[Path, list[str]]], rounds: int, out: Path) -> dict[str, Any]:
    pdfs = fetch_corpus(default_cache_dir())
    times: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, (checkout, extra) in variants.items():
            times[name].append(_build_once(checkout, pdfs, extra))
            print(name, json.dumps(times[name][-1], ensure_ascii=False), flush=True)
    best = {name: min(t["seconds"] for t in runs) for name, runs in times.items()}
    results = {
        "files": len(pdfs),
        "builds": times,
        "best_seconds": best,
        "ratio_to_this_checkout": {name: round(s / best["this checkout"], 2) for name, s in best.items()},
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "appbuild.json").write_text(json.dumps(results, ensure_ascii=False, indent=1), encoding="utf-8")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crag.bench.appbuild", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--watcher", action="store_true", help="also this checkout with the file watcher on")
    parser.add_argument("--checkout", type=Path, action="append", default=[], help="another checkout to time")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    variants: dict[str, tuple[Path, list[str]]] = {"this checkout": (ROOT, [])}
    if args.watcher:
        variants["this checkout, file watcher on"] = (ROOT, ["--server.fileWatcherType", "auto"])
    variants |= {str(c.resolve()): (c.resolve(), []) for c in args.checkout}
    results = run(variants, args.rounds, args.out)
    print(json.dumps({k: results[k] for k in ("best_seconds", "ratio_to_this_checkout")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
