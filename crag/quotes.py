"""An evidence answer's parts: its lead lines, its quotes, code and tables (``crag.parts``), and how a passage is
quoted as them.

A passage's sentences are one ``Quote``, after the document's question they answer (a FAQ's) when there is one; each
code block and table in it is a ``Code`` or a ``Table`` of its own. Quotes of one kind of source (the documents, the
web) follow a ``Lead`` line, one under the other; a block stands a blank line apart.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from crag.blocks import Code, Table, is_block, joined
from crag.parts import Code as CodePart
from crag.parts import Lead, Part, Quote, Quoted
from crag.parts import Table as TablePart

LEADS = {
    ("en", "local"): "From your documents:",
    ("zh", "local"): "文档中的相关内容：",
    ("en", "closest"): "The closest passages in your documents (they may not answer the question):",
    ("zh", "closest"): "文档中最接近的内容（可能并未回答这个问题）：",
    ("en", "web"): "From the web:",
    ("zh", "web"): "网络上的相关内容：",
}
SCOPED_LEADS = {  # the same, for a question asked in a scope (folders or files): named, as the answer's line names it
    ("en", "local"): "From the documents in {places}:",
    ("zh", "local"): "{places} 中的相关内容：",
    ("en", "closest"): "The closest passages in {places} (they may not answer the question):",
    ("zh", "closest"): "{places} 中最接近的内容（可能并未回答这个问题）：",
}

# A bracketed number inside a quote is the document's own reference ("see [3]"), not our citation.
BRACKETED = re.compile(r"\[(\d+(?:\s*[,，]\s*\d+)*)\]")


def own_references(text: str) -> str:
    """A document's "[3]" as "［3］": read as its own reference, never as our citation."""
    return BRACKETED.sub(r"［\1］", text)


def code_references(code: str) -> str:
    """Code's "[1]" (R prints "[1] 8"; ``x[1]`` indexes) as "[ 1]", which no citation is and the code means the same."""
    return BRACKETED.sub(r"[ \1]", code)


def block_part(faq: str, block: str, n: int) -> Quoted:
    """A block quoted whole: code as ``Code``, a table as ``Table``; the document's question before it."""
    if isinstance(block, Table):
        rows = tuple(tuple(own_references(cell) for cell in row) for row in block.rows)
        return TablePart(rows=rows, n=n, faq=own_references(faq))
    return CodePart(text=code_references(block), n=n, faq=own_references(faq))


def passage_parts(faq: str, pieces: Sequence[str], n: int) -> list[Quoted]:
    """A passage as the answer quotes it: its sentences as one quote, each code or table a block of its own; the
    question it answers before the first."""
    out: list[Quoted] = []
    prose: list[str] = []
    for piece in [*merged_tables(pieces), Code("")]:
        if not is_block(piece):
            prose.append(piece)
            continue
        if prose:
            out.append(Quote(text=own_references(joined(prose)), n=n, faq=own_references(faq)))
            faq, prose = "", []
        if piece:
            out.append(block_part(faq, piece, n))
            faq = ""
    return out


def merged_tables(pieces: Sequence[str]) -> list[str]:
    """Neighbouring pieces of one table (strips under the same header row) as one table, its header row once."""
    out: list[str] = []
    for piece in pieces:
        before = out[-1] if out else ""
        if isinstance(piece, Table) and isinstance(before, Table) and piece.rows[:1] == before.rows[:1]:
            out[-1] = Table.of([*before.rows, *piece.rows[1:]])
        else:
            out.append(piece)
    return out


def spaced(parts: Sequence[Part]) -> list[Part]:
    """The parts of an evidence answer with their gaps: a quote on the line under its lead or the quote before it,
    a block or a new lead a blank line apart."""
    out: list[Part] = []
    for part in parts:
        before = out[-1] if out else None
        gap = "" if before is None else "\n" if isinstance(part, Quote) and isinstance(before, Lead | Quote) else "\n\n"
        out.append(replace(part, gap=gap))
    return out
