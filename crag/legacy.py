"""Answers kept before answers were parts: their text read back into parts, once, as they load.

A chat (``crag.conversations``) or a rated answer's export kept from before holds an answer's text alone. Its parts are
found again the way the app once read them: a lead line, quotes in “ ” with their [n] after the document's question
(a FAQ's), fenced code and tables each with its [n] on a line of its own, an ask's heading in bold, a document's
outline as a list. Nothing else reads an answer's text: every answer made now carries its parts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from crag.blocks import table_rows
from crag.parts import Code, Heading, Lead, Note, Outline, Part, Quote, Table, Written, after
from crag.quotes import LEADS, SCOPED_LEADS, spaced

# A line of an evidence answer: the FAQ question it answers, when there is one (it ends at its question mark and
# may quote words itself: "如何使用“甲”命令？"), then “the quote” [n].
# The question is the text up to the first question mark that a space and the opening quote follow: tried once
# (an atomic group), since a later one would leave a quote that ends the same way.
LINE = re.compile(r"^(?>(?P<faq>[^“\s].*?[?？])\s+(?=“))?“(?P<quote>.*)” \[(?P<n>\d+)\]$")
CITATION_LINE = re.compile(r"\[(\d+)\]")  # a block's citation, on a line of its own
FENCE = re.compile(r"(`{3,})([\w+-]*)")
OUTLINE_ITEM = re.compile(r"^(?P<indent>\s*)- (?P<text>.+)$")
BOLD_OPENING = re.compile(r"^\*\*(?P<bold>.+)\*\*(?P<rest>[^*]*)$")
ASK_HEADING = re.compile(r"^\*\*(?P<n>\d++)\. (?P<text>.+)\*\*$")
# The scoped leads as patterns: their places are the question's folders or files. Anchored: tried from one place only.
_SCOPED_LEAD = [
    re.compile("^" + re.escape(lead).replace(re.escape("{places}"), "[^\n]+")) for lead in SCOPED_LEADS.values()
]


def is_lead(line: str) -> bool:
    """Whether a line is one of the lead lines an evidence answer opens a group of quotes with."""
    return line in LEADS.values() or any(lead.fullmatch(line) for lead in _SCOPED_LEAD)


def stored_parts(text: str, kind: str) -> tuple[Part, ...]:
    """The parts of an answer kept as ``text`` alone, made as an answer of ``kind`` (evidence, generated, no_answer).
    A written answer's own text is one ``Written`` part, an ask's heading a ``Heading``, the quotes under it quoted
    parts; a message that says why there is no answer a ``Note``."""
    if kind == "no_answer":
        return (Note(text=text.strip()),) if text.strip() else ()
    if kind == "evidence":
        return tuple(_quoted(text.split("\n")))
    parts: list[Part] = []
    for section in re.split(r"^(?=\*\*\d++\. )", text, flags=re.MULTILINE):
        if not section.strip():
            continue
        lines = section.strip().split("\n")
        heading = ASK_HEADING.match(lines[0])
        if heading:
            parts.append(Heading(text=heading["text"], ask=int(heading["n"]), gap="\n\n" if parts else ""))
            lines = lines[1:]
        own, quotes = split_quotes("\n".join(lines).strip())
        if own:
            parts.append(Written(text=own, gap="\n\n" if parts else ""))
        if quotes:
            parts += after("\n\n" if parts else "", _quoted(quotes.split("\n")))
    return tuple(parts)


def _quoted(lines: Sequence[str]) -> list[Part]:
    """The parts of an evidence answer's lines: leads, quotes, blocks, an outline, headings; another line as a lead
    (a line the app set: "3 documents. What each says it is:")."""
    parts: list[Part] = []
    for _, found in _read(lines):
        if not isinstance(found, str):
            parts.append(found)
        elif quote := LINE.match(found.strip()):
            parts.append(Quote(text=quote["quote"], n=int(quote["n"]), faq=quote["faq"] or ""))
        elif (item := OUTLINE_ITEM.match(found)) and parts and isinstance(parts[-1], Outline):
            entry = (len(item["indent"]) // 2, item["text"])
            parts[-1] = Outline(heading=parts[-1].heading, entries=(*parts[-1].entries, entry))
        elif item and parts and isinstance(parts[-1], Lead):
            parts[-1] = Outline(heading=parts[-1].text, entries=((len(item["indent"]) // 2, item["text"]),))
        elif bold := BOLD_OPENING.match(found):
            parts.append(Heading(text=bold["bold"], detail=bold["rest"]))
        else:
            parts.append(Lead(text=found.strip()))
    return spaced(parts)


def split_quotes(text: str) -> tuple[str, str]:
    """A written answer's own text, and the quotes under it: from the first lead line after which every line is a
    lead, a quote or a block. The quotes are "" when there are none."""
    lines = text.split("\n")
    read = _read(lines)
    for k, (i, found) in enumerate(read):
        if not (isinstance(found, str) and is_lead(found.strip())):
            continue
        rest = [p for _, p in read[k:]]
        if all(not isinstance(p, str) or is_lead(p.strip()) or LINE.match(p.strip()) for p in rest):
            return "\n".join(lines[:i]).strip(), "\n".join(lines[i:]).strip()
    return text, ""


def _read(lines: Sequence[str]) -> list[tuple[int, str | Code | Table]]:
    """The answer's non-blank lines and blocks, each with the number of its first line."""
    out: list[tuple[int, str | Code | Table]] = []
    i = 0
    while i < len(lines):
        found = _block(lines, i)
        if found is None:
            if lines[i].strip():
                out.append((i, lines[i]))
            i += 1
            continue
        block, i_next = found
        before = out[-1][1] if out else None
        if isinstance(before, str) and _faq(before.strip()) and not is_lead(before.strip()):
            out.pop()
            out.append((i - 1, replace(block, faq=before.strip())))
        else:
            out.append((i, block))
        i = i_next
    return out


def _faq(line: str) -> bool:
    """A line that is a document's question (the heading of the block after it): no quote, table or code."""
    return line.endswith(("?", "？")) and line[:1] not in ("“", "|", "`")


def _block(lines: Sequence[str], i: int) -> tuple[Code | Table, int] | None:
    """The block that opens at line ``i`` and the line after its citation; None when none does."""
    first = lines[i].strip()
    block: Code | Table
    if fence := FENCE.fullmatch(first):
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == fence[1]), None)
        if end is None:
            return None
        block = Code(text="\n".join(lines[i + 1 : end]), n=0, language=fence[2])
    elif first.startswith("|"):
        end = i
        while end < len(lines) and lines[end].strip().startswith("|"):
            end += 1
        rows = table_rows("\n".join(line.strip() for line in lines[i:end]))
        if rows is None:
            return None
        width = max(len(r) for r in rows)
        block, end = Table(rows=tuple((*r, *[""] * (width - len(r))) for r in rows), n=0), end - 1
    else:
        return None
    after_block = next((j for j in range(end + 1, len(lines)) if lines[j].strip()), None)
    cited = CITATION_LINE.fullmatch(lines[after_block].strip()) if after_block is not None else None
    if cited is None or after_block is None:
        return None
    n = int(cited[1])
    block = (
        Code(text=block.text, n=n, language=block.language) if isinstance(block, Code) else Table(rows=block.rows, n=n)
    )
    return block, after_block + 1
