"""Builds of the knowledge base as background jobs, one at a time: the runner the API, the app and the watcher share.

A build runs in a thread of the process that started it, so a page reload or a closed request does not
stop it; its state is replaced whole on every update, so a reader always sees one consistent state.
``sync`` still takes the store's cross-process lock, so builds of other processes (the CLI) are refused.
An import of an archive (``crag.archive``) is a job of the same runner: it commits a generation as a build does.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crag import first_imports
from crag.config import Settings
from crag.errors import BuildCancelled, CragError, IndexNotWritable, Remedy
from crag.store import BuildInProgress, open_store
from crag.types import FileResult, Progress

if TYPE_CHECKING:  # the parsers and models load with the first build, not with the runner (the app's first page)
    from crag import ingest
    from crag.archive import Imported
    from crag.models import Embedder

log = logging.getLogger("crag.jobs")

JOBS_KEPT = 50  # finished build jobs remembered


class JobKind(StrEnum):
    BUILD = "build"  # a sync of the files folder (a full rebuild too)
    IMPORT = "import"  # an archive's knowledge base, committed as a generation


class Trigger(StrEnum):
    """Who started a job."""

    ASKED = "asked"  # a click, a request, a command
    WATCH = "watch"  # the watcher (``crag.watch``): the files folder changed


def monotonic() -> float:
    """The clock of a build's pace (a test sets another)."""
    return time.monotonic()


# Pages read after the first ones (and some passages embedded) before a build's rates say its time left. The workers
# hand back their first parts together: after 8 pages, an estimate was a quarter of the time really left.
ESTIMATE_AFTER_PAGES = 16


@dataclass
class Pace:
    """A build's time left, from its own rates: seconds per page read (parsing, chunking, waiting for the parse
    workers: everything but embedding) and seconds per passage embedded, each times what is left of it. The pages
    left are known (the files' page counts); the passages left are the pages not yet chunked times the passages each
    page made so far, plus those made and not yet embedded. The reading rate is measured from the first pages read
    on: the time before them is the workers' start (seconds, a minute on a busy machine), which comes once. Nothing is
    said before ``ESTIMATE_AFTER_PAGES`` more pages are read and some passages embedded: there is no rate to go by
    yet. Between two steps the estimate counts down."""

    clock: Callable[[], float] = field(default_factory=lambda: monotonic)
    started: float | None = None  # the first file began: the scan of the folder before is done for good
    first: tuple[float, int, float] | None = None  # when the first pages were read: time, pages, seconds embedding
    seen: float = 0.0  # when ``estimate`` was made
    estimate: float | None = None  # seconds left then
    shown: float = 0.0  # the share of the build the bar showed last: it never goes back
    ready: bool = False  # enough is done to estimate from

    def see(self, p: Progress) -> None:
        now = self.clock()
        if self.started is None and p.stage in ("parsing", "ocr"):
            self.started = now
        if self.first is None and p.pages_read:
            self.first = (now, p.pages_read, p.embed_seconds)
        self.seen, self.estimate = now, self._left(p, now)

    def _left(self, p: Progress, now: float) -> float | None:
        if p.stage == "done":
            return 0.0
        if self.first is None or not p.pages_chunked or not p.embedded:
            return None
        since, pages, embedding = self.first
        if not self.ready:  # once there is an estimate, there is one to the end
            if p.pages_read - pages < ESTIMATE_AFTER_PAGES:
                return None
            self.ready = True
        per_page = max(now - since - (p.embed_seconds - embedding), 0.0) / (p.pages_read - pages)
        per_passage = p.embed_seconds / p.embedded
        passages_per_page = p.passages / p.pages_chunked
        pages_left = max(p.pages_total - p.pages_read, 0)
        passages_left = max(p.pages_total - p.pages_chunked, 0) * passages_per_page + max(p.passages - p.embedded, 0)
        return pages_left * per_page + passages_left * per_passage

    def left(self) -> float | None:
        """Seconds left, or None while there is no rate to go by."""
        if self.estimate is None:
            return None
        return max(self.estimate - (self.clock() - self.seen), 0.0)

    def share(self, fraction: float) -> float:
        """The share of the build done, for its bar: the time spent of the time it takes, once there is an estimate
        (else ``fraction``, the progress's own); never less than shown before."""
        left = self.left()
        if left is not None and self.started is not None:
            spent = self.clock() - self.started
            fraction = spent / (spent + left) if spent + left > 0 else 1.0
        self.shown = max(self.shown, min(fraction, 1.0))
        return self.shown


@dataclass(frozen=True, kw_only=True)
class Job:
    """A background build. Replaced whole on every update, so a reader always sees one consistent state."""

    id: str
    rebuild: bool
    started_at: str
    kind: JobKind = JobKind.BUILD
    trigger: Trigger = Trigger.ASKED
    archive: str = ""  # the archive's name, of an import
    state: str = "running"  # running | done | failed | cancelled
    progress: Progress = Progress(stage="starting")
    finished_at: str | None = None
    report: ingest.SyncReport | None = None  # per-file results, once done
    imported: Imported | None = None  # what an import committed, once done
    files: tuple[FileResult, ...] = ()  # the files this build has finished, while it goes on with the others
    error: str = ""
    remedy: Remedy | None = None  # of the error, which each edge says in its own words
    detail: str = ""  # the exception behind an unexpected failure: for a local user, never sent over HTTP
    pace: Pace = field(default_factory=Pace, compare=False, repr=False)  # its time left, from its progress so far
    began: float = field(default_factory=time.monotonic)  # when it started: a watched change after it is not synced

    def to_json(self) -> dict[str, Any]:
        p = self.progress
        return {
            "job": self.id,
            "state": self.state,
            "rebuild": self.rebuild,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "progress": {
                "stage": p.stage,
                "file": p.file,
                "file_index": p.file_index,
                "file_count": p.file_count,
                "page": p.page,
                "page_count": p.page_count,
                "fraction": round(p.fraction, 4),
            },
            "result": self.report.to_json() if self.report else None,
            "error": self.error or None,
        }


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class Builds:
    """Builds of the index in background threads, one at a time."""

    def __init__(self, settings: Settings, embedder_for: Callable[[bool], Embedder], built: Callable[[Embedder], None]):
        self.settings = settings
        self.embedder_for = embedder_for
        self.built = built
        self._lock = threading.Lock()
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._running: str | None = None
        self._cancel: dict[str, threading.Event] = {}

    @property
    def running(self) -> str | None:
        return self._running

    @property
    def latest(self) -> Job | None:
        """The running build, else the last one: what every page shows, after a reload too."""
        with self._lock:
            return next(reversed(self._jobs.values()), None)

    def cancel(self, job_id: str) -> bool:
        """Ask a running build to stop. It stops at its next progress step, which comes a few times a second
        while it waits for a parse worker, and its workers are stopped with it; the previous index stays."""
        with self._lock:
            event = self._cancel.get(job_id) if job_id == self._running else None
        if event is not None:
            event.set()
        return event is not None

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def start(self, rebuild: bool, trigger: Trigger = Trigger.ASKED) -> Job:
        """A sync of the files folder (``rebuild``: every file anew), in the background."""
        job = self._begin(Job(id=uuid.uuid4().hex, rebuild=rebuild, started_at=_now(), trigger=trigger))
        work = self._sync(job.id, rebuild)
        threading.Thread(target=self._run, args=(job.id, work), name=f"crag-build-{job.id[:8]}", daemon=True).start()
        return job

    def start_import(self, archive: Path, name: str = "", remove: bool = False) -> Job:
        """The knowledge base of ``archive`` checked and committed (``crag.archive.import_archive``), in the background.
        ``name``: the archive's name to show (an upload's, saved under another); ``remove``: delete the archive once
        the job ends (an upload's copy)."""
        job = Job(
            id=uuid.uuid4().hex, rebuild=False, started_at=_now(), kind=JobKind.IMPORT, archive=name or archive.name
        )
        job = self._begin(job)
        work = self._import(job.id, archive, remove)
        threading.Thread(target=self._run, args=(job.id, work), name=f"crag-import-{job.id[:8]}", daemon=True).start()
        return job

    def _begin(self, job: Job) -> Job:
        with self._lock:
            if self._running is not None:
                started = self._jobs[self._running].started_at
                raise BuildInProgress(
                    f"A knowledge-base build is already running (started {started}): wait for it to finish.",
                    job=self._running,
                )
            # A build by another process (the CLI, the app) holds the store's lock: answer 409 now rather
            # than accept a job that fails at once. ``sync`` takes the lock again for real.
            try:
                with open_store(self.settings).build_lock():
                    pass
            except OSError as exc:
                raise IndexNotWritable(
                    f"The index folder {self.settings.chroma_dir} cannot be written ({exc.strerror}): "
                    "fix its permissions or set CRAG_CHROMA_DIR to a writable folder."
                ) from None
            self._jobs[job.id] = job
            self._running = job.id
            self._cancel[job.id] = threading.Event()
            while len(self._jobs) > JOBS_KEPT:
                oldest = next(iter(self._jobs))
                if oldest == self._running:
                    break
                del self._jobs[oldest]
        return job

    def _update(self, job_id: str, **changes: Any) -> None:
        with self._lock:
            self._jobs[job_id] = replace(self._jobs[job_id], **changes)
            if changes.get("state", "running") != "running":
                self._running = None
                self._cancel.pop(job_id, None)

    def _sync(self, job_id: str, rebuild: bool) -> Callable[[], dict[str, Any]]:
        def work() -> dict[str, Any]:
            with first_imports:  # the app may be loading its models in another thread meanwhile
                from crag import ingest

            embedder = self.embedder_for(rebuild)
            report = ingest.sync(self.settings, embedder, rebuild=rebuild, on_progress=self._progress(job_id))
            self.built(embedder)
            return {"report": report}

        return work

    def _import(self, job_id: str, archive: Path, remove: bool) -> Callable[[], dict[str, Any]]:
        def work() -> dict[str, Any]:
            with first_imports:
                from crag.archive import import_archive

            try:
                job = self.get(job_id)
                name = job.archive if job else ""
                imported = import_archive(self.settings, archive, on_progress=self._progress(job_id), name=name)
            finally:
                if remove:
                    archive.unlink(missing_ok=True)
            return {"imported": imported}

        return work

    def _progress(self, job_id: str) -> Callable[[Progress], None]:
        cancelled = self._cancel[job_id]
        job = self.get(job_id)
        assert job is not None  # registered by start
        pace = job.pace

        def on_progress(p: Progress) -> None:
            if cancelled.is_set():
                raise BuildCancelled("The build was cancelled: the previous knowledge base still answers.")
            pace.see(p)
            if p.result is not None:
                job = self.get(job_id)
                assert job is not None  # a running job stays registered
                done = job.files  # written by this thread only
                self._update(job_id, progress=p, files=(*done, p.result))
            else:
                self._update(job_id, progress=p)

        return on_progress

    def _run(self, job_id: str, work: Callable[[], dict[str, Any]]) -> None:
        try:
            outcome = work()
        except BuildCancelled as exc:
            self._update(job_id, state="cancelled", finished_at=_now(), error=str(exc))
            return
        except CragError as exc:
            self._update(job_id, state="failed", finished_at=_now(), error=str(exc), remedy=exc.remedy)
            return
        except Exception as exc:  # noqa: BLE001 - a build bug must fail its job, not the server
            log.exception("build %s failed", job_id)
            error = (
                "The build failed unexpectedly; the previous knowledge base still answers. See the log, "
                "or run `python -m crag index` in a terminal for the same build with its details."
            )
            self._update(job_id, state="failed", finished_at=_now(), error=error, detail=f"{type(exc).__name__}: {exc}")
            return
        self._update(job_id, state="done", finished_at=_now(), **outcome)
