"""The faster build's promises: the embedder loads when first used and embeds on the build's threads, and pages
parsed in worker processes make the same chunks as pages parsed in this one."""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crag.config import Settings, cpu_threads
from crag.ingest import workers
from crag.ingest.build import Planned, index_files
from crag.ingest.pymupdf import PyMuPDFParser
from crag.ingest.workers import ParseAhead
from crag.models import USEEmbedder
from tests.fakes import HashEmbedder
from tests.pdfs import manual_pdf
from tests.stuck_parser import StuckParser, alive, calls

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # real parse workers, real builds


def test_the_model_loads_on_first_use_and_threads_follow_the_build() -> None:
    embedder = USEEmbedder()
    assert "_model" not in embedder.__dict__  # made without loading its table: a build's workers start first
    assert embedder.dimension == len(embedder.embed(["a question"])[0])
    embedder.use_threads(1)
    assert embedder._model._model.threads == 1
    embedder.use_threads()
    assert embedder._model._model.threads == cpu_threads()


def _chunks(settings: Settings, parser: PyMuPDFParser, pdf: Path) -> list[tuple]:
    added: list = []
    plan = [Planned(path=pdf, name=pdf.name, hash="f" * 64)]
    built = index_files(plan, parser, HashEmbedder(), lambda c, v: added.extend(c), settings, lambda p: None)
    assert [r.status for r in built.results] == ["indexed"]
    return [(c.text, c.section, c.pages, c.bboxes) for c in added]


def test_pages_parsed_in_a_worker_make_the_same_chunks(tmp_path: Path, settings: Settings, monkeypatch) -> None:
    pdf = manual_pdf(tmp_path / "manual.pdf", pages=30)
    parser = PyMuPDFParser()
    ahead = ParseAhead.start(parser, [pdf], 120)
    assert ahead is not None, "30 pages go to a worker process"
    ahead.close()
    in_worker = _chunks(settings, parser, pdf)
    monkeypatch.setattr(ParseAhead, "start", classmethod(lambda cls, parser, paths, timeout: None))
    in_this_process = _chunks(settings, parser, pdf)
    assert len(in_this_process) > 5
    assert in_worker == in_this_process


def test_a_file_a_worker_cannot_read_fails_alone(tmp_path: Path, settings: Settings) -> None:
    good = manual_pdf(tmp_path / "good.pdf", pages=30)
    bad = tmp_path / "bad.pdf"
    bad.write_bytes(b"%PDF-1.7\n" + b"\0" * 100)
    plan = [Planned(path=bad, name="bad.pdf", hash="a" * 64), Planned(path=good, name="good.pdf", hash="b" * 64)]
    built = index_files(plan, PyMuPDFParser(), HashEmbedder(), lambda c, v: None, settings, lambda p: None)
    assert [(r.file, r.status) for r in built.results] == [("bad.pdf", "failed"), ("good.pdf", "indexed")]
    assert "corrupt or truncated PDF" in built.results[0].error


def test_files_parse_in_this_process_when_the_worker_dies(tmp_path: Path, settings: Settings, monkeypatch) -> None:
    from concurrent.futures.process import BrokenProcessPool

    def broken(self, path, waiting=None):
        raise BrokenProcessPool("a worker was killed")
        yield  # a generator, as ParseAhead.parts is

    monkeypatch.setattr(ParseAhead, "parts", broken)
    plan = [
        Planned(path=manual_pdf(tmp_path / f"{n}.pdf", pages=15), name=f"{n}.pdf", hash=str(n) * 64) for n in (1, 2)
    ]
    built = index_files(plan, PyMuPDFParser(), HashEmbedder(), lambda c, v: None, settings, lambda p: None)
    assert [(r.file, r.status, r.pages) for r in built.results] == [("1.pdf", "indexed", 15), ("2.pdf", "indexed", 15)]


def _worker_engines() -> tuple[int, list[int]]:
    """In a parse worker: its thread count, and the threads of its layout model's sessions."""
    import gc

    import onnxruntime as ort

    gc.collect()
    sessions = [s for s in gc.get_objects() if isinstance(s, ort.InferenceSession) and "pymupdf" in s._model_path]
    return cpu_threads(), [s.get_session_options().intra_op_num_threads for s in sessions]


def _workers() -> set[multiprocessing.process.BaseProcess]:
    return {p for p in multiprocessing.active_children() if p.name == "pebble_pool_worker"}


@pytest.fixture(autouse=True)
def _none_kept() -> Iterator[None]:
    """Each test starts and ends without the worker a small build keeps for the next."""
    workers.let_go()
    yield
    workers.let_go()


def test_a_big_build_has_a_one_thread_worker_per_core_let_go_when_done(tmp_path: Path) -> None:
    """Past FEW_PAGES, a worker per core: two one-thread workers on two cores, not one worker with two threads (see
    crag.ingest.workers). Once every page is read, busy() is False and the workers exit, their layout models with
    them: none is kept."""
    pdf = manual_pdf(tmp_path / "manual.pdf", pages=30)
    ahead = ParseAhead.start(PyMuPDFParser(), [pdf], 120)
    assert ahead is not None
    try:
        parts = list(ahead.parts(pdf))
        assert sum(len(p.stages) for p in parts) == 30
        while len(_workers()) < min(cpu_threads(), 4):  # the pool grew once the page count was known
            time.sleep(0.1)
        threads, sessions = ahead._pool.schedule(_worker_engines).result(timeout=120)
        assert threads == 1 and sessions and set(sessions) == {1}
        processes = _workers()
        assert not ahead.busy()
        for process in processes:
            process.join(timeout=60)
        assert not any(process.is_alive() for process in processes)
    finally:
        ahead.close()


def _small(tmp_path: Path, name: str) -> list[Planned]:
    return [Planned(path=manual_pdf(tmp_path / f"{name}.pdf", pages=3), name=f"{name}.pdf", hash=name[0] * 64)]


def test_a_small_build_leaves_its_worker_to_the_next(tmp_path: Path, settings: Settings) -> None:
    """A worker's start costs more than a few pages take: the next small build's pages are read by the same worker,
    which stays (until KEEP_SECONDS) only for the same parser."""
    (tmp_path / "log").mkdir()
    parser = StuckParser(tmp_path / "log")
    for name in ("one", "two"):
        built = index_files(_small(tmp_path, name), parser, HashEmbedder(), lambda c, v: None, settings, lambda p: None)
        assert [r.status for r in built.results] == ["indexed"]
    pids = {pid for pid, _, _ in calls(tmp_path / "log")}
    assert len(pids) == 1 and os.getpid() not in pids, "both read by one worker"
    kept = pids.pop()
    assert alive(kept)

    other = StuckParser(tmp_path / "log", max_pages=100)  # the settings changed: another parser
    index_files(_small(tmp_path, "three"), other, HashEmbedder(), lambda c, v: None, settings, lambda p: None)
    assert {pid for pid, name, _ in calls(tmp_path / "log") if name == "three.pdf"} - {kept}
    assert not alive(kept), "the worker of the parser before was let go"


def test_the_kept_worker_is_let_go_after_a_while(tmp_path: Path, settings: Settings, monkeypatch) -> None:
    monkeypatch.setattr(workers, "KEEP_SECONDS", 0.5)
    (tmp_path / "log").mkdir()
    parser = StuckParser(tmp_path / "log")
    index_files(_small(tmp_path, "one"), parser, HashEmbedder(), lambda c, v: None, settings, lambda p: None)
    (kept,) = {pid for pid, _, _ in calls(tmp_path / "log")}
    while alive(kept):  # the test's time limit fails it if the worker stays
        time.sleep(0.1)
    assert not _workers()


class ThreadsSeen(HashEmbedder):
    """Records the threads each batch of a build is embedded on (None: never told, every core)."""

    def __init__(self) -> None:
        self.seen: list[int | None] = []
        self.threads: int | None = None

    def use_threads(self, threads: int = 0) -> None:
        self.threads = threads

    def embed_documents(self, texts):
        self.seen.append(self.threads)
        return super().embed_documents(texts)


def test_the_build_embeds_on_one_thread_while_workers_read(tmp_path: Path, settings: Settings, monkeypatch) -> None:
    """Three single-threaded processes share two cores well; two embedding threads beside the workers waited on each
    other. Once the workers are done, every core again; and after the build, for the questions."""
    monkeypatch.setattr(ParseAhead, "busy", lambda self: len(embedder.seen) < 2)
    embedder = ThreadsSeen()
    pdf = manual_pdf(tmp_path / "manual.pdf", pages=60)
    plan = [Planned(path=pdf, name=pdf.name, hash="f" * 64)]
    monkeypatch.setattr("crag.ingest.build.EMBED_BATCH", 4)
    built = index_files(plan, PyMuPDFParser(), embedder, lambda c, v: None, settings, lambda p: None)
    assert [r.status for r in built.results] == ["indexed"]
    assert embedder.seen[:2] == [1, 1] and set(embedder.seen[2:]) == {0}
    assert embedder.threads == 0


def test_the_embedder_gets_every_core_back_when_the_workers_die(
    tmp_path: Path, settings: Settings, monkeypatch
) -> None:
    """The first file is embedded on one thread while the workers read; they die before the second, which is parsed
    here: it is embedded on every core, and so are the questions after the build."""
    from concurrent.futures.process import BrokenProcessPool

    read = ParseAhead.parts

    def dies_before_the_second(self, path, waiting=lambda: None):
        if path.name == "2.pdf":
            raise BrokenProcessPool("the parse workers stopped")
        yield from read(self, path, waiting)

    monkeypatch.setattr(ParseAhead, "parts", dies_before_the_second)
    monkeypatch.setattr(ParseAhead, "busy", lambda self: True)
    monkeypatch.setattr("crag.ingest.build.EMBED_BATCH", 4)
    embedder, written = ThreadsSeen(), []
    plan = [
        Planned(path=manual_pdf(tmp_path / f"{n}.pdf", pages=12), name=f"{n}.pdf", hash=str(n) * 64) for n in (1, 2)
    ]
    built = index_files(
        plan, PyMuPDFParser(), embedder, lambda c, v: written.append(len(embedder.seen)), settings, lambda p: None
    )
    assert [(r.file, r.status) for r in built.results] == [("1.pdf", "indexed"), ("2.pdf", "indexed")]
    first = written[0]
    assert set(embedder.seen[:first]) == {1}, "the first file beside the workers"
    assert embedder.seen[first:] and set(embedder.seen[first:]) == {0}, "the second file, parsed here"
    assert embedder.threads == 0


def test_files_parse_here_when_the_workers_cannot_start(tmp_path: Path, settings: Settings) -> None:
    """Workers that die at their start (a real pool, broken): every file is parsed in this process, no worker is
    left, and the embedder is on every core after the build."""
    from tests.stuck_parser import NoWorkerParser

    (tmp_path / "log").mkdir()
    before = set(multiprocessing.active_children())
    embedder = ThreadsSeen()
    plan = [Planned(path=manual_pdf(tmp_path / f"{n}.pdf", pages=3), name=f"{n}.pdf", hash=str(n) * 64) for n in (1, 2)]
    built = index_files(plan, NoWorkerParser(tmp_path / "log"), embedder, lambda c, v: None, settings, lambda p: None)
    assert [(r.file, r.status, r.pages) for r in built.results] == [("1.pdf", "indexed", 3), ("2.pdf", "indexed", 3)]
    assert set(multiprocessing.active_children()) - before == set()
    assert embedder.threads == 0


def test_a_parse_worker_started_from_the_app_does_not_run_the_page(monkeypatch) -> None:
    """Streamlit runs app.py as __main__, so a spawned worker imports app.py again as __mp_main__: the page ran in
    every worker, and the workers died, leaving the app's builds to parse alone."""
    import runpy

    import ui.page

    ran: list[str] = []
    monkeypatch.setattr(ui.page, "main", lambda: ran.append("page"))
    runpy.run_path(str(Path(__file__).resolve().parent.parent / "app.py"), run_name="__mp_main__")
    assert ran == []
    runpy.run_path(str(Path(__file__).resolve().parent.parent / "app.py"), run_name="__main__")
    assert ran == ["page"]
