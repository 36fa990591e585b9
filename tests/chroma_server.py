"""A real Chroma server for tests: the venv's ``chroma run`` on a free loopback port."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.helpers import free_port

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def chroma_server(data: Path) -> Iterator[str]:
    """Start ``chroma run`` over ``data``, wait for its heartbeat, yield its URL, stop it at the end."""
    port = free_port()
    chroma = Path(sys.executable).parent / "chroma"  # shipped with the chromadb package, in the same venv
    log = (data.parent / f"chroma-{port}.log").open("w")
    proc = subprocess.Popen(
        [str(chroma), "run", "--path", str(data), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/api/v2/heartbeat", timeout=2).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chroma run did not start; see {log.name}")
            time.sleep(0.1)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def crag(*args: str, cwd: Path, url: str, **env: str) -> subprocess.Popen:
    """``python -m crag ...`` in its own working folder, pointed at the server."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_")}
    environ |= {"PYTHONPATH": str(ROOT), "CRAG_CHROMA_URL": url, **env}
    return subprocess.Popen(
        [sys.executable, "-m", "crag", *args],
        cwd=cwd,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
