"""An evidence answer as text: how its lead lines, quotes, code and tables are written, and how they are read back.

An evidence answer is Markdown that reads as plain text too:

- a lead line ("From your documents:");
- a quote of prose on a line of its own, after the FAQ question it answers when there is one:
  ``如何使用“甲”命令？ “用 \\jia 命令。” [1]``;
- code in a fence, its citation on the line after the fence; a table as a Markdown table, its citation after a blank
  line (a line right under a table would be read as one more row). The question a block answers, when there is
  one, is the line before it.

The app, the API, MCP and the benchmark read quotes back with ``quoted_lines``; the page sets blocks with
``answer_parts``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, overload

from crag.blocks import RULE, Code, Table, is_block, joined, table_rows

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

# A line of an evidence answer: the FAQ question it answers, when there is one (it ends at its question mark and
# may quote words itself: "如何使用“甲”命令？"), then “the quote” [n].
# The question is the text up to the first question mark that a space and the opening quote follow: tried once
# (an atomic group), since a later one would leave a quote that ends the same way.
LINE = re.compile(r"^(?>(?P<asked>[^“\s].*?[?？])\s+(?=“))?“(?P<quote>.*)” \[(?P<n>\d+)\]$")
CITATION_LINE = re.compile(r"\[(\d+)\]")  # a block's citation, on a line of its own
FENCE = re.compile(r"(`{3,})[\w+-]*")
# A bracketed number inside a quote is the document's own reference ("see [3]"), not our citation.
BRACKETED = re.compile(r"\[(\d+(?:\s*[,，]\s*\d+)*)\]")
BACKTICKS = re.compile(r"`{3,}")


def own_references(text: str) -> str:
    """A document's "[3]" as "［3］": read as its own reference, never as our citation."""
    return BRACKETED.sub(r"［\1］", text)


def code_references(code: str) -> str:
    """Code's "[1]" (R prints "[1] 8"; ``x[1]`` indexes) as "[ 1]", which no citation is and the code means the same."""
    return BRACKETED.sub(r"[ \1]", code)


def prose_line(asked: str, quote: str, n: int) -> str:
    return f"{own_references(asked)} “{own_references(quote)}” [{n}]".lstrip()


def block_lines(asked: str, code: bool, text: str, n: int) -> list[str]:
    """A block as lines of the answer, blank lines around it: code fenced (a fence longer than any run of backticks
    in it), a table as a table; the question before it, and its citation after it."""
    head = [own_references(asked)] if asked else []
    if code:
        fence = "`" * max([3, *(len(run) + 1 for run in BACKTICKS.findall(text))])
        return ["", *head, fence, code_references(text), fence, f"[{n}]", ""]
    return ["", *head, own_references(text), "", f"[{n}]", ""]


def passage_lines(asked: str, parts: Sequence[str], n: int) -> list[str]:
    """A passage as lines of the answer: its sentences as one quote, each code or table a block of its own; the
    question it answers before the first."""
    lines: list[str] = []
    prose: list[str] = []
    for part in [*merged_tables(parts), Code("")]:
        if not is_block(part):
            prose.append(part)
            continue
        if prose:
            lines.append(prose_line(asked, joined(prose), n))
            asked, prose = "", []
        if part:
            lines += block_lines(asked, isinstance(part, Code), part, n)
            asked = ""
    return lines


def merged_tables(parts: Sequence[str]) -> list[str]:
    """Neighbouring pieces of one table (strips under the same header row) as one table, its header row once."""
    out: list[str] = []
    for part in parts:
        before = out[-1] if out else ""
        if isinstance(part, Table) and isinstance(before, Table) and part.split("\n")[:2] == before.split("\n")[:2]:
            out[-1] = Table("\n".join([before, *part.split("\n")[2:]]))
        else:
            out.append(part)
    return out


@dataclass(frozen=True)
class Quote:
    """A quote read back from an answer: ``quote`` (the sentences, the code, or the table), its source ``n``, the
    FAQ question it answers (``asked``, None when none), and its ``kind``: prose, code or table. Read as a match is:
    ``quote["quote"]``, ``quote["n"]``, ``quote["asked"]``."""

    quote: str
    n: str
    asked: str | None = None
    kind: str = "prose"

    @overload
    def __getitem__(self, key: Literal["quote", "n"]) -> str: ...
    @overload
    def __getitem__(self, key: Literal["asked"]) -> str | None: ...
    def __getitem__(self, key: str) -> str | None:
        return {"quote": self.quote, "n": self.n, "asked": self.asked}[key]


def answer_parts(text: str) -> list[str | Quote]:
    """An answer's lines (blank ones left out), with each block of it (code, a table) read back as one ``Quote``."""
    return [part for _, part in _read(text.split("\n"))]


def paragraphs(text: str) -> str:
    """An evidence answer as Markdown paragraphs: each line one (or Markdown runs the quotes together), each block
    whole, as it is written."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    for start, part in _read(lines):
        if start < i:
            continue
        if isinstance(part, Quote):
            end = next(j for j in range(start, len(lines)) if CITATION_LINE.fullmatch(lines[j].strip()))
            out.append("\n".join(lines[start : end + 1]))
            i = end + 1
        else:
            out.append(part)
            i = start + 1
    return "\n\n".join(out)


def quoted_blocks(text: str) -> list[Quote]:
    """The quotes of an evidence answer in order: each line of prose, each code block and each table whole."""
    out: list[Quote] = []
    for part in answer_parts(text):
        if isinstance(part, Quote):
            out.append(part)
        elif found := LINE.match(part.strip()):
            out.append(Quote(found["quote"], found["n"], found["asked"]))
    return out


def quoted_lines(text: str) -> list[Quote]:
    """The quotes of an evidence answer, each with ``asked``, ``quote`` and ``n``, in order. A table is quoted row by
    row, its header row first: each row is a run of the document's text, the rule under the header none."""
    out: list[Quote] = []
    for part in quoted_blocks(text):
        if part.kind == "table":
            rows = [line for line in part.quote.split("\n") if not RULE.match(line)]
            out += [Quote(row, part.n, part.asked if i == 0 else None, "table") for i, row in enumerate(rows)]
        else:
            out.append(part)
    return out


def _read(lines: Sequence[str]) -> list[tuple[int, str | Quote]]:
    """The answer's non-blank lines and blocks, each with the number of its first line."""
    out: list[tuple[int, str | Quote]] = []
    i = 0
    while i < len(lines):
        found = _block(lines, i)
        if found is None:
            if lines[i].strip():
                out.append((i, lines[i]))
            i += 1
            continue
        kind, body, n, i_next = found
        asked = None
        before = out[-1][1] if out else None
        if isinstance(before, str) and _asks(before.strip()) and not is_lead(before.strip()):
            asked = before.strip()
            out.pop()
        out.append((i if asked is None else i - 1, Quote(body, n, asked, kind)))
        i = i_next
    return out


def _asks(line: str) -> bool:
    """A line that is a document's question (the heading of the block after it): no quote, table or code."""
    return line.endswith(("?", "？")) and line[:1] not in ("“", "|", "`")


def _block(lines: Sequence[str], i: int) -> tuple[str, str, str, int] | None:
    """The block that opens at line ``i``: its kind, its text, its citation and the line after it; None when none."""
    first = lines[i].strip()
    if fence := FENCE.fullmatch(first):
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == fence[1]), None)
        kind, body = "code", "\n".join(lines[i + 1 : end]) if end is not None else ""
    elif first.startswith("|"):
        end = i
        while end < len(lines) and lines[end].strip().startswith("|"):
            end += 1
        kind, body, end = "table", "\n".join(line.strip() for line in lines[i:end]), end - 1
        if table_rows(body) is None:
            return None
    else:
        return None
    if end is None:
        return None
    after = next((j for j in range(end + 1, len(lines)) if lines[j].strip()), None)
    cited = CITATION_LINE.fullmatch(lines[after].strip()) if after is not None else None
    return (kind, body, cited[1], after + 1) if cited and after is not None else None


# The scoped leads as patterns: their places are the question's folders or files. Anchored: tried from one place only.
_SCOPED_LEAD = [
    re.compile("^" + re.escape(lead).replace(re.escape("{places}"), "[^\n]+")) for lead in SCOPED_LEADS.values()
]


def is_lead(line: str) -> bool:
    """Whether a line is one of the lead lines an evidence answer opens a group of quotes with."""
    return line in LEADS.values() or any(lead.fullmatch(line) for lead in _SCOPED_LEAD)


def split_quotes(text: str) -> tuple[str, str]:
    """A written answer's own text, and the quotes under it: from the first lead line after which every line is a
    lead, a quote or a block. The quotes are "" when there are none."""
    lines = text.split("\n")
    parts = _read(lines)
    for k, (i, part) in enumerate(parts):
        if not (isinstance(part, str) and is_lead(part.strip())):
            continue
        rest = [p for _, p in parts[k:]]
        if all(isinstance(p, Quote) or is_lead(p.strip()) or LINE.match(p.strip()) for p in rest):
            return "\n".join(lines[:i]).strip(), "\n".join(lines[i:]).strip()
    return text, ""
