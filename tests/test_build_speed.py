"""The faster build's promises: the embedder loads when first used and embeds on the build's threads, and pages
parsed in worker processes make the same chunks as pages parsed in this one."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from crag.config import Settings, cpu_threads
from crag.ingest.build import Planned, index_files
from crag.ingest.pymupdf import PyMuPDFParser
from crag.ingest.workers import ParseAhead
from crag.models import USEEmbedder
from tests.fakes import HashEmbedder
from tests.pdfs import manual_pdf

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


def test_each_worker_parses_on_one_thread_and_is_let_go_when_done(tmp_path: Path) -> None:
    """Two one-thread workers on two cores, not one worker with two threads (see crag.ingest.workers); once every
    page is read, busy() is False and the workers exit, their layout models with them."""
    pdf = manual_pdf(tmp_path / "manual.pdf", pages=30)
    ahead = ParseAhead.start(PyMuPDFParser(), [pdf], 120)
    assert ahead is not None
    try:
        threads, sessions = ahead._pool.schedule(_worker_engines).result(timeout=120)
        assert threads == 1 and sessions and set(sessions) == {1}
        assert ahead._pool._context.workers == min(cpu_threads(), 4)
        parts = list(ahead.parts(pdf))
        assert sum(len(p.stages) for p in parts) == 30
        processes = multiprocessing.active_children()
        assert not ahead.busy()
        for process in processes:
            process.join(timeout=60)
        assert not any(process.is_alive() for process in processes)
    finally:
        ahead.close()


class ThreadsSeen(HashEmbedder):
    """Records the threads each batch of a build is embedded on."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.threads = 0

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
