"""Answers and conversations as Markdown, to keep or to share: what the app shows, in a file.

An answer's export carries its question, the question it followed when it is a follow-up (and the question it
was read as), its text, the warning a written answer gets for what its sources do not say, its sources with their
pages as the app shows them ("page 39 (printed 33)") and how it was made. A conversation exports as one file:
each question with its answer, in order, and what the user said of the answers they rated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from urllib.parse import quote

from crag.conversations import Message
from crag.feedback import rating_words
from crag.markdown import api_markdown, literal
from crag.messages import unsupported_message
from crag.parts import Code, Part, Table
from crag.text import pages_label
from crag.types import NOT_WRITTEN, Answer, AnswerKind, Source

_URL_SAFE = ":/?#[]@!$&'()*+,;=%~"  # a URL's own characters: spaces, quotes and angle brackets are encoded

# The page numbers a local source's document prints there, when they differ from the PDF's ("33"), or "".
Printed = Callable[[Source], str]


def where(source: Source, printed: Printed | None = None) -> str:
    """A source as the app names it: "manual.pdf, page 39 (printed 33) (2.1 Install)", or a web page and its URL (a
    link to follow). What its document or page says of itself (names, titles, headings) shows as text."""
    if source.kind != "local":
        label = f"{literal(source.title or source.url or '')} <{quote(source.url or '', safe=_URL_SAFE)}>"
    else:
        label = f"{literal(source.file or '')}, {pages_label(source.pages)}"
        if source.pages and printed is not None and (labels := printed(source)):
            label += f" (printed {literal(labels)})"
    return label + (f" ({literal(source.section)})" if source.section else "")


def follows_up(answer: Answer) -> bool:
    """Whether the question was read with the conversation before it: rewritten by the model, or read with the
    words of the question it follows (the trace's standalone question is then another)."""
    trace = answer.trace
    return trace is not None and bool(trace.standalone_question) and trace.standalone_question != trace.question


def paragraphs(parts: Sequence[Part]) -> str:
    """An evidence answer as Markdown paragraphs: each line one, each block (code, a table) whole with its [n]. What
    the documents say shows as text (``api_markdown``): no viewer of the file loads an image a PDF put there."""
    lines = [
        line
        for part in parts
        for line in ([api_markdown([part])] if isinstance(part, Code | Table) else api_markdown([part]).split("\n"))
    ]
    return "\n\n".join(line for line in lines if line.strip())


def answer_markdown(question: str, answer: Answer, *, previous: str = "", printed: Printed | None = None) -> str:
    """One answer as Markdown, with its sources. ``previous``: the question before it in the conversation, named
    when this one was read as its follow-up."""
    # An evidence answer is a lead line and quotes, a line each: one paragraph each, or Markdown runs them together.
    # A written one as the API gives it: the model's Markdown, with what it may have copied from a source escaped.
    text = paragraphs(answer.parts) if answer.kind is AnswerKind.EVIDENCE else api_markdown(answer.parts)
    lines = [f"## {literal(question)}", ""]
    if follows_up(answer) and answer.trace is not None:
        lines += [f"*A follow-up to: {literal(previous)}*", ""] if previous else []
        lines += [f"*Asked as: {literal(answer.trace.standalone_question)}*", ""]
    lines += [text, ""]
    if answer.trace is not None and answer.trace.unsupported:
        lines += [f"> {unsupported_message(question, answer.trace.unsupported)}", ""]
    if not answer.complete:
        lines += [f"> {answer.error or 'The answer stopped before its end.'}", ""]
    cited = answer.cited_sources or answer.sources
    if cited:
        lines += ["### Sources" if answer.cited_sources else "### Given to the model, not cited", ""]
        lines += [f"[{s.n}] {where(s, printed)}: “{literal(s.snippet)}”" for s in cited]
        lines.append("")
    made = (
        [NOT_WRITTEN[answer.kind]] if answer.kind in NOT_WRITTEN else [answer.kind.value, answer.backend, answer.model]
    )
    if answer.action is not None:
        made.insert(0, f"your documents: {answer.action.verdict} (CRAG action: {answer.action.value})")
    if answer.trace is not None and answer.trace.scope:
        made.append("asked in " + ", ".join(answer.trace.scope))
    lines.append(f"*{' · '.join(made)}*")
    return "\n".join(lines) + "\n"


def conversation_markdown(title: str, messages: Sequence[Message], printed: Printed | None = None) -> str:
    """A whole conversation as one Markdown file: its title, then every question with its answer and sources. An
    answer that never came says so, with why."""
    parts = [f"# {literal(title)}\n"]
    question = previous = ""
    for message in messages:
        if message.role == "user":
            previous, question = question, message.content
        elif message.answer is not None:
            parts.append(answer_markdown(question, message.answer, previous=previous, printed=printed))
            if message.rating is not None:  # what the user said of it, kept with the chat
                parts.append(f"*Rated {rating_words(message.rating)}*\n")
        else:
            said = f"{message.content}\n\n" if message.content else ""
            parts.append(f"## {literal(question)}\n\n{literal(said)}> {message.error or 'No answer was saved.'}\n")
    return "\n".join(parts)
