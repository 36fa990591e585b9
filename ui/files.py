"""The knowledge base's files in the sidebar: the Files list, Remove a file, and Add PDFs.

The list has a line per file: its status, its name, and under it its pages (how many were read with OCR), its
passages and its problems, whole: a 400 px sidebar wraps them rather than cut them off. While a build runs the list
follows it (a fragment redrawn every second): the file being read and where, the files it has read, those waiting.
"""

from __future__ import annotations

import streamlit as st

from crag.config import Settings
from crag.errors import CragError
from crag.files import REMOVED
from crag.types import FileResult
from ui import state
from ui.text import file_details, file_reason, file_status, md_escape

REFRESH_RUNNING = 1.0  # seconds between two looks at the build the list follows
SCROLL_AFTER = 8  # files listed before the list scrolls in a box of its own
LIST_HEIGHT = 420  # pixels of that box


def files_list(settings: Settings, files: list[FileResult]) -> None:
    """The Files expander: the list, live while a build runs, then Remove a file."""
    if not files:
        return
    running = state.builds(settings).running is not None
    trouble = any(f.status in ("failed", "new", "missing") for f in files)
    with st.expander(f"Files ({len(files)})", expanded=trouble or len(files) <= 5, icon=":material/folder:"):
        with st.container(height=LIST_HEIGHT if len(files) > SCROLL_AFTER else "content", border=False):
            st.fragment(listing, run_every=REFRESH_RUNNING if running else None)(settings, files)
        remove(settings, {f.file: f.chunks for f in files if f.status not in ("missing", "removed")})


def listing(settings: Settings, files: list[FileResult]) -> None:
    """A line per file. During a build, each file's status comes from the build: read, being read, or waiting."""
    job = state.builds(settings).latest
    building = job is not None and job.state == "running"
    progress = job.progress if building else None
    finished = {f.file: f for f in job.files} if building else {}
    for f in files:
        status, shown = file_status(f, progress, finished)
        st.markdown(f"{status} · **{md_escape(f.file)}**")
        if details := file_details(shown):
            st.caption(details)
        if shown.status == "failed":
            st.error(f"**{md_escape(f.file)}**: {file_reason(f.file, shown.error or '')}")


def remove(settings: Settings, present: dict[str, int]) -> None:
    """Take a file out of the knowledge base: it is moved aside, not deleted, and the next build drops it."""
    if not present:
        return
    running = state.builds(settings).running is not None  # the build may be reading it
    with st.popover(
        "Remove a file",
        icon=":material/delete:",
        disabled=running,
        help="Wait for the build to end." if running else None,
    ):
        st.caption(
            f"The file is moved into {md_escape(str(settings.files_dir / REMOVED))}, not deleted. "
            "The next build drops its passages; move it back to index it again."
        )
        file = st.selectbox(
            "File", list(present), index=None, placeholder="Choose a file", key="remove_file", disabled=running
        )
        st.button("Remove", key="remove", disabled=running or file is None, on_click=removing, args=(settings, present))


def removing(settings: Settings, present: dict[str, int]) -> None:
    from crag.ingest.uploads import remove_file  # with the parsers: loaded on a click, not with the first page

    ss = st.session_state
    file = ss.get("remove_file")  # the choice when the button was clicked, not when it was drawn
    if file not in present:
        return
    if state.builds(settings).running is not None:  # it began after the popover was opened
        ss.file_notes = [("warning", "A build is running: remove the file when it ends.")]
        return
    try:
        moved = remove_file(settings.files_dir, file)
    except CragError as exc:
        ss.file_notes = [("error", md_escape(str(exc)))]
        return
    then = " Click **Rebuild knowledge base** to drop its passages." if present[file] else ""
    ss.file_notes = [
        ("success", f"Moved **{md_escape(file)}** into {md_escape(str(moved.parent))} (not deleted).{then}")
    ]


def upload(settings: Settings) -> None:
    ss = st.session_state
    files = st.file_uploader(
        "Add PDFs",
        type=["pdf"],
        accept_multiple_files=True,
        key=f"uploader-{ss.uploader}",
        max_upload_size=settings.max_upload_mb,
        help=f"Saved into {settings.files_dir} (PDF only, up to {settings.max_upload_mb} MB each). "
        "Files copied into that folder by hand are picked up the same way by the next rebuild.",
    )
    if files:
        ss.file_notes = save(settings, files)
        ss.uploader += 1  # a new key gives an empty uploader, so a rerun does not save the files again
        st.rerun()
    for kind, note in ss.file_notes:
        getattr(st, kind)(note)


def save(settings: Settings, files: list) -> list[tuple[str, str]]:
    """Save each upload into the files folder; a note on each, as (kind, Markdown)."""
    from crag.ingest.uploads import AlreadyPresent, save_upload

    notes = []
    for file in files:
        try:
            path = save_upload(settings.files_dir, file.name, file.getvalue(), settings.max_upload_mb * 1024 * 1024)
        except AlreadyPresent as exc:
            notes.append(("info", md_escape(str(exc))))
        except CragError as exc:
            notes.append(("error", md_escape(str(exc))))
        except Exception as exc:  # noqa: BLE001 - one bad upload must not stop the others
            notes.append(("error", md_escape(f"{file.name}: could not be saved ({type(exc).__name__}: {exc}).")))
        else:
            notes.append(("success", f"Added **{md_escape(path.name)}**."))
    if any(kind == "success" for kind, _ in notes):
        notes.append(("info", "Click **Rebuild knowledge base** to index the new files."))
    return notes
