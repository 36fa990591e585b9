"""A real Chroma server for tests: the venv's ``chroma run`` on a free loopback port."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from crag.bench import scaleout

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def chroma_server(data: Path) -> Iterator[str]:
    """Start ``chroma run`` over ``data``, wait for its heartbeat, yield its URL, stop it at the end."""
    with scaleout.chroma_server(data) as (url, _pid):
        yield url


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
