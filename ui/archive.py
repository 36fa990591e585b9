"""Export and import in the sidebar (``crag.archive``): the knowledge base as one file to download, and an archive
uploaded to import, checked as the command line checks it. An import is a job of the process's runner, as a build
is: its progress and its outcome show where a build's do, and the index that answered answers until it is committed.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import streamlit as st

from crag.config import Settings
from crag.errors import CragError
from crag.jobs import Job
from ui import state
from ui.text import md_escape

SHOWN = 8  # names listed per kind of difference between the folder and an imported archive


def render(settings: Settings, built: bool) -> None:
    """The Export or import expander: a download of the knowledge base (when there is one) and an upload."""
    ss = st.session_state
    ss.setdefault("importer", 0)  # the upload's key suffix: a new key empties it once the import has started
    with st.expander("Export or import", icon=":material/move_item:"):
        st.caption(
            "One file holds the whole knowledge base: passages, vectors and the index, with the PDFs if you like. "
            "Imported on another machine, it answers at once, without a rebuild."
        )
        if built:
            with_files = st.toggle(
                "With the PDFs",
                key="export_with_files",
                help="Without them, answers still cite each file and page, but show no page images.",
            )
            with_ratings = st.toggle(
                "With my ratings",
                key="export_with_ratings",
                help="The 👍 👎 of its answers, with the questions and the conversation before each: whoever opens "
                "the file reads them.",
            )
            st.download_button(
                "Download the knowledge base",
                data=lambda: exported(settings, with_files, with_ratings),  # made when clicked, in a thread of its own
                file_name=f"{settings.files_dir.name or 'knowledge-base'}-{time.strftime('%Y%m%d')}.crag",
                mime="application/zip",
                on_click="ignore",
                icon=":material/download:",
                width="stretch",
                key="export",
            )
        upload = st.file_uploader(
            "Import a knowledge base (.crag)",
            type=["crag"],
            key=f"importer-{ss.importer}",
            help="Checked before anything changes: its format, its embeddings, every part's hash. A refused import "
            "leaves the current knowledge base answering, and says why.",
        )
        if upload is not None:
            start(settings, upload)


def exported(settings: Settings, with_files: bool, with_ratings: bool) -> bytes:
    from crag.archive import export_archive

    with tempfile.TemporaryDirectory(prefix="crag-export-") as folder:
        target = Path(folder) / "kb.crag"
        export_archive(settings, target, with_files=with_files, with_ratings=with_ratings)
        return target.read_bytes()


def start(settings: Settings, upload) -> None:
    """The upload saved to a temporary file, then imported by the runner, which removes the file once done."""
    ss = st.session_state
    fd, name = tempfile.mkstemp(prefix="crag-import-", suffix=".crag")
    with os.fdopen(fd, "wb") as fh:
        fh.write(upload.getvalue())
    try:
        state.builds(settings).start_import(Path(name), name=upload.name, remove=True)
    except CragError as exc:  # a build runs: the upload is given back to try again later
        Path(name).unlink(missing_ok=True)
        ss.build_error = md_escape(str(exc))
    ss.importer += 1
    st.rerun()


def outcome(job: Job, watched: bool) -> None:
    """An import's end: refused and why, or what it committed and how the files folder compares."""
    if job.state != "done" or job.imported is None:
        kind = st.info if job.state == "cancelled" else st.error
        said = job.error if job.error.startswith(job.archive) else f"{job.archive} was not imported: {job.error}"
        kind(md_escape(said) + (f" ({md_escape(job.detail)})" if job.detail else ""))
        return
    got = job.imported
    st.success(
        f"Imported **{md_escape(got.archive)}**: {got.files:,} files, {got.chunks:,} passages. It answers now.",
        icon="✅",
    )
    folder = "the files folder"
    for names, what in (
        (got.placed, f"PDFs put into {folder}"),
        (got.absent, "files without their PDF here: answers cite their file and page, without page images"),
        (got.differs, f"PDFs of {folder} that differ from the archive's (the folder's copies were kept)"),
        (got.extra, f"PDFs of {folder} that the archive does not hold"),
    ):
        if names:
            shown = ", ".join(md_escape(n) for n in names[:SHOWN]) + (" …" if len(names) > SHOWN else "")
            st.caption(f"{len(names)} {what}: {shown}")
    for note in got.notes:
        st.caption(md_escape(note))
    if got.in_step:
        return
    if watched:
        st.info("The folder and the archive differ: the watcher syncs them now.", icon=":material/sync:")
    else:
        st.info("The folder and the archive differ: **Rebuild knowledge base** syncs them (incremental).")
