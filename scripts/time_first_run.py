"""Time a first `make run` as a newcomer has it: a fresh clone, then the page in a real browser.

    .venv/bin/python scripts/time_first_run.py [--repo PATH] [--runs N]

Each run clones the repository (this checkout by default: its last commit) into a temporary folder, runs `make run`
there on a free port, and drives Debian's Chromium (Playwright, as the browser test does) until the page is usable:
the chat box is enabled, then the models are loaded (the sidebar's "Loading the models" is gone). It prints the
seconds to each, the size of the clone's .venv and whether torch or llama-cpp-python was installed, then removes the
clone. The README's figures come from here (docs/benchmarks.md); pip's own cache is used as it would be on any
machine that installed Python packages before.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 1800.0  # seconds a run may take before it is called failed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def folder_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def one_run(repo: Path) -> dict[str, object]:
    from playwright.sync_api import expect, sync_playwright

    with tempfile.TemporaryDirectory(prefix="crag-first-run-") as tmp:
        clone = Path(tmp) / "crag-kb"
        subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
        port = free_port()
        env = {**os.environ, "CRAG_OLLAMA_URL": f"http://127.0.0.1:{free_port()}"}  # no Ollama, as a newcomer has it
        log = (Path(tmp) / "make-run.log").open("w")
        began = time.monotonic()
        make = subprocess.Popen(
            ["make", "run", f"PORT={port}"],
            cwd=clone,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                while True:  # the server is up once the page loads
                    if make.poll() is not None:
                        raise RuntimeError(f"make run ended ({make.returncode}): see {log.name}")
                    if time.monotonic() - began > TIMEOUT:
                        raise TimeoutError("the page did not come")
                    try:
                        page.goto(f"http://127.0.0.1:{port}", timeout=5_000)
                        break
                    except Exception:  # noqa: BLE001 - not serving yet
                        time.sleep(1.0)
                expect(page.get_by_test_id("stChatInputTextArea")).to_be_enabled(timeout=TIMEOUT * 1000)
                page_at = time.monotonic() - began
                sidebar = page.get_by_test_id("stSidebar")
                expect(sidebar).to_contain_text("Knowledge base", timeout=TIMEOUT * 1000)
                expect(sidebar).not_to_contain_text("Loading the models", timeout=TIMEOUT * 1000)
                loaded_at = time.monotonic() - began
                browser.close()
        finally:
            os.killpg(make.pid, signal.SIGTERM)
            make.wait(30)
        python = clone / ".venv" / "bin" / "python"
        installed = subprocess.run(
            [str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, check=True
        ).stdout.lower()
        return {
            "first page s": round(page_at),
            "models loaded s": round(loaded_at),
            "venv GB": round(folder_size(clone / ".venv") / 1e9, 2),
            "torch": "torch==" in installed,
            "llama-cpp-python": "llama_cpp_python==" in installed or "llama-cpp-python==" in installed,
            "load": tuple(round(x, 1) for x in os.getloadavg()),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=ROOT)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    for n in range(1, args.runs + 1):
        print(f"run {n}: {one_run(args.repo)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
