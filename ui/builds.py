"""Rebuilding the knowledge base from the sidebar, as a background job of the process.

The build runs in its own thread (``crag.jobs``), not in this page's script: a click, a question or a
reload reruns the page and leaves the build alone. Every session sees the build of the process; a
fragment refreshes its progress every second, and the page redraws when it ends.
"""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from crag.config import Settings
from crag.errors import CragError, said
from crag.jobs import Job, JobKind, Trigger
from ui import archive, state
from ui.text import REMEDIES, build_summary, md_escape, no_images, progress_text, time_left

REFRESH_RUNNING = 1.0  # seconds between two looks at a running build
REFRESH_IDLE = 5.0  # between two looks for a build another session started
# The fragment of the Rebuild button and its toggle. A click on a widget of a fragment reruns that fragment once the
# page's own run has ended, where any other click stops that run: an answer being written would be cut short by a
# build that runs in the background and leaves the old index answering.
CONTROLS = "rebuild_controls"


def rebuild(settings: Settings, top: DeltaGenerator) -> Callable[[], None]:
    """The Rebuild button (off while a build runs), and the build's status: in ``top`` while it runs (the top of the
    sidebar, seen without scrolling), under the button once it ended.

    Returns what to call once the page is drawn. A fragment's timed look does not interrupt the page's own run (an
    answer being made), it waits for it: so without a build, the status is drawn now and watched from the page's
    end, once any answer of the run is done."""
    ss = st.session_state
    runner = state.builds(settings)
    running = runner.running is not None
    st.fragment(controls, key=CONTROLS)(settings)
    if ss.pop("build_now", False) and not running:
        start(settings, ss.get("full_rebuild", False))
    if ss.build_error:
        st.error(f"**The knowledge base was not rebuilt.** {ss.build_error}")
    ss.build_seen = seen(runner.latest)  # what this whole page is drawn with; the fragment watches for changes
    slot = st.empty()

    def watch() -> None:
        with slot.container():
            st.fragment(status, run_every=REFRESH_IDLE)(settings)

    if running:  # its progress moves during an answer too (the chat box then submits, never stops)
        with top:
            st.fragment(status, run_every=REFRESH_RUNNING)(settings)
        return lambda: None
    with slot.container():
        status(settings, live=False)
    return watch


def controls(settings: Settings) -> None:
    """The Full rebuild toggle and the Rebuild button, drawn as a fragment (``CONTROLS``): a click starts the build
    once an answer being written has ended, rather than cut it short."""
    ss = st.session_state
    running = state.builds(settings).running is not None
    if ss.pop("full_started", False):  # a full rebuild is a one-off: the next click is incremental again
        ss.full_rebuild = False
    full = st.toggle(
        "Full rebuild",
        key="full_rebuild",
        help="Re-read and re-embed every file, not only new and changed ones. "
        "Use it after changing the parser or the embedding model.",
    )
    clicked = st.button(
        "Rebuild knowledge base",
        type="primary",
        icon=":material/refresh:",
        key="rebuild",
        width="stretch",
        disabled=running,
        help="A build is running: its progress is at the top of the sidebar." if running else None,
    )
    if clicked and not running:
        start(settings, full)
    elif not running and state.answering():
        # A click now reruns this fragment once the answer has ended, and nothing on the page moves until then: said
        # here beforehand, since the page cannot answer the click while the answer is being written.
        st.caption(":material/schedule: An answer is being written: a build you start now begins when it ends.")


def seen(job: Job | None) -> tuple[str, str] | None:
    return (job.id, job.state) if job else None


def start(settings: Settings, full: bool) -> None:
    ss = st.session_state
    ss.file_notes = []  # "click Rebuild" is done
    ss.build_error = ""
    try:
        state.builds(settings).start(full)
    except CragError as exc:  # another build (here or in another process), an unwritable folder
        ss.build_error = md_escape(str(exc))
    else:
        ss.full_started = full
    # The whole page, from a fragment's click too: the button off and the progress on, or why nothing started.
    st.rerun()


def status(settings: Settings, live: bool = True) -> None:
    """The latest build of the process: progress and Cancel while it runs, its outcome once it ended. Drawn
    before the page's end (``live`` False), it has no Cancel button: the fragment drawn after it has.

    A change (a build started elsewhere, a build ended) redraws the whole page: the knowledge base's
    figures, the Rebuild button, the chat's notice.
    """
    ss = st.session_state
    runner = state.builds(settings)
    job = runner.latest
    if seen(job) != ss.get("build_seen"):
        st.rerun()  # the whole page
    if job is None:
        return
    if job.state == "running":
        what = "Rebuilding the knowledge base from scratch" if job.rebuild else "Updating the knowledge base"
        if job.kind is JobKind.IMPORT:
            what = f"Importing {md_escape(job.archive)}"
        elif job.trigger is Trigger.WATCH:
            what = "Syncing the changes in the files folder"
        st.markdown(f":material/hourglass_top: **{what}**")
        left = time_left(job.pace.left())
        st.progress(
            job.pace.share(job.progress.fraction), text=progress_text(job.progress) + (f" · {left}" if left else "")
        )
        if live and st.button("Cancel the build", key="cancel_build", icon=":material/stop_circle:", width="stretch"):
            runner.cancel(job.id)
            st.caption("Cancelling: the build stops at its next step; the current knowledge base keeps answering.")
        else:
            st.caption("Questions are answered from the current knowledge base until the build is done.")
        return
    outcome(job, state.watcher(settings) is not None)


def outcome(job: Job, watched: bool = False) -> None:
    if job.kind is JobKind.IMPORT:
        archive.outcome(job, watched)
        return
    what = "Rebuilt from scratch" if job.rebuild else "Synced" if job.trigger is Trigger.WATCH else "Updated"
    if job.state == "cancelled":
        st.info(job.error, icon=":material/stop_circle:")
    elif job.state == "failed":
        detail = f" ({md_escape(job.detail)})" if job.detail else ""
        error = said(no_images(job.error), job.remedy, REMEDIES)
        st.error(f"**The knowledge base was not rebuilt.** {error}{detail}")
    elif job.report is not None:
        report = job.report
        failed = [f for f in report.files if f.status == "failed"]
        summary = build_summary((f.status for f in report.files), report.total_chunks, report.seconds)
        if failed:  # why each failed is said once, under its name in the Files list (opened when one failed)
            names = ", ".join(md_escape(f.file) for f in failed)
            st.warning(f"{what}: {summary}.  \nNot indexed: {names}. The Files list says why.", icon="⚠️")
        else:
            st.success(f"{what}: {summary}.", icon="✅")
        for note in report.notes:  # an index the build could not read, and where it was moved
            st.warning(md_escape(note))
