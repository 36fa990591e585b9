"""The files folder, watched: PDFs added, replaced, moved or removed are synced without a click.

One ``Watcher`` per process (the app's, ``crag serve``'s, ``crag watch``'s) follows the folder and its subfolders
with watchdog (inotify on Linux; ``CRAG_WATCH=poll`` looks every few seconds instead, for network folders, which
report no changes). A change is not synced at once: the folder must first stay quiet for ``CRAG_WATCH_QUIET``
seconds (a burst of copies is one sync), and every PDF that changed must have stopped changing and hold its end
(the ``%%EOF`` marker in its last kilobyte: a copy in progress has none yet). Then the watcher starts an
incremental build as a job of the process's runner (``crag.jobs``), as the Rebuild button does: answers keep
coming from the generation that answers until the new one is committed. Hidden files and folders and editors'
temporary files (``crag.files.ignored``) are not watched, and opening or reading a file is not a change.

What is not the watcher's to decide stays with the build: it reports each file (failed, and why). What only the
watcher sees it says itself: a link that loops or points nowhere, a files folder that vanished (renamed or removed:
then nothing is synced, so the index is not emptied; watching resumes when the folder is back), a sync that failed
(tried again later, sooner if the folder changes). Several processes on one index (a Chroma server, or the app and
``crag watch``): the build lock lets one sync; the others find it taken, follow the index it commits, and look
again once it is free (a sync that finds nothing to do commits nothing).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileAttribEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

from crag.config import Settings
from crag.errors import CragError
from crag.files import ignored, scan
from crag.jobs import Builds, Job, JobKind, Trigger
from crag.store import BuildInProgress, open_store

log = logging.getLogger("crag.watch")

TAIL = 1024  # bytes at a PDF's end that hold its %%EOF marker
INCOMPLETE_QUIETS = 15  # quiet periods a PDF without its end may stay unchanged before it is read as it is
RETRY_FIRST = 5.0  # seconds before a sync that failed is tried again (doubling each time, up to RETRY_MAX)
RETRY_MAX = 300.0
TICK_MAX = 0.5  # seconds between two looks at the folder's state, at most
# What changes a folder; opening and reading a file (the build's own reads) do not.
CHANGES: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileClosedEvent,
    FileMovedEvent,
    FileAttribEvent,  # permissions fixed: a file that could not be read may be now
    DirCreatedEvent,  # a folder moved in: its PDFs come without events of their own
    DirDeletedEvent,
    DirMovedEvent,
]


class Waiting(StrEnum):
    """Why a file of the folder waits for the next sync."""

    CHANGED = "changed"  # new or changed: to be read
    REMOVED = "removed"  # no longer there: its passages go at the sync
    WRITING = "writing"  # still being written: growing, or without its end yet


@dataclass(frozen=True, kw_only=True)
class WatchState:
    """The watcher as the page and the API show it. A new value on every change (``version`` counts them)."""

    mode: str  # CRAG_WATCH: on | poll | off
    watching: bool = False  # the folder is being watched now
    waiting: dict[str, Waiting] = field(default_factory=dict)  # files a sync has yet to take in, by name
    problems: dict[str, str] = field(default_factory=dict)  # files no build can read, and why
    synced_at: float | None = None  # when the index was last seen in step with the folder (time.time())
    syncs: int = 0  # syncs this watcher started
    syncing: bool = False  # one of them runs now
    removed: tuple[str, ...] = ()  # the files the last sync removed
    error: str = ""  # why the folder is not watched now, or how it is watched when not as asked
    failed: str = ""  # why the last sync failed, and when it is tried again
    version: int = 0


def _identity(folder: Path) -> tuple[int, int] | None:
    """The folder's device and inode: another folder put in its place has others. None when it is not there."""
    try:
        st = folder.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if os.path.isdir(folder) else None


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns)


def whole(path: Path) -> bool:
    """Whether a PDF has its end: the ``%%EOF`` marker in its last ``TAIL`` bytes. A file that cannot be read counts
    as whole: the build says why it cannot be read."""
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - TAIL))
            return b"%%EOF" in fh.read(TAIL)
    except OSError:
        return True


def broken_link(path: Path) -> str:
    """Why a file of the folder is a link no build can follow ("" when it is none): it loops, or points nowhere."""
    if not path.is_symlink():
        return ""
    try:
        path.resolve(strict=True)
    except RuntimeError:  # Python's own word for a loop
        return "a symbolic link that loops back on itself: it was not read. Replace it with the file it should be."
    except OSError as exc:
        if exc.errno == 40:  # ELOOP
            return "a symbolic link that loops back on itself: it was not read. Replace it with the file it should be."
        return "a symbolic link to a file that does not exist: it was not read. Fix the link or remove it."
    return ""


def folder_differs(settings: Settings) -> bool:
    """Whether the files folder holds anything the index does not, as last built (a file new, gone, or of another
    size or time): what decides a sync when a watcher starts. Cheap: nothing is read but the manifest."""
    records = {m.file: m for m in open_store(settings).manifest() if m.file.lower().endswith(".pdf")}
    seen = set()
    for path in scan(settings.files_dir):
        name = path.relative_to(settings.files_dir).as_posix()
        if not name.lower().endswith(".pdf"):
            continue  # never indexed: nothing for a sync to do
        seen.add(name)
        old = records.get(name)
        st = path.stat()
        if old is None or (old.size, old.mtime_ns) != (st.st_size, st.st_mtime_ns):
            return True
    return any(name not in seen and not m.detached for name, m in records.items())


@dataclass
class _Change:
    at: float  # monotonic time of its last event
    stat: tuple[int, int] | None  # size and modification time then
    writing: bool = False


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        paths = [event.src_path, getattr(event, "dest_path", "")]
        self.watcher.saw([os.fsdecode(p) for p in paths if p], event.is_directory)


class Watcher:
    """Watches the files folder of ``settings`` and syncs it through ``builds``. ``on_synced(job)`` is called from
    the watcher's thread when a build ends (the command line prints it)."""

    def __init__(self, settings: Settings, builds: Builds, on_synced: Callable[[Job], None] | None = None) -> None:
        self.settings, self.builds = settings, builds
        self.on_synced = on_synced or (lambda job: None)
        self.root = settings.files_dir.resolve()
        self.index_dir = settings.chroma_dir.resolve()
        self.quiet = settings.watch_quiet
        self._lock = threading.Lock()
        self._wake, self._stop = threading.Event(), threading.Event()
        self._thread: threading.Thread | None = None
        self._observer: BaseObserver | None = None
        self._identity: tuple[int, int] | None = None
        self._changes: dict[str, _Change] = {}  # PDFs changed since a sync took them in, by name
        self._dirty = False  # a change not synced yet (a folder's, too)
        self._last_event = 0.0
        self._job: str | None = None  # the sync this watcher started, while it runs
        latest = builds.latest
        self._seen_job = latest.id if latest is not None and latest.state != "running" else None
        self._retry_at = 0.0
        self._backoff = RETRY_FIRST
        self._state = WatchState(mode=settings.watch)

    # ---- the outside

    @property
    def state(self) -> WatchState:
        with self._lock:
            waiting = {name: self._waiting(name, change) for name, change in self._changes.items()}
            return replace(self._state, waiting=waiting)

    def start(self) -> Watcher:
        """Start watching, in a thread of its own; nothing when ``CRAG_WATCH=off``."""
        if self.settings.watch == "off" or self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._loop, name="crag-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._unwatch()

    # ---- events (the observer's thread)

    def saw(self, paths: list[str], is_directory: bool) -> None:
        """An event's paths: a relevant one marks the folder changed and starts the quiet period anew."""
        now = time.monotonic()
        relevant = False
        with self._lock:
            for path in map(Path, paths):
                name = self._name(path)
                if name is None or not (is_directory or name.lower().endswith(".pdf")):
                    continue  # only PDFs are indexed; a folder's event may bring or take PDFs that have none
                relevant = True
                if not is_directory:
                    self._changes[name] = _Change(now, _stat(path))
                    self._note_link(name, path)
            if relevant:
                self._dirty, self._last_event, self._retry_at = True, now, 0.0
                self._bump()
        if relevant:
            self._wake.set()

    def _name(self, path: Path) -> str | None:
        """The path's name in the folder, or None for a path the watcher leaves alone (hidden, temporary, the
        index's folder when it is inside)."""
        if path == self.index_dir or self.index_dir in path.parents:
            return None
        try:
            name = path.relative_to(self.root)
        except ValueError:
            return None
        if not name.parts or any(map(ignored, name.parts)):
            return None
        return name.as_posix()

    def _note_link(self, name: str, path: Path) -> None:
        problems = dict(self._state.problems)
        why = broken_link(path)
        if why:
            problems[name] = why
        else:
            problems.pop(name, None)
        if problems != self._state.problems:
            self._state = replace(self._state, problems=problems)

    def _waiting(self, name: str, change: _Change) -> Waiting:
        if change.writing:
            return Waiting.WRITING
        return Waiting.CHANGED if (self.root / name).exists() else Waiting.REMOVED

    def _bump(self, **changes: Any) -> None:
        """A new state (under the lock): the page redraws when ``version`` moves."""
        self._state = replace(self._state, version=self._state.version + 1, **changes)

    def _set(self, **changes: Any) -> None:
        with self._lock:
            self._bump(**changes)

    # ---- the watcher's thread

    def _loop(self) -> None:
        tick = min(TICK_MAX, self.quiet / 2)
        while not self._stop.is_set():
            try:
                self._step()
            except Exception:  # noqa: BLE001 - the watcher outlives what one look meets; the log has it
                log.exception("the watcher's look at %s failed", self.root)
            self._wake.wait(tick)
            self._wake.clear()

    def _step(self) -> None:
        self._follow_folder()
        self._take_in_jobs()
        now = time.monotonic()
        with self._lock:
            due = self._dirty and now - self._last_event >= self.quiet and now >= self._retry_at
        if not due or self._observer is None or self.builds.running is not None or not self._settled(now):
            return
        if _identity(self.root) == self._identity:  # never a sync of a folder that just went: it would empty the index
            self._start_sync(now)

    def _follow_folder(self) -> None:
        """Watch the folder, again once it is back after it vanished (renamed away, removed, replaced)."""
        identity = _identity(self.root)
        if identity == self._identity and (self._observer is not None or identity is None):
            return  # watched, or still gone (and said so)
        self._unwatch()
        self._identity = identity
        if identity is None:
            self._set(
                watching=False,
                error=f"The files folder {self.root} is not there (renamed, moved or removed?). The knowledge base "
                "stays as it is; watching resumes once the folder is back.",
            )
            return
        note = self._watch()
        self._catch_up(note)

    def _watch(self) -> str:
        """Start the observer; polling when the system refuses more watches. Returns what to say of it."""
        polling = self.settings.watch == "poll"
        observer: BaseObserver = PollingObserver(timeout=max(1.0, self.quiet)) if polling else Observer()
        try:
            observer.schedule(_Handler(self), str(self.root), recursive=True, event_filter=CHANGES)
            observer.start()
        except OSError as exc:
            if polling:
                raise
            observer = PollingObserver(timeout=max(1.0, self.quiet))
            observer.schedule(_Handler(self), str(self.root), recursive=True, event_filter=CHANGES)
            observer.start()
            self._observer = observer
            return (
                f"The system refused to watch more folders ({exc.strerror}): the files folder is looked at every "
                f"{max(1.0, self.quiet):g} s instead. Raise fs.inotify.max_user_watches to be told of changes."
            )
        self._observer = observer
        return ""

    def _unwatch(self) -> None:
        observer, self._observer = self._observer, None
        if observer is not None:
            observer.stop()
            observer.join(timeout=10)

    def _catch_up(self, note: str) -> None:
        """On (re)starting to watch: a sync when the folder changed while nobody watched, and the links no build
        can follow."""
        try:
            differs = folder_differs(self.settings)
        except (CragError, OSError):
            differs = True  # the sync says what is wrong
        problems = {}
        for path in scan_links(self.root):
            if why := broken_link(path):
                problems[path.relative_to(self.root).as_posix()] = why
        with self._lock:
            self._dirty = self._dirty or differs
            in_step = {} if differs else {"synced_at": time.time()}
            self._bump(watching=True, error=note, problems=problems, **in_step)

    def _settled(self, now: float) -> bool:
        """Whether every changed PDF has stopped changing and holds its end; one that has not is looked at again
        after another quiet period, and one without its end is read as it is once it stayed so long unchanged."""
        settled = True
        with self._lock:
            changes = list(self._changes.items())
        for name, change in changes:
            path = self.root / name
            stat = _stat(path)
            if stat is None:
                continue  # removed: nothing to wait for
            if stat != change.stat:
                change.at, change.stat, settled = now, stat, False
            elif not whole(path) and now - change.at < INCOMPLETE_QUIETS * self.quiet:
                settled = False
                if not change.writing:
                    change.writing = True
                    self._set()
            elif change.writing:
                change.writing = False
                self._set()
        if not settled:
            with self._lock:
                self._last_event = max(self._last_event, now - self.quiet / 2)  # looked at again soon, not at once
        return settled

    def _start_sync(self, now: float) -> None:
        try:
            job = self.builds.start(rebuild=False, trigger=Trigger.WATCH)
        except BuildInProgress:
            # Another process builds this index: it syncs, this one follows it, and looks again once it is done.
            with self._lock:
                self._retry_at = now + max(self.quiet, RETRY_FIRST)
            return
        except CragError as exc:
            self._failed(str(exc), now)
            return
        with self._lock:
            self._job, self._dirty = job.id, False
            self._bump(syncs=self._state.syncs + 1, syncing=True)

    def _failed(self, error: str, now: float) -> None:
        with self._lock:
            wait, self._retry_at = self._backoff, now + self._backoff
            self._backoff = min(RETRY_MAX, self._backoff * 2)
            self._dirty = True
            self._bump(
                failed=f"The last sync failed: {error} It is tried again in {wait:.0f} s, or at the next change."
            )

    def _take_in_jobs(self) -> None:
        """A build that ended, whoever started it: the changes it took in are done with."""
        job = self.builds.latest
        if job is None or job.state == "running" or job.id == self._seen_job:
            return
        self._seen_job = job.id
        mine = job.id == self._job
        if mine:
            self._job = None
            self._set(syncing=False)
        if job.kind is JobKind.IMPORT:
            if job.imported is not None and not job.imported.in_step:
                with self._lock:  # the folder and the imported index differ: a watched folder is brought in step
                    self._dirty = True
            return
        if job.state == "done":
            self._synced(job)
        elif job.state == "failed" and mine:
            self._failed(job.error, time.monotonic())
        self.on_synced(job)

    def _synced(self, job: Job) -> None:
        removed = tuple(f.file for f in job.report.files if f.status == "removed") if job.report else ()
        with self._lock:
            self._changes = {name: c for name, c in self._changes.items() if c.at > job.began}
            self._backoff, self._retry_at = RETRY_FIRST, 0.0
            self._bump(synced_at=time.time(), removed=removed, failed="")


def scan_links(root: Path) -> list[Path]:
    """Every symbolic link under the folder that is not a folder (hidden ones excluded): where a loop would be."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not ignored(d)]
        found += [Path(folder, f) for f in files if not ignored(f) and os.path.islink(os.path.join(folder, f))]
    return found
