"""The files folder (``Files/``, ``CRAG_FILES_DIR``): which files it holds.

Apart from ``crag.ingest`` so that listing the folder loads no parser, model or index: the app's first page lists
it before anything else is loaded.
"""

from __future__ import annotations

from pathlib import Path

REMOVED = ".removed"  # where files removed in the app go (``crag.ingest.uploads``): hidden, so builds skip them
# What editors, office suites and browsers write beside a file while they work on it: never a document.
TEMPORARY_SUFFIXES = (".tmp", ".temp", ".swp", ".swo", ".swx", ".part", ".partial", ".crdownload", ".download")


def ignored(name: str) -> bool:
    """Whether a file or folder name is left out of the knowledge base: hidden (``.name``, and so ``.removed``), or
    an editor's temporary file (``~$report.pdf``, ``report.pdf~``, ``#report.pdf#``, ``report.pdf.part``)."""
    lower = name.lower()
    return lower.startswith((".", "~", "#")) or lower.endswith(("~", "#", *TEMPORARY_SUFFIXES))


def scan(files_dir: Path) -> list[Path]:
    """Every file under the folder, hidden and temporary files (``ignored``) and hidden folders excluded, in a stable
    order."""
    if not files_dir.is_dir():
        return []
    return sorted(
        p for p in files_dir.rglob("*") if p.is_file() and not any(map(ignored, p.relative_to(files_dir).parts))
    )


def folders(files_dir: Path) -> list[str]:
    """Every folder under the files folder (the knowledge bases a PDF can go into), hidden ones excluded, as paths
    relative to it, in a stable order."""
    if not files_dir.is_dir():
        return []
    found = (p.relative_to(files_dir) for p in files_dir.rglob("*") if p.is_dir())
    return sorted((p.as_posix() for p in found if not any(part.startswith(".") for part in p.parts)), key=str.lower)
