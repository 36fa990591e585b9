"""The knowledge base's files in the sidebar: the Files list, Remove a file, and Add PDFs.

The list has a line per file: its status, its name, and under it its pages (how many were read with OCR), its
passages and its problems, whole: a 400 px sidebar wraps them rather than cut them off. While a build runs the list
follows it (a fragment redrawn every second): the file being read and where, the files it has read, those waiting.
"""

from __future__ import annotations

import streamlit as st

import crag.files
from crag.config import Settings
from crag.errors import CragError
from crag.files import REMOVED
from crag.scope import TOP_LEVEL
from crag.types import FileResult
from ui import state, watching
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
    running = job if job is not None and job.state == "running" else None
    progress = running.progress if running else None
    finished = {f.file: f for f in running.files} if running else {}
    watched = watching.labels(settings)  # what waits for the watcher's next sync, and what it alone knows of
    grouped = any("/" in f.file for f in files)  # folders are knowledge bases: their files are listed under them
    folder = None
    for f in sorted(files, key=lambda f: f.file.lower().rpartition("/")[::2]) if grouped else files:
        where, _, name = f.file.rpartition("/")
        if grouped and where != folder:
            folder = where
            st.markdown(f"**:material/folder_open: {md_escape(where or TOP_LEVEL)}**")
        status, shown = file_status(f, progress, finished, rebuild=running is not None and running.rebuild)
        if f.file in watched and f.file not in finished and not (progress and progress.file == f.file):
            status = watched[f.file]  # the build's own word for a file it reads or has read comes first
        st.markdown(f"{status} · **{md_escape(name if grouped else f.file)}**")
        if details := file_details(shown):
            st.caption(details)
        if shown.detached:
            st.caption(watching.DETACHED)
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
    if present[file] and state.watcher(settings) is not None:
        then = " Its passages go at the next sync, in a few seconds: the folder is watched."
    ss.file_notes = [
        ("success", f"Moved **{md_escape(file)}** into {md_escape(str(moved.parent))} (not deleted).{then}")
    ]


def upload(settings: Settings) -> None:
    ss = st.session_state
    with st.container(horizontal=True, vertical_alignment="bottom"):
        folder = st.selectbox(
            "Add PDFs into",
            [TOP_LEVEL, *crag.files.folders(settings.files_dir)],
            key="upload_folder",
            help="Each folder is a knowledge base that a chat can ask alone; (top level) is the files folder itself.",
        )
        with st.popover("New folder", icon=":material/create_new_folder:"):
            st.text_input("Folder name", key="new_folder", placeholder="projects/alpha", max_chars=200)
            st.button("Create", key="create_folder", on_click=create_folder, args=(settings,))
    files = st.file_uploader(
        "Add PDFs",
        type=["pdf"],
        accept_multiple_files=True,
        key=f"uploader-{ss.uploader}",
        max_upload_size=settings.max_upload_mb,
        help=f"Saved into {settings.files_dir} (PDF only, up to {settings.max_upload_mb} MB each), in the folder "
        "chosen above. Files copied into that folder by hand are picked up the same way by the next rebuild.",
        label_visibility="collapsed",
    )
    if files:
        ss.file_notes = save(settings, files, folder)
        ss.uploader += 1  # a new key gives an empty uploader, so a rerun does not save the files again
        st.rerun()
    for kind, note in ss.file_notes:
        getattr(st, kind)(note)


def create_folder(settings: Settings) -> None:
    from crag.ingest.uploads import make_folder

    ss = st.session_state
    try:
        made = make_folder(settings.files_dir, ss.get("new_folder", ""))
    except CragError as exc:
        ss.file_notes = [("error", md_escape(str(exc)))]
        return
    ss.upload_folder, ss.new_folder = made, ""  # the next uploads go there
    ss.file_notes = [("success", f"Made the folder **{md_escape(made)}**: PDFs added now go into it.")]


def save(settings: Settings, files: list, folder: str = TOP_LEVEL) -> list[tuple[str, str]]:
    """Save each upload into ``folder`` of the files folder; a note on each, as (kind, Markdown)."""
    from crag.ingest.uploads import AlreadyPresent, save_upload

    into = "" if folder == TOP_LEVEL else folder
    where = f" to **{md_escape(folder)}**" if into else ""
    notes = []
    for file in files:
        try:
            path = save_upload(
                settings.files_dir, file.name, file.getvalue(), settings.max_upload_mb * 1024 * 1024, folder=into
            )
        except AlreadyPresent as exc:
            notes.append(("info", md_escape(str(exc))))
        except CragError as exc:
            notes.append(("error", md_escape(str(exc))))
        except Exception as exc:  # noqa: BLE001 - one bad upload must not stop the others
            notes.append(("error", md_escape(f"{file.name}: could not be saved ({type(exc).__name__}: {exc}).")))
        else:
            notes.append(("success", f"Added **{md_escape(path.name)}**{where}."))
    if any(kind == "success" for kind, _ in notes):
        if state.watcher(settings) is not None:
            notes.append(("info", "They are indexed by themselves in a few seconds: the folder is watched."))
        else:
            notes.append(("info", "Click **Rebuild knowledge base** to index the new files."))
    return notes
