"""Builds that cannot hang: a page its parse worker hangs on fails its file alone, and so does a file that hangs
when it is opened; a cancel reaches a build waiting for a stuck worker; no worker outlives the build, and the build
lock is let go. A small build on one core too: every page is read in a worker. A file over the page cap has none of
its pages read."""

from __future__ import annotations

import multiprocessing
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crag import ingest
from crag.config import Settings
from crag.errors import BuildCancelled
from crag.ingest import workers
from crag.ingest.build import Planned, index_files
from crag.store import open_store
from crag.types import Chunk, Progress
from tests.fakes import HashEmbedder
from tests.pdfs import manual_pdf
from tests.stuck_parser import StuckParser, alive, calls

# A hang fails the test instead of blocking the suite; each test takes seconds when the build does not hang.
pytestmark = [pytest.mark.reliability, pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture
def log(tmp_path: Path) -> Path:
    (tmp_path / "log").mkdir()
    return tmp_path / "log"


# A machine's cores, a file's pages, and the page its worker hangs on: a big build on two cores, and a small one on
# one core, which parsed in the build's own process once.
MACHINES = [pytest.param(2, 16, 9, id="two-cores-16-pages"), pytest.param(1, 3, 1, id="one-core-3-pages")]


@pytest.fixture(autouse=True)
def _two_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workers unless a test says otherwise (``_cores``)."""
    monkeypatch.setattr(workers, "cpu_threads", lambda: 2)


def _cores(monkeypatch: pytest.MonkeyPatch, cores: int) -> None:
    monkeypatch.setattr(workers, "cpu_threads", lambda: cores)


def _plan(tmp_path: Path, **files: int) -> list[Planned]:
    return [
        Planned(
            path=manual_pdf(tmp_path / f"{name}.pdf", topic=name, pages=pages), name=f"{name}.pdf", hash=f"{n}" * 64
        )
        for n, (name, pages) in enumerate(files.items())
    ]


def _workers() -> set[multiprocessing.process.BaseProcess]:
    return {p for p in multiprocessing.active_children() if p.name == "pebble_pool_worker"}


@pytest.fixture
def no_worker_left(log: Path) -> Iterator[None]:
    """After the test's build: a worker stuck on a page is gone; once the worker a small build keeps for the next is
    let go, so is every worker that read a part, and every other process the build started."""
    before = set(multiprocessing.active_children())
    yield
    if (log / "stuck").exists():
        assert not alive(int((log / "stuck").read_text()))
    workers.let_go()
    pids = {pid for pid, _, _ in calls(log)}
    assert pids and not [pid for pid in pids if alive(pid)]
    assert set(multiprocessing.active_children()) - before == set()


@pytest.mark.usefixtures("no_worker_left")
@pytest.mark.parametrize(("cores", "pages", "page"), MACHINES)
def test_a_page_that_hangs_its_worker_fails_its_file_alone(
    tmp_path: Path, settings: Settings, log: Path, monkeypatch: pytest.MonkeyPatch, cores: int, pages: int, page: int
) -> None:
    """One worker, stuck on a page of the first file and deaf to SIGTERM: it is killed when the part's time is up,
    a new worker reads the other file, and the stuck file fails with a message naming its pages."""
    _cores(monkeypatch, cores)
    monkeypatch.setattr(workers, "workers", lambda: 1)
    plan = _plan(tmp_path, stuck=pages, good=pages)
    added: list[Chunk] = []
    quick = settings.model_copy(update={"parse_part_timeout": 5.0})
    parser = StuckParser(log, "stuck.pdf", page)
    built = index_files(plan, parser, HashEmbedder(), lambda c, v: added.extend(c), quick, lambda p: None)

    assert [(r.file, r.status) for r in built.results] == [("stuck.pdf", "failed"), ("good.pdf", "indexed")]
    error = built.results[0].error
    part = f"{page}-{min(page + 7, pages)}"
    assert error.startswith(f"stuck.pdf: pages {part} could not be read: the parser was still on them after 5 s")
    assert "CRAG_PARSE_PART_TIMEOUT" in error
    assert {c.file for c in added} == {"good.pdf"}
    stuck = int((log / "stuck").read_text())
    assert {pid for pid, name, _ in calls(log) if name == "good.pdf"} - {stuck}, "a new worker read good.pdf"


@pytest.mark.usefixtures("no_worker_left")
def test_a_file_that_hangs_when_opened_fails_alone(
    tmp_path: Path, settings: Settings, log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its page count and bookmarks are read in a worker too, under the same time limit; one core, one worker."""
    _cores(monkeypatch, 1)
    plan = _plan(tmp_path, stuck=3, good=3)
    quick = settings.model_copy(update={"parse_part_timeout": 5.0})
    built = index_files(
        plan, StuckParser(log, "stuck.pdf", 0), HashEmbedder(), lambda c, v: None, quick, lambda p: None
    )

    assert [(r.file, r.status) for r in built.results] == [("stuck.pdf", "failed"), ("good.pdf", "indexed")]
    assert built.results[0].error.startswith(
        "stuck.pdf: could not be opened: the parser was still reading its page count and bookmarks after 5 s"
    )
    assert built.results[1].title == "The good manual", "the title read in the worker"
    assert not [name for _, name, page in calls(log) if name == "stuck.pdf" and page > 0], "no page of it was read"


@pytest.mark.usefixtures("no_worker_left")
@pytest.mark.parametrize(("cores", "pages", "page"), MACHINES)
def test_a_cancel_reaches_a_build_waiting_on_a_stuck_worker(
    tmp_path: Path, settings: Settings, log: Path, monkeypatch: pytest.MonkeyPatch, cores: int, pages: int, page: int
) -> None:
    """Cancelled while a worker hangs (its time limit far away): the build stops at once and the worker is gone."""
    _cores(monkeypatch, cores)
    plan = _plan(tmp_path, stuck=pages, good=pages)
    patient = settings.model_copy(update={"parse_part_timeout": 3600.0})

    def report(progress: Progress) -> None:  # as the build jobs' progress callback does once Cancel is clicked
        if (log / "stuck").exists():
            raise BuildCancelled("The build was cancelled: the previous knowledge base still answers.")

    with pytest.raises(BuildCancelled):
        index_files(plan, StuckParser(log, "stuck.pdf", page), HashEmbedder(), lambda c, v: None, patient, report)
    assert not _workers(), "no worker is kept from a build that was cancelled at work"


def _folder(settings: Settings, pages: int) -> None:
    settings.files_dir.mkdir(parents=True)
    for name in ("a-stuck", "b-good"):
        manual_pdf(settings.files_dir / f"{name}.pdf", topic=name.split("-")[1], pages=pages)


@pytest.mark.usefixtures("no_worker_left")
@pytest.mark.parametrize(("cores", "pages", "page"), MACHINES)
def test_cancel_in_the_app_stops_a_build_stuck_in_a_worker(
    settings: Settings, log: Path, monkeypatch: pytest.MonkeyPatch, cores: int, pages: int, page: int
) -> None:
    """The Cancel button's way: the build job, through ``sync``, its first file stuck; the build lock is let go."""
    from crag.jobs import Builds

    _cores(monkeypatch, cores)
    _folder(settings, pages)
    sync = sys.modules["crag.ingest.sync"]  # the module: ``crag.ingest.sync`` is also the function it exports
    monkeypatch.setattr(sync, "choose_parser", lambda *a, **k: StuckParser(log, "a-stuck.pdf", page))
    patient = settings.model_copy(update={"parse_part_timeout": 3600.0})
    builds = Builds(patient, lambda rebuild: HashEmbedder(), lambda embedder: None)
    job = builds.start(rebuild=True)
    while not (log / "stuck").exists():
        time.sleep(0.05)
    assert builds.cancel(job.id)
    while builds.get(job.id).state == "running":
        time.sleep(0.05)
    assert builds.get(job.id).state == "cancelled"
    assert not _workers()
    with open_store(settings).build_lock():  # raises BuildInProgress while the lock is held
        pass


@pytest.mark.usefixtures("no_worker_left")
def test_a_small_build_on_one_core_with_a_stuck_page_ends_and_lets_the_lock_go(
    settings: Settings, log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through ``sync``, as the app and the command line build: the stuck file fails, the other is indexed, and the
    next build can take the lock."""
    _cores(monkeypatch, 1)
    _folder(settings, 3)
    quick = settings.model_copy(update={"parse_part_timeout": 5.0})
    report = ingest.sync(quick, HashEmbedder(), rebuild=True, parser=StuckParser(log, "a-stuck.pdf", 1))

    assert [(f.file, f.status) for f in report.files] == [("a-stuck.pdf", "failed"), ("b-good.pdf", "indexed")]
    assert "CRAG_PARSE_PART_TIMEOUT" in report.files[0].error
    with open_store(settings).build_lock():
        pass


@pytest.mark.usefixtures("no_worker_left")
def test_a_file_over_the_page_cap_has_none_of_its_pages_read(tmp_path: Path, settings: Settings, log: Path) -> None:
    """Its catalogue says so, and none of its parts is queued to fail in a worker."""
    plan = _plan(tmp_path, big=40, good=24)
    built = index_files(
        plan, StuckParser(log, max_pages=30), HashEmbedder(), lambda c, v: None, settings, lambda p: None
    )

    assert [(r.file, r.status) for r in built.results] == [("big.pdf", "failed"), ("good.pdf", "indexed")]
    assert built.results[0].error == "big.pdf: 40 pages, over the cap"
    assert {name for _, name, page in calls(log) if page > 0} == {"good.pdf"}, "no page of big.pdf was read"
