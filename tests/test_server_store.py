"""The index on a Chroma server (`chroma run` on loopback), shared by processes with no local index."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from crag.config import Settings, load_settings
from crag.ingest import sync
from crag.models import USEEmbedder
from crag.retriever import Retriever
from crag.store import BuildInProgress, ServerStore, open_store
from crag.types import Progress
from tests.chroma_server import chroma_server, crag
from tests.pdfs import manual_pdf

pytestmark = [pytest.mark.integration, pytest.mark.reliability, pytest.mark.slow]
LEASE = "6"  # seconds: a killed build blocks the next one this long, so the test does not wait 30 s
QUESTION = "How much memory does the widget need?"


@pytest.fixture(scope="module")
def embedder() -> USEEmbedder:
    return USEEmbedder()  # the built-in embedder, which `python -m crag index` uses too


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    with chroma_server(tmp_path / "chroma-server") as url:
        yield url


def files(folder: Path, extra: int = 0) -> Path:
    folder.mkdir(parents=True)
    manual_pdf(folder / "widget.pdf", topic="widget")
    manual_pdf(folder / "gadget.pdf", topic="gadget", pages=3)
    manual_pdf(folder / "zh.pdf", topic="小部件", chinese=True)
    for n in range(extra):  # more work, so a build can be caught halfway
        manual_pdf(folder / f"extra-{n}.pdf", topic=f"gizmo{n}", pages=4)
    return folder


def on_server(folder: Path, url: str, **kw) -> Settings:
    """Settings of an app instance whose working folder is ``folder``: its local index folder stays empty."""
    return load_settings(
        files_dir=folder / "Files",
        chroma_dir=folder / "chroma_db",
        parser="pymupdf",
        chroma_url=url,
        build_lease_seconds=float(LEASE),
        **kw,
    )


def hits(retriever: Retriever, question: str, mode: str = "hybrid", k: int = 4) -> list[tuple]:
    return [(h.chunk.id, h.chunk.file, round(h.score, 4)) for h in retriever.retrieve(question, k, mode)]


def names(store: ServerStore) -> set[str]:
    return {c.name for c in store.client.list_collections()}


def test_a_second_process_with_no_local_index_retrieves_what_the_first_built(
    tmp_path: Path, server: str, embedder: USEEmbedder
) -> None:
    builder, reader = tmp_path / "builder", tmp_path / "reader"
    files(builder / "Files")
    reader.mkdir()
    built = crag("index", "--parser", "pymupdf", "--json", cwd=builder, url=server)
    out, err = built.communicate(timeout=300)
    assert built.returncode == 0, err
    assert {f["status"] for f in json.loads(out)["files"]} == {"indexed"}

    asked = crag("retrieve", QUESTION, "-k", "4", "--json", cwd=reader, url=server)
    out, err = asked.communicate(timeout=300)
    assert asked.returncode == 0, err
    remote = [(r["file"], r["pages"], r["text"], round(r["score"], 4)) for r in json.loads(out)["results"]]
    assert list(reader.iterdir()) == [], "nothing a reader needs is on its disk"
    assert not (builder / "chroma_db").exists(), "the builder keeps nothing local either"

    # The same files indexed the embedded way answer the same: same chunks, same order, same scores.
    embedded = load_settings(files_dir=builder / "Files", chroma_dir=tmp_path / "embedded", parser="pymupdf")
    sync(embedded, embedder)
    local = [
        (h.chunk.file, list(h.chunk.pages), h.chunk.text, round(h.score, 4))
        for h in Retriever(embedded, embedder).retrieve(QUESTION, 4, "hybrid")
    ]
    assert remote == local and remote[0][0] == "widget.pdf"

    # The lexical index each process builds in memory (jieba for Chinese) and the evaluator's statistics.
    third = Retriever(on_server(tmp_path / "third", server), embedder)
    here = Retriever(embedded, embedder)
    for question, mode in [("小部件需要多少内存", "lexical"), ("gadget limits: cores", "dense")]:
        assert hits(third, question, mode) == hits(here, question, mode)
    ours, theirs = third.term_stats(), here.term_stats()
    assert ours.n_docs == theirs.n_docs and ours.doc_frequency("widget") == theirs.doc_frequency("widget") > 0
    assert ours.vocabulary.contains(" widget ") and not ours.vocabulary.contains(" sprocket ")
    ids = [c.id for c in theirs.chunks[:3]]
    assert np.allclose(ours.vectors(ids), theirs.vectors(ids))


def test_a_rebuild_killed_with_sigkill_leaves_the_other_process_answering(
    tmp_path: Path, server: str, embedder: USEEmbedder
) -> None:
    builder = tmp_path / "builder"
    settings = on_server(builder, server)
    files(builder / "Files")
    first = sync(settings, embedder).generation
    for n in range(5):
        manual_pdf(builder / "Files" / f"extra-{n}.pdf", topic=f"gizmo{n}", pages=4)
    (tmp_path / "reader").mkdir()
    reader = Retriever(on_server(tmp_path / "reader", server), embedder)  # another app instance, open before
    assert hits(reader, QUESTION)[0][1] == "widget.pdf"

    store = open_store(settings)
    proc = crag(
        "index", "--rebuild", "--parser", "pymupdf", "--json", cwd=builder, url=server, CRAG_BUILD_LEASE_SECONDS=LEASE
    )
    deadline = time.monotonic() + 120
    while (
        time.monotonic() < deadline
        and proc.poll() is None
        and not names(store) - {first, "crag-index", "crag-build-lease"}
    ):
        time.sleep(0.05)
    time.sleep(random.Random(7).uniform(0.0, 1.5))  # somewhere in parsing, embedding or writing
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the rebuild finished before it could be killed; give it more work"
    assert names(store) - {first, "crag-index", "crag-build-lease"}, "the killed build left a partial generation"

    # Its lease outlives it a little: the next build is told who holds it and until when.
    with pytest.raises(BuildInProgress, match=rf"pid {proc.pid}, started .*expires at \d\d:\d\d:\d\d UTC"):
        sync(settings, embedder, rebuild=True)
    assert store.active().id == first
    assert hits(reader, QUESTION)[0][1] == "widget.pdf"
    fresh = crag("retrieve", QUESTION, "--json", cwd=tmp_path / "reader", url=server)
    out, err = fresh.communicate(timeout=300)
    assert fresh.returncode == 0, err
    assert json.loads(out)["results"][0]["file"] == "widget.pdf"

    report = None
    while report is None and time.monotonic() < deadline + 60:  # until the dead build's lease expires
        try:
            report = sync(settings, embedder, rebuild=True)
        except BuildInProgress:
            time.sleep(0.5)
    assert report is not None and {f.status for f in report.files} == {"indexed"}
    assert names(store) == {report.generation, "crag-index", "crag-build-lease"}, "the orphans are collected"
    assert set(store._meta().get(include=[])["ids"]) == {"active", f"manifest:{report.generation}"}

    # The reader follows the switch on its own, within seconds, with no restart.
    while hits(reader, "gizmo3 limits")[0][1] != "extra-3.pdf" and time.monotonic() < deadline + 90:
        time.sleep(0.2)
    assert reader._reader.generation.id == report.generation


def test_two_concurrent_builds_the_second_is_refused(tmp_path: Path, server: str, embedder: USEEmbedder) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    files(first / "Files")
    files(second / "Files", extra=1)
    parsing, go_on = threading.Event(), threading.Event()
    done: list = []

    def hold(p: Progress) -> None:  # the first build pauses in its parsing stage, holding the lease
        if p.stage == "parsing":
            parsing.set()
            go_on.wait(timeout=300)

    builder = threading.Thread(target=lambda: done.append(sync(on_server(first, server), embedder, on_progress=hold)))
    builder.start()
    try:
        assert parsing.wait(timeout=120)
        refused = crag("index", "--parser", "pymupdf", cwd=second, url=server)
        _, err = refused.communicate(timeout=300)
    finally:
        go_on.set()
        builder.join(timeout=300)
    assert refused.returncode == 2
    assert f"already running (host {socket.gethostname()} pid {os.getpid()}, started " in err
    assert "expires at" in err and "wait for it to finish" in err
    assert done and open_store(on_server(second, server)).active().id == done[0].generation

    # The lease was released at the end: the second build runs now, with no wait.
    again = crag("index", "--parser", "pymupdf", "--json", cwd=second, url=server)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert {f["file"]: f["status"] for f in json.loads(out)["files"]}["extra-0.pdf"] == "indexed"
