"""Code and tables in passage text: how to tell them from prose, how to set them, where an expression is open.

A chunk's text is paragraphs with a blank line between them. A prose paragraph is one line; a paragraph that
keeps its line breaks is a block, whose lines are part of what it says:

- a table: Markdown rows (pymupdf4llm's: each opens with "|", a rule under the header) or MinerU's HTML;
- code: anything else with line breaks (lines set in a monospaced font, a layout model's code box), indentation
  and all.

A quote of a block is the block, set as Markdown (a table as a table, code fenced), never its lines run together.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from crag.parts import table_text
from crag.text import drop_glyphs, join_sentences

# Anchored: tried from the start of a line only, not again from each of its leading spaces.
RULE = re.compile(r"^\s*+\|?\s*+:?-{3,}+:?\s*+(?:\|\s*+:?-{3,}+:?\s*+)*+\|?\s*+$")  # |---|:---:| under the header
BOLD = re.compile(r"\*\*(\S(?:[^*]*?\S)?)\*\*")
BREAK = re.compile(r"<br\s*+/?>", re.IGNORECASE)
HTML_ROW_END = re.compile(r"</tr\s*+>", re.IGNORECASE)
HTML_CELL = re.compile(r"<t[dh](?:\s[^<>]*+)?>", re.IGNORECASE)
HTML_TAG = re.compile(r"<[^<>]*+>")


def is_table(paragraph: str) -> bool:
    """A Markdown table (a header row, its rule, rows) or an HTML one."""
    return table_rows(paragraph) is not None


def is_code(paragraph: str) -> bool:
    """A paragraph whose line breaks are its own: not prose (one line), not a table."""
    return "\n" in paragraph.strip() and not is_table(paragraph)


def table_rows(paragraph: str) -> list[list[str]] | None:
    """A table's rows, the header first, each a list of cells as plain text (bold markers and line breaks of a
    cell dropped); None when the paragraph is no table."""
    text = paragraph.strip()
    if text[:6].lower() == "<table" or "</tr>" in text[:2000].lower():
        rows = [_html_cells(row) for row in HTML_ROW_END.split(text)]
        rows = [r for r in rows if any(r)]
        return rows or None
    lines = text.split("\n")
    if len(lines) < 2 or not lines[0].lstrip().startswith("|") or not RULE.match(lines[1]):
        return None
    if not all(line.lstrip().startswith("|") for line in lines):
        return None
    return [_cells(line) for i, line in enumerate(lines) if i != 1 and not RULE.match(line)]


def _cells(line: str) -> list[str]:
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") else inner
    return [cell_text(c) for c in inner.split("|")]


def _html_cells(row: str) -> list[str]:
    return [cell_text(HTML_TAG.sub(" ", BREAK.sub(" ", c))) for c in HTML_CELL.split(row)[1:]]


def cell_text(cell: str) -> str:
    return " ".join(drop_glyphs(BOLD.sub(r"\1", BREAK.sub(" ", cell))).split())


def markdown_table(rows: Sequence[Sequence[str]]) -> str:
    """Rows (the header first) as a Markdown table, every row as wide as the widest."""
    return str(Table.of(rows))


def code_text(code: str) -> str:
    """Code as it is quoted: its lines and their indentation, trailing spaces and blank edges gone, glyphs that are not
    text dropped."""
    lines = [drop_glyphs(line).rstrip() for line in code.split("\n")]
    return "\n".join(line for line in lines if line.strip())


# ---------------------------------------------------------------------------------------------
# A passage's pieces: sentences, the questions among them, code and tables


class Faq(str):
    """A question sentence of the document: in a FAQ, the heading of the answer that follows it (``faq`` of the quote
    after it)."""


class Code(str):
    """Code, its lines and their indentation kept: quoted whole, in a fence."""


class Table(str):
    """A table as Markdown, its header row first: quoted whole, as a table. ``rows``: its cells, the header first, each
    row as wide as the widest."""

    rows: tuple[tuple[str, ...], ...] = ()

    @classmethod
    def of(cls, rows: Sequence[Sequence[str]]) -> Table:
        columns = max((len(r) for r in rows), default=0)
        padded = tuple((*r, *[""] * (columns - len(r))) for r in rows)
        table = cls(table_text(padded))
        table.rows = padded
        return table


def is_block(part: str) -> bool:
    return isinstance(part, (Code, Table))


def joined(parts: Sequence[str]) -> str:
    """Pieces as text again: sentences run on, code and tables set apart by a blank line (``pieces`` reads it back)."""
    text = ""
    for before, part in zip(["", *parts], parts, strict=False):
        text = f"{text}\n\n{part}" if text and (is_block(part) or is_block(before)) else join_sentences(text, part)
    return text


# ---------------------------------------------------------------------------------------------
# Where an expression is open: a quote cut there would end inside it

PAIRS = {"(": ")", "[": "]", "{": "}", "（": "）", "【": "】", "「": "」", "《": "》", "“": "”"}
CLOSERS = {v: k for k, v in PAIRS.items()}
MARKS = re.compile(r'\\.|["()\[\]{}（）【】「」《》“”]')  # what ``depth`` counts; a backslash with what it escapes


def depth(text: str) -> int:
    """How many brackets and quotations are open at the end of the text (a backslash escapes the next character)."""
    stack: list[str] = []
    straight = False  # inside "..."
    for c in MARKS.findall(text):
        if len(c) > 1:  # escaped
            continue
        if c == '"':
            straight = not straight
        elif straight:
            continue
        elif c in PAIRS:
            stack.append(c)
        elif c in CLOSERS and stack and stack[-1] == CLOSERS[c]:
            stack.pop()
    return len(stack) + straight


def held_open(texts: Sequence[str]) -> list[bool]:
    """For each text, whether a bracket or quotation is open after it that a later text closes: a quote that ended
    there would end inside an expression ("It takes options (see e.g." before "the help page)."). One that nothing
    closes (a stray "[" in "Note that [ always requires an exact match") is no expression to keep whole."""
    stack: list[tuple[str, int]] = []
    straight: int | None = None  # where an open "..." opened
    spans: list[tuple[int, int]] = []  # an expression: the texts it opens and closes in
    for i, text in enumerate(texts):
        for c in MARKS.findall(text):
            if len(c) > 1:  # escaped
                continue
            if c == '"':
                spans += [(straight, i)] if straight is not None else []
                straight = i if straight is None else None
            elif straight is not None:
                continue
            elif c in PAIRS:
                stack.append((c, i))
            elif c in CLOSERS and stack and stack[-1][0] == CLOSERS[c]:
                spans.append((stack.pop()[1], i))
    inside = [False] * len(texts)
    for start, end in spans:
        inside[start:end] = [True] * (end - start)
    return inside


def opens(before: str, text: str) -> bool:
    """Whether ``text``, after ``before``, leaves more brackets or quotations open than were before it: a quote that
    ends with it would end inside an expression. One left open before it (a stray bracket) is not its doing."""
    return depth(f"{before} {text}") > depth(before)
