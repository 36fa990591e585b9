"""Folders as knowledge bases, and the scope of a question.

Every folder under the files folder, nested ones included, is a knowledge base named by its path relative to the
files folder (``projects``, ``projects/alpha``); a folder holds its subfolders' documents too. The PDFs directly in
the files folder are one more, named ``TOP_LEVEL``: a name no path can be mistaken for, where "." would read as the
whole files folder. There is one index; a **scope** is one or more knowledge bases or files, and the default scope
(no paths) is every document. The index applies a scope inside retrieval, before the top k (``crag.store``).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from crag.errors import CragError, Remedy
from crag.types import FileResult

TOP_LEVEL = "(top level)"  # the knowledge base of the PDFs directly in the files folder
HELD = ("indexed", "unchanged")  # statuses of files whose passages the index holds
LISTED = 20  # knowledge bases an error names; the rest are counted


class UnknownScope(CragError):
    """A scope names what the index does not hold. ``missing``: those paths; ``known``: the knowledge bases."""

    def __init__(
        self, message: str, missing: Sequence[str] = (), known: Sequence[str] = (), remedy: Remedy | None = None
    ) -> None:
        super().__init__(message, remedy=remedy)
        self.missing = tuple(missing)
        self.known = tuple(known)


class EmptyScope(UnknownScope):
    """A scope whose documents the index holds no passages of (they failed, or were skipped)."""


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def normal_path(path: str) -> str:
    """A scope path as the index writes file paths: relative, with ``/``, no ``.`` parts, no trailing slash."""
    text = _nfc(path.strip().replace("\\", "/"))
    if text == TOP_LEVEL:
        return text
    if text.startswith("/") or (len(text) > 1 and text[1] == ":"):
        raise UnknownScope(f"The scope “{text[:200]}” is an absolute path: give it relative to the files folder.")
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnknownScope(f"The scope “{text[:200]}” leaves the files folder: give a folder or a file inside it.")
    return "/".join(parts)


@dataclass(frozen=True)
class Scope:
    """Where a question is asked: folders (knowledge bases) or files, relative to the files folder; none: every
    document."""

    paths: tuple[str, ...] = ()

    @classmethod
    def of(cls, paths: Scope | Iterable[str] | None) -> Scope:
        """The scope of these paths, normalised (``normal_path``), duplicates dropped; an empty path names nothing."""
        if isinstance(paths, Scope):
            return paths
        if isinstance(paths, str):
            paths = [paths]
        normal = [normal_path(p) for p in paths or ()]
        if any(not p for p in normal):
            raise UnknownScope(
                "An empty scope path names no folder: leave the scope out to ask every document, or name a folder "
                f"relative to the files folder ({TOP_LEVEL} for the PDFs directly in it)."
            )
        return cls(tuple(dict.fromkeys(normal)))

    def __bool__(self) -> bool:
        return bool(self.paths)

    def holds(self, file: str) -> bool:
        """Whether a file (its path relative to the files folder) is in this scope; with no paths, every file is."""
        return not self.paths or any(_under(_nfc(file), path) for path in self.paths)


EVERYTHING = Scope()


def _under(file: str, path: str) -> bool:
    if path == TOP_LEVEL:
        return "/" not in file
    return file == path or file.startswith(path + "/")


def folders_of(file: str) -> list[str]:
    """The knowledge bases a file belongs to: every folder above it, or ``TOP_LEVEL``."""
    parents = PurePosixPath(file).parents
    found = [p.as_posix() for p in reversed(parents) if p.as_posix() != "."]
    return found or [TOP_LEVEL]


@dataclass(frozen=True)
class KnowledgeBase:
    """A folder of the files folder (or ``TOP_LEVEL``), with what the index holds of it."""

    name: str
    files: int  # documents the index holds passages of, subfolders' included
    chunks: int  # their passages
    other: int = 0  # documents the build failed on or skipped


def knowledge_bases(manifest: Iterable[FileResult]) -> list[KnowledgeBase]:
    """Every knowledge base of an index's manifest, ``TOP_LEVEL`` first, then by name."""
    counts: dict[str, list[int]] = {}
    for entry in manifest:
        if entry.status == "removed":
            continue
        held = entry.status in HELD and entry.chunks > 0
        for name in folders_of(entry.file):
            count = counts.setdefault(name, [0, 0, 0])
            count[0 if held else 2] += 1
            count[1] += entry.chunks if held else 0
    ordered = sorted(counts, key=lambda name: (name != TOP_LEVEL, name.casefold(), name))
    return [KnowledgeBase(name, *counts[name]) for name in ordered]


def resolve(scope: Scope, manifest: Sequence[FileResult], files_dir: Path | None = None) -> frozenset[str]:
    """The files of the scope that the index holds passages of. Raises ``UnknownScope`` for a path that names no
    knowledge base and no file of the index, listing the known ones, and ``EmptyScope`` when none of the scope's
    files has passages. ``files_dir`` tells a path that is in the files folder but not indexed yet."""
    entries = [m for m in manifest if m.status != "removed"]
    if gone := missing(scope, entries):
        raise unknown_scope(gone, knowledge_bases(entries), files_dir)
    held = frozenset(m.file for m in entries if m.status in HELD and m.chunks > 0 and scope.holds(m.file))
    if not held:
        shown = ", ".join(f"`{p}`" for p in scope.paths)
        raise EmptyScope(
            f"The index holds no passage of the documents in {shown}: their build failed or skipped them (the file "
            "list says why). Fix or replace them and rebuild, or ask another folder.",
            known=_names(entries),
        )
    return held


def missing(scope: Scope, manifest: Sequence[FileResult]) -> list[str]:
    """The scope's paths that name no knowledge base and no file of the index: a folder of an old chat that was
    renamed or removed since."""
    names = [_nfc(m.file) for m in manifest if m.status != "removed"]
    return [p for p in scope.paths if not any(_under(name, p) for name in names)]


def _names(entries: Sequence[FileResult]) -> list[str]:
    return [kb.name for kb in knowledge_bases(entries)]


def unknown_scope(paths: Sequence[str], known: Sequence[KnowledgeBase], files_dir: Path | None = None) -> UnknownScope:
    """The error for scope paths that name nothing in the index: it lists the knowledge bases."""
    remedy = None if known else Remedy.BUILD
    return UnknownScope(_unknown_message(paths, known, files_dir), paths, [kb.name for kb in known], remedy)


def _unknown_message(paths: Sequence[str], known: Sequence[KnowledgeBase], files_dir: Path | None) -> str:
    shown = ", ".join(f"“{p[:200]}”" for p in paths)
    if not known:
        return f"No folder or file {shown} in the knowledge base: nothing is indexed yet. Build it, then ask again."
    listed = ", ".join(f"`{kb.name}` ({kb.files} {'file' if kb.files == 1 else 'files'})" for kb in known[:LISTED])
    if len(known) > LISTED:
        listed += f" and {len(known) - LISTED} more"
    message = (
        f"No folder or file {shown} in the knowledge base. Its folders: {listed}. Name one of them, or a file, by its "
        f"path relative to the files folder (`{TOP_LEVEL}` is the PDFs directly in it); leave the scope out to ask "
        "every document."
    )
    waiting = [p for p in paths if files_dir is not None and p != TOP_LEVEL and (files_dir / p).exists()]
    if waiting:
        message += (
            f" {', '.join(f'“{p}”' for p in waiting)} {'is' if len(waiting) == 1 else 'are'} in the files folder but "
            "not indexed yet: rebuild the knowledge base first."
        )
    return message
