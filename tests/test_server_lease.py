"""The build lease and the pointer on a Chroma server: one build at a time across machines, faults named."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from crag.config import load_settings
from crag.ingest import sync
from crag.models import USEEmbedder
from crag.retriever import Retriever
from crag.store import BuildInProgress, IndexUnavailable, RebuildNeeded, ServerStore, open_store
from crag.store.lease import Lease
from crag.types import Chunk, FileResult
from tests.chroma_server import chroma_server
from tests.pdfs import manual_pdf

pytestmark = [pytest.mark.integration, pytest.mark.reliability, pytest.mark.slow]  # a `chroma run` per test


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    with chroma_server(tmp_path / "chroma-server") as url:
        yield url


def store(tmp_path: Path, url: str, lease: float = 2.0) -> ServerStore:
    return ServerStore(tmp_path / "unused", url, lease_seconds=lease)


def commit_one(s: ServerStore, text: str) -> str:
    writer = s.writer("test-embedder", 3, {})
    writer.add([Chunk(id=text, text=text, file="f.pdf", pages=(1,))], [[1.0, 0.0, 0.0]])
    return writer.commit([FileResult(file="f.pdf", status="indexed", chunks=1)]).id


def test_racing_builds_get_one_lease(tmp_path: Path, server: str) -> None:
    collection = store(tmp_path, server)._small("crag-build-lease")
    start, won, refused = threading.Barrier(6), [], []

    def take() -> None:
        lease = Lease(collection, 30)
        start.wait()
        try:
            lease.acquire()
            won.append(lease)
        except BuildInProgress as exc:
            refused.append(str(exc))

    threads = [threading.Thread(target=take) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(refused) == 5
    assert all("already" in message for message in refused)


def test_the_running_build_renews_its_lease(tmp_path: Path, server: str) -> None:
    first, second = store(tmp_path, server), store(tmp_path, server)
    with first.build_lock():
        until = time.time() + 3 * first.lease_seconds  # well past the first expiry
        while time.time() < until:
            with pytest.raises(BuildInProgress, match="already running"), second.build_lock():
                pass
            time.sleep(0.5)
    with second.build_lock():  # released at the end: taken at once
        pass


def test_a_dead_builds_lease_expires_and_it_can_no_longer_switch(tmp_path: Path, server: str) -> None:
    alive = store(tmp_path, server)
    before = commit_one(alive, "alpha")
    dead = store(tmp_path, server)
    dead._lease = Lease(dead._small("crag-build-lease"), 1.0)
    dead._lease.acquire()  # and never renewed: as if its process were killed
    writer = dead.writer("test-embedder", 3, {})
    writer.add([Chunk(id="beta", text="beta", file="f.pdf", pages=(1,))], [[0.0, 1.0, 0.0]])

    with pytest.raises(BuildInProgress, match=r"expires at \d\d:\d\d:\d\d UTC"), alive.build_lock():
        pass
    deadline = time.monotonic() + 30
    while True:
        try:
            with alive.build_lock():
                with pytest.raises(BuildInProgress, match="lost its lease"):
                    writer.commit([FileResult(file="f.pdf", status="indexed", chunks=1)])
                assert alive.collect_garbage() == [writer.id], "the dead build's generation is an orphan"
            break
        except BuildInProgress:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    assert alive.active().id == before


def test_readers_share_one_load_and_follow_a_switch(tmp_path: Path, server: str) -> None:
    builder, reader = store(tmp_path, server), store(tmp_path, server)
    first = commit_one(builder, "alpha")
    opened = reader.reader()
    assert opened is open_store(load_settings(chroma_url=server)).reader(), "one load per process and generation"
    second = commit_one(builder, "beta")
    assert reader.active(max_age=60).id == second, "a switch in this process is seen at once"
    assert reader.reader().generation.id == second and opened.generation.id == first


def test_an_unreachable_server_says_what_to_do(closed_port_url: str) -> None:
    s = open_store(load_settings(chroma_url=closed_port_url))
    with pytest.raises(IndexUnavailable, match=rf"Chroma server at {closed_port_url} cannot be used.*chroma run"):
        s.active()
    assert "CRAG_CHROMA_URL" in s.verify()


def test_the_token_goes_in_the_header_and_nowhere_else(tmp_path: Path) -> None:
    seen: list[dict[str, str]] = []

    class Refuse(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            seen.append(dict(self.headers))
            body = b"401 Unauthorized"
            self.send_response(401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET  # noqa: N815

        def log_message(self, *args) -> None:
            pass

    proxy = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{proxy.server_address[1]}"
        for header, sent in [("Authorization", "Bearer s3cret-tok"), ("X-Chroma-Token", "s3cret-tok")]:
            settings = load_settings(chroma_url=url, chroma_token="s3cret-tok", chroma_token_header=header)
            with pytest.raises(IndexUnavailable, match="refused") as caught:
                open_store(settings).active()
            assert seen[-1].get(header) == sent
            assert "s3cret" not in str(caught.value) + repr(settings) + settings.model_dump_json()
    finally:
        proxy.shutdown()


def test_a_damaged_server_index_is_detected_and_rebuilt(tmp_path: Path, server: str) -> None:
    files = tmp_path / "Files"
    files.mkdir()
    manual_pdf(files / "widget.pdf", topic="widget")
    settings = load_settings(files_dir=files, chroma_dir=tmp_path / "db", parser="pymupdf", chroma_url=server)
    embedder = USEEmbedder()
    s = open_store(settings)
    for damage in ("generation dropped", "pointer garbled"):
        sync(settings, embedder, rebuild=True)
        gen = s.active()
        if damage == "generation dropped":
            s.client.delete_collection(gen.id)
        else:
            s._meta().upsert(ids=["active"], embeddings=[[1.0]], documents=["{not json"])
        assert "rebuild" in s.verify()
        with pytest.raises(RebuildNeeded, match="rebuild"):
            Retriever(settings, embedder).retrieve("How much memory does the widget need?", 3)
        report = sync(settings, embedder)  # the next build notices and starts from scratch
        assert {f.status for f in report.files} == {"indexed"}
        assert Retriever(settings, embedder).retrieve("widget memory", 3)[0].chunk.file == "widget.pdf"
        assert json.loads(s._meta().get(ids=["active"])["documents"][0])["id"] == report.generation
