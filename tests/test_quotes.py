"""Quoted code and tables: written into an evidence answer, read back, and shown alike by the answer, the sources
panel and the export."""

from __future__ import annotations

from crag.evidence import evidence_answer, select
from crag.export import answer_markdown
from crag.quotes import answer_parts, quoted_blocks, quoted_lines, split_quotes
from crag.types import Action, Answer, AnswerKind, Source, Strip, cited

CODE = "> x <- c(1, 2)\n> x[2]\n[1] 2"
TABLE = "|Option|Meaning|\n|---|---|\n|-d|decompress|\n|-k|keep the input files|"
STRIP = f"To pick the second element, index it:\n\n{CODE}\n\nThe options are these.\n\n{TABLE}"
SOURCE = Source(n=1, kind="local", text=STRIP, file="m.pdf", pages=(1,), chunk_ids=("c0",))


def answer_text() -> str:
    strip = Strip(text=STRIP, score=0.9, kept=True, kind="local", file="m.pdf", pages=(1,), chunk_id="c0")
    return evidence_answer(select([strip], "How do I pick the second element?"), [SOURCE], "en", Action.CORRECT)


def test_code_and_a_table_are_written_as_blocks_and_read_back_whole() -> None:
    text = answer_text()
    assert "```\n> x <- c(1, 2)\n> x[ 2]\n[ 1] 2\n```\n[1]" in text, "code's own [n] is no citation"
    assert "| Option | Meaning |\n| --- | --- |\n| -d | decompress |\n| -k | keep the input files |\n\n[1]" in text
    assert cited(text) == {1}
    blocks = quoted_blocks(text)
    assert [(b.kind, b.n) for b in blocks] == [("prose", "1"), ("code", "1"), ("prose", "1"), ("table", "1")]
    assert blocks[1].quote == "> x <- c(1, 2)\n> x[ 2]\n[ 1] 2"
    rows = [q["quote"] for q in quoted_lines(text) if q.kind == "table"]
    assert rows == ["| Option | Meaning |", "| -d | decompress |", "| -k | keep the input files |"]
    written = f"Index it with x[2] [1].\n\n{text}"
    assert split_quotes(written) == ("Index it with x[2] [1].", text)
    assert sum(isinstance(p, str) for p in answer_parts(text)) == 3  # the lead and the two lines of prose


def test_the_answer_the_sources_panel_and_the_export_show_the_same_blocks() -> None:
    from ui.answer import quotes_markdown
    from ui.sources import shown_quotes

    text = answer_text()
    markdown = quotes_markdown(text)
    assert "```\n> x <- c(1, 2)\n> x[ 2]\n[ 1] 2\n```\n\n\\[1\\]" in markdown
    assert "| Option | Meaning |\n| --- | --- |\n| \\-d | decompress |" in markdown
    assert "> “To pick the second element, index it\\:” \\[1\\]" in markdown
    answer = Answer(text=text, backend="embedded", model="m", sources=(SOURCE,), kind=AnswerKind.EVIDENCE)
    assert shown_quotes(SOURCE, answer) == quoted_blocks(text)
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
