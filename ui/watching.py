"""The watched files folder in the sidebar (``crag.watch``): that it is watched and when it was last in step with the
index, each file's state between two syncs (waiting, and why; removed; a link no build can read), and the page drawn
again when the folder changes, so that a PDF dropped into it shows "waiting" without a click, then the build's own
"being read", then "indexed".

The watcher lives in the process (``state.watcher``), never in the page's script: a rerun leaves it alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import streamlit as st

from crag.config import Settings
from crag.types import FileResult
from crag.watch import Waiting, WatchState
from ui import state
from ui.text import md_escape

REFRESH = 1.0  # seconds between two looks at the watcher: its line's "N s ago", and a change redraws the page
WAITING = {
    Waiting.CHANGED: "🕒 waiting to be read",
    Waiting.WRITING: "🕒 waiting: still being written",
    Waiting.REMOVED: "🕒 waiting: removed from the folder, its passages go at the next sync",
}
REMOVED = "🗑️ removed"
UNREADABLE = "❌ failed"
DETACHED = "imported without its PDF: answers cite its file and page, without the page's image"


def listed(settings: Settings, files: list[FileResult]) -> list[FileResult]:
    """The Files list's files, with those only the watcher knows of: the files its last sync removed, and links that
    no build can read."""
    watcher = state.watcher(settings)
    if watcher is None:
        return files
    watched = watcher.state
    names = {f.file for f in files}
    extra = [FileResult(file=name, status="removed") for name in watched.removed if name not in names]
    extra += [FileResult(file=n, status="failed", error=why) for n, why in watched.problems.items() if n not in names]
    return sorted([*files, *extra], key=lambda f: f.file.lower()) if extra else files


def labels(settings: Settings) -> dict[str, str]:
    """Each file's state as the watcher sees it, for those that wait for a sync or that it alone knows of."""
    watcher = state.watcher(settings)
    if watcher is None:
        return {}
    watched = watcher.state
    out = {name: REMOVED for name in watched.removed}
    out |= {name: WAITING[why] for name, why in watched.waiting.items()}
    return out | {name: UNREADABLE for name in watched.problems}  # a link that loops stays unreadable


def summary(watched: WatchState, folder: str, now: float | None = None) -> str:
    """The watcher's line: "Watching Files · synced 12 s ago", or what waits for the next sync."""
    mode = "polled every few seconds" if watched.mode == "poll" else "watched"
    if not watched.watching:
        return f":material/visibility_off: **{folder}** is not watched now"
    parts = [f":material/visibility: **{folder}** is {mode}: changes are synced by themselves"]
    if watched.syncing:
        parts.append("syncing now")
    elif n := len(watched.waiting):
        parts.append(f"{n} file{'s' if n > 1 else ''} waiting for the next sync")
    elif watched.synced_at is not None:
        parts.append(f"in step with the index, checked {ago((now or time.time()) - watched.synced_at)}")
    return " · ".join(parts)


def ago(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s ago"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    return f"{seconds // 3600} h ago"


def remember(settings: Settings) -> None:
    """Note the watcher's state this page is drawn with, before the index and the Files list are read: a state that
    moves while they are drawn (a sync ends between the two) then redraws the page, as any later move does."""
    if (watcher := state.watcher(settings)) is not None:
        st.session_state.watch_seen = watcher.state.version


def line(settings: Settings) -> Callable[[], None]:
    """The watcher's line under the Files list, with what went wrong. Returns what to call once the page is drawn:
    the same line as a fragment that looks every second, and redraws the whole page when the watcher's state moved
    (files waiting, a sync begun or ended), once any answer of this run is done."""
    watcher = state.watcher(settings)
    if watcher is None:
        st.caption(
            ":material/visibility_off: The files folder is not watched (CRAG_WATCH=off): click **Rebuild knowledge "
            "base** after adding, changing or removing PDFs."
        )
        return lambda: None
    slot = st.empty()
    with slot.container():
        follow(settings, live=False)

    def watch() -> None:
        with slot.container():
            st.fragment(follow, run_every=REFRESH)(settings)

    return watch


def follow(settings: Settings, live: bool = True) -> None:
    watcher = state.watcher(settings)
    if watcher is None:
        return
    watched = watcher.state
    if live and watched.version != st.session_state.get("watch_seen"):
        st.rerun()  # the whole page: the Files list, the build's status, the figures
    st.caption(summary(watched, md_escape(settings.files_dir.name or str(settings.files_dir))))
    if watched.error:
        st.warning(md_escape(watched.error), icon=":material/visibility_off:")
    if watched.failed:
        st.error(md_escape(watched.failed))


def problem(settings: Settings, file: str) -> str:
    """Why the watcher says a file cannot be read ("" when it does not)."""
    watcher = state.watcher(settings)
    return watcher.state.problems.get(file, "") if watcher is not None else ""
