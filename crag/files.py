"""The files folder (``Files/``, ``CRAG_FILES_DIR``): which files it holds.

Apart from ``crag.ingest`` so that listing the folder loads no parser, model or index: the app's first page lists
it before anything else is loaded.
"""

from __future__ import annotations

from pathlib import Path

REMOVED = ".removed"  # where files removed in the app go (``crag.ingest.uploads``): hidden, so builds skip them


def scan(files_dir: Path) -> list[Path]:
    """Every file under the folder, hidden files and folders excluded, in a stable order."""
    if not files_dir.is_dir():
        return []
    return sorted(
        p
        for p in files_dir.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(files_dir).parts)
    )


def folders(files_dir: Path) -> list[str]:
    """Every folder under the files folder (the knowledge bases a PDF can go into), hidden ones excluded, as paths
    relative to it, in a stable order."""
    if not files_dir.is_dir():
        return []
    found = (p.relative_to(files_dir) for p in files_dir.rglob("*") if p.is_dir())
    return sorted((p.as_posix() for p in found if not any(part.startswith(".") for part in p.parts)), key=str.lower)
