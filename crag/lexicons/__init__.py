"""Word lists as data: one ``<name>.txt`` file per list beside this module, read once.

A file holds one entry per line, English and Chinese alike; a line that starts with ``#`` is a comment, and so is
the rest of a line after `` #``. An entry of several words matches them with any run of whitespace between. Entries
are matched case-insensitively where the pattern that uses them says so (every pattern built here does).

To add a word, add a line to its file: the modules that read the list build their patterns from it when they are
imported. Each list says at its top what it is for, and declares how its entries are matched on a line of its own,
``# match: <how>`` (``MATCHES``): the patterns built from it (``alternation``) take that, and no caller says otherwise.
``tests/test_lexicons.py`` holds each rule's table of sentences that must and must not match.

This package imports nothing from crag.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Literal

Match = Literal["word", "start", "anywhere", "stem"]
Script = Literal["latin", "han"]
# How a list's entries are matched: where an entry in Latin letters may sit in a text (a Chinese one is matched
# anywhere: Chinese runs on without spaces).
MATCHES: dict[str, str] = {
    "word": "as a whole word",
    "start": "at the start of a word (a stem: 'licens' matches 'licensing')",
    "anywhere": "anywhere, the pattern around it saying where",
    "stem": "compared with a text's words by their stem (crag.text.stem), by the code that reads the list",
}
_DECLARED = re.compile(r"#\s*match:\s*(\w+)\s*$")


@cache
def matching(name: str) -> Match:
    """How a list's entries are matched, as its ``# match:`` line declares. A list that declares none, or a way not in
    ``MATCHES``, is refused: a rule must not guess."""
    for line in _text(name).splitlines():
        if found := _DECLARED.fullmatch(line.strip()):
            if found[1] not in MATCHES:
                raise ValueError(f"{name}.txt: unknown match {found[1]!r}, not one of {', '.join(MATCHES)}")
            return found[1]  # type: ignore[return-value]  # checked against MATCHES just above
    raise ValueError(f"{name}.txt declares no '# match:' line ({', '.join(MATCHES)})")


def _text(name: str) -> str:
    return resources.files(__name__).joinpath(f"{name}.txt").read_text(encoding="utf-8")


@cache
def entries(name: str) -> tuple[str, ...]:
    """The entries of ``<name>.txt``, in the file's order, comments and blank lines left out."""
    text = _text(name)
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


def alternation(name: str, script: Script | None = None) -> str:
    """A non-capturing alternation of a list's entries for a regular expression, matched as the list declares
    (``matching``): longest first, each escaped and its spaces any run of whitespace."""
    match = matching(name)
    if match == "stem":
        raise ValueError(f"{name}.txt is compared by stems, not matched by a pattern")
    return alternative(words(name, script), match)


def alternative(found: tuple[str, ...], match: Match) -> str:
    """``alternation`` of these entries, matched so: an entry in Latin letters as a whole word (``word``), at the start
    of a word (``start``), or anywhere (``anywhere``); a Chinese one anywhere. Literals only, so that the pattern stays
    linear."""
    parts = []
    for entry in sorted(found, key=lambda e: (-len(e), e)):
        body = r"\s+".join(re.escape(w) for w in entry.split())
        latin = entry.isascii()
        before = r"\b" if latin and match != "anywhere" and re.match(r"\w", entry) else ""
        after = r"\b" if latin and match == "word" and re.search(r"\w$", entry) else ""
        parts.append(f"{before}{body}{after}")
    return f"(?:{'|'.join(parts)})" if parts else "(?!)"
