"""Builds that cannot hang: a page its parse worker hangs on fails its file alone, a cancel reaches a build waiting
for a stuck worker, no worker outlives the build, and a file over the page cap never reaches a worker."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crag.config import Settings
from crag.errors import BuildCancelled
from crag.ingest import workers
from crag.ingest.build import Planned, index_files
from crag.types import Chunk, Progress
from tests.fakes import HashEmbedder
from tests.pdfs import manual_pdf
from tests.stuck_parser import StuckParser

# A hang fails the test instead of blocking the suite; each test takes seconds when the build does not hang.
pytestmark = [pytest.mark.reliability, pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture
def log(tmp_path: Path) -> Path:
    (tmp_path / "log").mkdir()
    return tmp_path / "log"


@pytest.fixture(autouse=True)
def _two_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parts go to worker processes on a machine of one core too, so these tests always test them."""
    monkeypatch.setattr(workers, "cpu_threads", lambda: 2)


def _plan(tmp_path: Path, **files: int) -> list[Planned]:
    return [
        Planned(
            path=manual_pdf(tmp_path / f"{name}.pdf", topic=name, pages=pages), name=f"{name}.pdf", hash=f"{n}" * 64
        )
        for n, (name, pages) in enumerate(files.items())
    ]


def _calls(log: Path) -> list[tuple[int, str, int]]:
    """(worker pid, file, first page) of every part a worker began."""
    lines = (log / "calls").read_text().split("\n") if (log / "calls").exists() else []
    return [(int(pid), name, int(page)) for pid, name, page in (line.split() for line in lines if line)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def no_worker_left(log: Path) -> Iterator[None]:
    """After the test's build: every worker that read a part is gone, and so is every other process it started."""
    before = set(multiprocessing.active_children())
    yield
    pids = {pid for pid, _, _ in _calls(log)}
    assert pids and not [pid for pid in pids if _alive(pid)]
    assert set(multiprocessing.active_children()) - before == set()


@pytest.mark.usefixtures("no_worker_left")
def test_a_page_that_hangs_its_worker_fails_its_file_alone(
    tmp_path: Path, settings: Settings, log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One worker, stuck on page 9 of the first file and deaf to SIGTERM: it is killed when the part's time is up,
    a new worker reads the other file, and the stuck file fails with a message naming its pages."""
    monkeypatch.setattr(workers, "workers", lambda: 1)
    plan = _plan(tmp_path, stuck=16, good=16)
    added: list[Chunk] = []
    quick = settings.model_copy(update={"parse_part_timeout": 5.0})
    parser = StuckParser(log, "stuck.pdf", 9)
    built = index_files(plan, parser, HashEmbedder(), lambda c, v: added.extend(c), quick, lambda p: None)

    assert [(r.file, r.status) for r in built.results] == [("stuck.pdf", "failed"), ("good.pdf", "indexed")]
    error = built.results[0].error
    assert error.startswith("stuck.pdf: pages 9-16 could not be read") and "CRAG_PARSE_PART_TIMEOUT" in error
    assert {c.file for c in added} == {"good.pdf"}
    stuck = int((log / "stuck").read_text())
    assert {pid for pid, name, _ in _calls(log) if name == "good.pdf"} - {stuck}, "a new worker read good.pdf"


@pytest.mark.usefixtures("no_worker_left")
def test_a_cancel_reaches_a_build_waiting_on_a_stuck_worker(tmp_path: Path, settings: Settings, log: Path) -> None:
    """Cancelled while a worker hangs (its time limit far away): the build stops at once and the worker is gone."""
    plan = _plan(tmp_path, stuck=16, good=16)
    patient = settings.model_copy(update={"parse_part_timeout": 3600.0})

    def report(progress: Progress) -> None:  # as the build jobs' progress callback does once Cancel is clicked
        if (log / "stuck").exists():
            raise BuildCancelled("The build was cancelled: the previous knowledge base still answers.")

    with pytest.raises(BuildCancelled):
        index_files(plan, StuckParser(log, "stuck.pdf", 1), HashEmbedder(), lambda c, v: None, patient, report)


@pytest.mark.usefixtures("no_worker_left")
def test_cancel_in_the_app_stops_a_build_stuck_in_a_worker(
    settings: Settings, log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Cancel button's way: the build job, through ``sync``, its first file stuck on page 1."""
    from crag.jobs import Builds

    settings.files_dir.mkdir(parents=True)
    for name in ("a-stuck", "b-good"):
        manual_pdf(settings.files_dir / f"{name}.pdf", topic=name.split("-")[1], pages=16)
    sync = sys.modules["crag.ingest.sync"]  # the module: ``crag.ingest.sync`` is also the function it exports
    monkeypatch.setattr(sync, "choose_parser", lambda *a, **k: StuckParser(log, "a-stuck.pdf", 1))
    patient = settings.model_copy(update={"parse_part_timeout": 3600.0})
    builds = Builds(patient, lambda rebuild: HashEmbedder(), lambda embedder: None)
    job = builds.start(rebuild=True)
    while not (log / "stuck").exists():
        time.sleep(0.05)
    assert builds.cancel(job.id)
    while builds.get(job.id).state == "running":
        time.sleep(0.05)
    assert builds.get(job.id).state == "cancelled"


@pytest.mark.usefixtures("no_worker_left")
def test_a_file_over_the_page_cap_never_reaches_a_worker(tmp_path: Path, settings: Settings, log: Path) -> None:
    plan = _plan(tmp_path, big=40, good=24)
    built = index_files(
        plan, StuckParser(log, max_pages=30), HashEmbedder(), lambda c, v: None, settings, lambda p: None
    )

    assert [(r.file, r.status) for r in built.results] == [("big.pdf", "failed"), ("good.pdf", "indexed")]
    assert built.results[0].error == (
        "big.pdf: 40 pages, over the limit of 30 (CRAG_MAX_PAGES). "
        "Split it into parts, or raise CRAG_MAX_PAGES and allow for the time it takes."
    )
    calls = _calls(log)
    assert {name for _, name, _ in calls} == {"good.pdf"}, "good.pdf went to the workers, no part of big.pdf did"
