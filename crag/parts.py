"""An answer as data: the typed parts the core makes and each edge renders in its own way.

An answer is a sequence of parts, in the order they are said:

- ``Lead``: a line the app sets over quotes ("From your documents:", "3 documents. What each says it is:");
- ``Note``: the app's own words in the answer: why there is no answer, what the documents never mention;
- ``Written``: a sentence (or a code block, or framing) the model wrote, as kept, with the sources it cites;
- ``Quote``: sentences of a document, quoted whole, with the number of their source and the document's question they
  answer (a FAQ's) when there is one; ``Code``: code quoted whole; ``Table``: a table quoted whole, its header first;
- ``Heading``: an ask's heading ("1. How do I …"), or a document's title with what it is;
- ``Outline``: a document's outline, each entry with its page;
- ``Suggestions``: sections of the documents close to a question not answered for sure, to ask again with.

The core makes them (``crag.evidence``, ``crag.overview``, ``crag.messages``, ``crag.stream`` with ``crag.support`` for
the model's sentences) and the stream yields them as they are ready. Each edge renders them and never reads an
answer's text back: ``plain`` is the answer's text (``Answer.text``: what the CLI prints, what is kept and exported),
``crag.markdown.api_markdown`` the Markdown of ``/ask``, ``/v1`` and MCP, ``ui.answer`` the page. Only a ``Written``
part is the model's Markdown; every other part holds a document's text or the app's, which each renderer shows as
text.

Each part holds ``gap``: what separates it from the part before it in the answer's text (a line break inside a group of
quotes, a blank line before a block or a new group; a model's own spaces and breaks before its sentence). To add a
part: a frozen dataclass here with its ``kind``, a line in ``_TEXT`` for its text, and its rendering in
``crag.markdown`` and ``ui.answer`` (``tests/test_parts.py`` holds every kind to being rendered by each).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Annotated, Literal

from pydantic import Field


@dataclass(frozen=True, kw_only=True)
class Lead:
    """A line the app sets over what follows: "From your documents:"."""

    text: str
    gap: str = ""
    kind: Literal["lead"] = "lead"


@dataclass(frozen=True, kw_only=True)
class Note:
    """The app's own words: why there is no answer, or what the documents never mention. `commands` in it are the
    app's (``python -m crag index``); a quoted term (“PDF/A”) is the user's."""

    text: str
    gap: str = ""
    kind: Literal["note"] = "note"


@dataclass(frozen=True, kw_only=True)
class Written:
    """What the model wrote, one sentence, code block or piece of framing at a time, as kept: Markdown, with the
    citations ``cited`` (in the text as [n]); none for framing and code."""

    text: str
    cited: tuple[int, ...] = ()
    gap: str = ""
    kind: Literal["written"] = "written"


@dataclass(frozen=True, kw_only=True)
class Quote:
    """A document's sentences, quoted whole, from source ``n``; ``faq``: the document's question they answer (a
    FAQ's), shown before them. A document's own bracketed number is written "［3］": no reader takes it for a
    citation."""

    text: str
    n: int
    faq: str = ""
    gap: str = ""
    kind: Literal["quote"] = "quote"


@dataclass(frozen=True, kw_only=True)
class Code:
    """Code quoted whole from source ``n``, its lines and indentation kept; ``language`` when it is known. Code's own
    "[1]" is written "[ 1]", which means the same to the code and is no citation."""

    text: str
    n: int
    language: str = ""
    faq: str = ""
    gap: str = ""
    kind: Literal["code"] = "code"

    @property
    def fence(self) -> str:
        """A fence longer than any run of backticks in the code, so that nothing in it ends the block."""
        return "`" * max(3, _longest_run(self.text, "`") + 1)


@dataclass(frozen=True, kw_only=True)
class Table:
    """A table quoted whole from source ``n``: ``rows``, its header row first, each as wide as the widest."""

    rows: tuple[tuple[str, ...], ...]
    n: int
    faq: str = ""
    gap: str = ""
    kind: Literal["table"] = "table"

    @property
    def header(self) -> tuple[str, ...]:
        return self.rows[0] if self.rows else ()


@dataclass(frozen=True, kw_only=True)
class Heading:
    """A heading the app sets: an ask's (``ask``, its number, from 1), or a document's title, with what follows it on
    its line (``detail``: " (R-intro.pdf, 105 pages). What it says it is:")."""

    text: str
    detail: str = ""
    ask: int = 0
    gap: str = ""
    kind: Literal["heading"] = "heading"

    @property
    def title(self) -> str:
        """What is set in bold: the ask with its number, or the document's title."""
        return f"{self.ask}. {self.text}" if self.ask else self.text


@dataclass(frozen=True, kw_only=True)
class Outline:
    """A document's outline: the line over it, and its entries, each (its depth from 0, its heading with its page)."""

    heading: str
    entries: tuple[tuple[int, str], ...]
    gap: str = ""
    kind: Literal["outline"] = "outline"


@dataclass(frozen=True, kw_only=True)
class Suggestion:
    """A section of the documents whose title is close to a question not answered for sure: its title's words are
    offered to ask again with."""

    title: str
    file: str
    page: int


@dataclass(frozen=True, kw_only=True)
class Suggestions:
    """The sections closest to a question not answered for sure, under the answer: not part of its text."""

    items: tuple[Suggestion, ...]
    gap: str = ""
    kind: Literal["suggestions"] = "suggestions"


Part = Annotated[
    Lead | Note | Written | Quote | Code | Table | Heading | Outline | Suggestions, Field(discriminator="kind")
]
Quoted = Quote | Code | Table  # what a document says, quoted from one source
QUOTED = (Quote, Code, Table)


def _longest_run(text: str, char: str) -> int:
    longest = run = 0
    for c in text:
        run = run + 1 if c == char else 0
        longest = max(longest, run)
    return longest


def row_line(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def table_text(rows: Sequence[Sequence[str]]) -> str:
    """Rows (the header first, each as wide as the widest) as a Markdown table, the rule under the header."""
    if not rows:
        return ""
    return "\n".join([row_line(rows[0]), row_line(["---"] * len(rows[0])), *(row_line(r) for r in rows[1:])])


def _headed(faq: str, body: str) -> str:
    return f"{faq}\n{body}" if faq else body


_TEXT: dict[type, Callable] = {
    Lead: lambda p: p.text,
    Note: lambda p: p.text,
    Written: lambda p: p.text,
    Quote: lambda p: f"{p.faq} “{p.text}” [{p.n}]".lstrip(),
    Code: lambda p: _headed(p.faq, f"{p.fence}{p.language}\n{p.text}\n{p.fence}\n[{p.n}]"),
    Table: lambda p: _headed(p.faq, f"{table_text(p.rows)}\n\n[{p.n}]"),
    Heading: lambda p: f"**{p.title}**{p.detail}",
    Outline: lambda p: "\n".join([p.heading, *(f"{'  ' * depth}- {entry}" for depth, entry in p.entries)]),
    Suggestions: lambda p: "",
}


def text_of(part: Part) -> str:
    """One part as the answer's text writes it, without its gap."""
    return _TEXT[type(part)](part)


def plain(parts: Iterable[Part]) -> str:
    """The answer's text: each part after its gap. Markdown that reads as plain text too (a quote in “ ”, code
    fenced, a table as a table, each block's [n] on the line after it); ``Answer.text`` is it, stripped."""
    return "".join(part.gap + text_of(part) for part in parts if not isinstance(part, Suggestions))


def after(gap: str, parts: Sequence[Part]) -> list[Part]:
    """Parts as they follow others: the first after ``gap`` (and its own)."""
    return [replace(p, gap=gap + p.gap) if i == 0 else p for i, p in enumerate(parts)]


def written(parts: Iterable[Part]) -> str:
    """What the model wrote, as kept: its sentences, without the quotes under them or the app's headings."""
    return "".join(p.gap + p.text for p in parts if isinstance(p, Written)).strip()


def quoted(parts: Iterable[Part]) -> list[Quoted]:
    """What the answer quotes, in order: each quote, code block and table."""
    return [p for p in parts if isinstance(p, QUOTED)]


def quoted_texts(part: Quoted) -> list[str]:
    """A quote's runs of the document's text: its sentences, its code, or its table row by row (the header first)."""
    if isinstance(part, Table):
        return [row_line(row) for row in part.rows]
    return [part.text]


def suggestions(parts: Iterable[Part]) -> tuple[Suggestion, ...]:
    return next((p.items for p in parts if isinstance(p, Suggestions)), ())
