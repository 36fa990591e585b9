"""A rebuild killed with SIGKILL at random points leaves the previous index queryable."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crag.config import load_settings
from crag.ingest import sync
from crag.models import USEEmbedder
from crag.retriever import Retriever
from crag.store import Store
from tests.pdfs import manual_pdf

pytestmark = [pytest.mark.integration, pytest.mark.reliability, pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent
KILL_POINTS = 3
EXTRA_FILES = 16


def cli(*args: str, **kwargs) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_")} | {"PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "crag", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_kill_9_during_rebuild_keeps_the_old_index(tmp_path: Path) -> None:
    files, db = tmp_path / "Files", tmp_path / "db"
    files.mkdir()
    manual_pdf(files / "widget.pdf", topic="widget")
    settings = load_settings(files_dir=files, chroma_dir=db, parser="pymupdf")
    embedder = USEEmbedder()
    first = sync(settings, embedder)
    for n in range(EXTRA_FILES):  # more work for the rebuild, so it can be caught halfway
        manual_pdf(files / f"extra-{n}.pdf", topic=f"gizmo{n}", pages=6)

    rng = random.Random(1234)
    store = Store(db)
    for _ in range(KILL_POINTS):
        proc = cli("index", "--rebuild", "--files", str(files), "--db", str(db), "--parser", "pymupdf", "--json")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            staging = [g for g in (db / "generations").iterdir() if g.name != first.generation]
            if staging:
                break
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 1.0))  # somewhere in parsing, embedding or writing
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.returncode == 0:  # finished before the kill: the point did not hit a build
            pytest.fail("the rebuild finished before it could be killed; give it more work")
        assert store.active().id == first.generation
        hits = Retriever(settings, embedder).retrieve("How much memory does the widget need?", 3, "hybrid")
        assert hits and hits[0].chunk.file == "widget.pdf"

    retrieve = cli("retrieve", "widget memory", "--db", str(db), "--json")
    out, err = retrieve.communicate(timeout=120)
    assert retrieve.returncode == 0, err
    assert json.loads(out)["results"][0]["file"] == "widget.pdf"

    done = cli("index", "--rebuild", "--files", str(files), "--db", str(db), "--parser", "pymupdf", "--json")
    out, err = done.communicate(timeout=300)
    assert done.returncode == 0, err
    assert {f["status"] for f in json.loads(out)["files"]} == {"indexed"}
    active = store.active()
    assert active.id != first.generation and active.files == EXTRA_FILES + 1
    kept = {active.id, first.generation}  # the generation before the active one stays until the next build
    assert {g.name for g in (db / "generations").iterdir()} == kept, "no staging leftovers"
    assert {getattr(c, "name", c) for c in Store(db).client.list_collections()} == kept
