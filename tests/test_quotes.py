"""Quoted code and tables: made into an evidence answer's parts, and shown alike by the answer, the sources panel and
the export."""

from __future__ import annotations

from crag.evidence import evidence_parts, select
from crag.export import answer_markdown
from crag.legacy import split_quotes, stored_parts
from crag.parts import Code, Lead, Quote, Table, Written, plain, quoted
from crag.types import Action, Answer, AnswerKind, Source, Strip, cited
from tests.helpers import quotes_of

CODE = "> x <- c(1, 2)\n> x[2]\n[1] 2"
TABLE = "|Option|Meaning|\n|---|---|\n|-d|decompress|\n|-k|keep the input files|"
STRIP = f"To pick the second element, index it:\n\n{CODE}\n\nThe options are these.\n\n{TABLE}"
SOURCE = Source(n=1, kind="local", text=STRIP, file="m.pdf", pages=(1,), chunk_ids=("c0",))


def answer_parts() -> list:
    strip = Strip(text=STRIP, score=0.9, kept=True, kind="local", file="m.pdf", pages=(1,), chunk_id="c0")
    return evidence_parts(select([strip], "How do I pick the second element?"), [SOURCE], "en", Action.CORRECT)


def test_code_and_a_table_are_made_as_blocks_whole() -> None:
    parts = answer_parts()
    text = plain(parts)
    assert "```\n> x <- c(1, 2)\n> x[ 2]\n[ 1] 2\n```\n[1]" in text, "code's own [n] is no citation"
    assert "| Option | Meaning |\n| --- | --- |\n| -d | decompress |\n| -k | keep the input files |\n\n[1]" in text
    assert cited(text) == {1}
    assert [(type(p), p.n) for p in quoted(parts)] == [(Quote, 1), (Code, 1), (Quote, 1), (Table, 1)]
    assert isinstance(parts[0], Lead) and quoted(parts)[1].text == "> x <- c(1, 2)\n> x[ 2]\n[ 1] 2"
    assert quoted(parts)[3].header == ("Option", "Meaning")
    rows = [q.quote for q in quotes_of(parts) if q.kind == "table"]
    assert rows == ["| Option | Meaning |", "| -d | decompress |", "| -k | keep the input files |"]


def test_an_answer_kept_as_text_before_parts_reads_back_into_them() -> None:
    """A chat kept before answers were parts holds their text alone: it is read back into the same parts."""
    parts = answer_parts()
    text = plain(parts)
    assert [(type(p), p.n) for p in quoted(stored_parts(text, "evidence"))] == [(type(p), p.n) for p in quoted(parts)]
    assert plain(stored_parts(text, "evidence")) == text
    written = f"Index it with x[2] [1].\n\n{text}"
    assert split_quotes(written) == ("Index it with x[2] [1].", text)
    read = stored_parts(written, "generated")
    assert read[0] == Written(text="Index it with x[2] [1].") and plain(read) == written


def test_the_answer_the_sources_panel_and_the_export_show_the_same_blocks() -> None:
    from ui.sources import shown_quotes
    from ui.text import page_blocks

    parts = answer_parts()
    [markdown] = page_blocks(parts)
    assert "```\n> x <- c(1, 2)\n> x[ 2]\n[ 1] 2\n```\n\n\\[1\\]" in markdown
    assert "| Option | Meaning |\n| --- | --- |\n| \\-d | decompress |" in markdown
    assert "> “To pick the second element, index it\\:” \\[1\\]" in markdown
    answer = Answer(parts=tuple(parts), backend="embedded", model="m", sources=(SOURCE,), kind=AnswerKind.EVIDENCE)
    assert shown_quotes(SOURCE, answer) == quoted(parts)
    exported = answer_markdown("How do I pick the second element?", answer)
    assert "```\n> x <- c(1, 2)\n> x[ 2]\n[ 1] 2\n```\n[1]" in exported
    assert "| -d | decompress |\n| -k | keep the input files |" in exported


def test_the_page_shows_quoted_code_as_code_and_a_table_as_a_table_in_the_answer_and_its_sources(
    monkeypatch, files
) -> None:
    from tests import fakes
    from tests.apptest import app, ask, texts, use_pipeline

    doc = f"The widget needs two cores. To check them, type:\n\n{CODE}\n\nIts options:\n\n{TABLE}"
    use_pipeline(monkeypatch, [0.9], answer="It needs two cores [1].", chunks=[fakes.chunk(doc, n=0)])
    at = ask(app(), "How do I check the cores of the widget?")
    assert not at.exception
    shown = texts(at.chat_message[1].markdown)
    assert "```\n> x <- c(1, 2)\n> x[ 2]\n[ 1] 2\n```" in shown
    assert "| Option | Meaning |\n| --- | --- |\n| \\-d | decompress |" in shown
    sources = at.chat_message[1].expander[1]
    assert [c.value for c in sources.code] == ["> x <- c(1, 2)\n> x[ 2]\n[ 1] 2"]
    assert "| \\-k | keep the input files |" in texts(sources.markdown)
    assert "The widget needs two cores." in texts(sources.text)
