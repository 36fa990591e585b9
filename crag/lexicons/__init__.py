"""Word lists as data: one ``<name>.txt`` file per list beside this module, read once.

A file holds one entry per line, English and Chinese alike; a line that starts with ``#`` is a comment, and so is
the rest of a line after `` #``. An entry of several words matches them with any run of whitespace between. Entries
are matched case-insensitively where the pattern that uses them says so (every pattern built here does).

To add a word, add a line to its file: the modules that read the list build their patterns from it when they are
imported. Each list says at its top what it is for and how its entries are matched; ``tests/test_lexicons.py``
holds each rule's table of sentences that must and must not match.

This package imports nothing from crag.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Literal

Edges = Literal["word", "start", "none"]
Script = Literal["latin", "han"]


@cache
def entries(name: str) -> tuple[str, ...]:
    """The entries of ``<name>.txt``, in the file's order, comments and blank lines left out."""
    text = resources.files(__name__).joinpath(f"{name}.txt").read_text(encoding="utf-8")
    found: list[str] = []
    for line in text.splitlines():
        entry = re.split(r"\s#", line, maxsplit=1)[0].strip()
        if entry and not entry.startswith("#"):
            found.append(entry)
    return tuple(found)


def words(name: str, script: Script | None = None) -> tuple[str, ...]:
    """The entries of a list, only those in Latin letters (``latin``) or only the others (``han``) when asked."""
    found = entries(name)
    if script is None:
        return found
    return tuple(e for e in found if e.isascii() == (script == "latin"))


def alternation(name: str, edges: Edges = "word", script: Script | None = None) -> str:
    """A non-capturing alternation of a list's entries for a regular expression, longest first, each escaped and its
    spaces any run of whitespace. ``edges`` says where an entry in Latin letters may sit: as a whole word
    (``word``), at the start of a word, as a stem (``start``), or anywhere, the pattern around it saying where
    (``none``). A Chinese entry is matched anywhere: Chinese runs on without spaces. Literals only, so that the
    pattern stays linear."""
    parts = []
    for entry in sorted(words(name, script), key=lambda e: (-len(e), e)):
        body = r"\s+".join(re.escape(w) for w in entry.split())
        latin = entry.isascii()
        before = r"\b" if latin and edges != "none" and re.match(r"\w", entry) else ""
        after = r"\b" if latin and edges == "word" and re.search(r"\w$", entry) else ""
        parts.append(f"{before}{body}{after}")
    return f"(?:{'|'.join(parts)})" if parts else "(?!)"
