"""Answers and conversations as Markdown: what the app shows, in a file to keep or share."""

from __future__ import annotations

from dataclasses import replace

from crag.conversations import Message
from crag.export import answer_markdown, conversation_markdown
from crag.parts import Lead, Quote, Written
from crag.types import Answer, Source, Trace
from tests.test_conversations import answer


def test_an_answer_exports_as_markdown_with_its_sources() -> None:
    text = answer_markdown("How many cores?", answer())
    assert text.startswith("## How many cores?\n\n“The widget needs two cores.” [1]")
    assert "### Sources" in text and "[1] manual.pdf, page 1: “The widget needs two cores.”" in text
    assert "*your documents: relevant (CRAG action: correct) · quoted from the sources: no model wrote this*" in text
    assert "SmolLM2" not in text, "the embedded model wrote none of it"
    said = (
        Lead(text="From your documents:"),
        Quote(text="Two cores.", n=1, gap="\n"),
        Quote(text="Or three.", n=1, gap="\n"),
    )
    quotes = answer_markdown("How many cores?", answer(*said))
    assert "From your documents:\n\n“Two cores.” [1]\n\n“Or three.” [1]\n" in quotes, "a paragraph each"
    uncited = answer_markdown(
        "How many cores?",
        Answer(parts=(Written(text="Two."),), backend="ollama", model="qwen3", sources=answer().sources),
    )
    assert "### Given to the model, not cited" in uncited
    trace = Trace(question="How many cores?", standalone_question="How many cores?", unsupported=("TURBO_MODE",))
    invented = answer_markdown(
        "How many cores?",
        Answer(parts=(Written(text="Two cores [1].", cited=(1,)),), backend="ollama", model="qwen3", trace=trace),
    )
    assert "Two cores [1].\n\n> The model's answer named “TURBO_MODE”, which no source given to it mentions" in invented


def test_a_source_exports_with_the_page_number_its_document_prints() -> None:
    printed = {"manual.pdf": "33"}
    text = answer_markdown("How many cores?", answer(), printed=lambda s: printed.get(s.file, ""))
    assert "[1] manual.pdf, page 1 (printed 33): “The widget needs two cores.”" in text
    web = Source(n=2, kind="web", text="Two cores.", url="https://example.com/faq", title="Widget FAQ")
    both = replace(
        answer(Quote(text="Two cores.", n=1), Quote(text="Two.", n=2, gap="\n")), sources=(*answer().sources, web)
    )
    assert "[2] Widget FAQ <https://example.com/faq>: “Two cores.”" in answer_markdown("q", both, printed=lambda s: "")


def follow_up(question: str, read_as: str) -> Answer:
    base = answer()
    return replace(base, trace=replace(base.trace, question=question, standalone_question=read_as))


def test_a_follow_up_exports_with_the_question_it_followed() -> None:
    followed = follow_up("And on Windows?", "And on Windows? How many cores?")
    text = answer_markdown("And on Windows?", followed, previous="How many cores?")
    assert text.startswith("## And on Windows?\n\n*A follow-up to: How many cores?*\n\n")
    assert "*Asked as: And on Windows? How many cores?*" in text
    # A question read on its own is no follow-up, whatever came before it.
    alone = answer_markdown("How much memory?", follow_up("How much memory?", "How much memory?"), previous="Cores?")
    assert "follow-up" not in alone and "Asked as" not in alone


def test_a_conversation_exports_as_one_file_with_every_answer_and_its_sources() -> None:
    stopped = "You stopped this answer: the text above is what it said before. Ask again for the whole answer."
    messages = [
        Message(id=1, role="user", content="How many cores?"),
        Message(id=2, role="assistant", content=answer().text, answer=answer()),
        Message(id=3, role="user", content="And on Windows?"),
        Message(
            id=4, role="assistant", content="", answer=follow_up("And on Windows?", "And on Windows? How many cores?")
        ),
        Message(id=5, role="user", content="Explain everything."),
        Message(id=6, role="assistant", content="It is", answer=None, complete=False, error=stopped),
    ]
    text = conversation_markdown("Widget cores", messages, printed=lambda s: "ix")
    assert text.startswith("# Widget cores\n\n## How many cores?\n")
    assert text.count("### Sources") == 2 and text.count("[1] manual.pdf, page 1 (printed ix)") == 2
    assert "## And on Windows?\n\n*A follow-up to: How many cores?*" in text
    assert "## Explain everything.\n\nIt is\n\n> You stopped this answer" in text
    assert text.count("no model wrote this") == 2, "every answer says how it was made"


def test_an_exported_answer_loads_nothing_a_document_or_a_model_put_in_it() -> None:
    """Opened in any Markdown viewer, the file shows a document's image, link or HTML as text; the model's own
    Markdown (emphasis) stays; a web source stays a link to follow."""
    from markdown_it import MarkdownIt

    image = "![x](https://evil.example/p.png)"
    source = Source(
        n=1,
        kind="local",
        file="<img src=y>.pdf",
        pages=(2,),
        text=f"Two cores {image}.",
        section=f"Setup {image}",
    )
    web = Source(n=2, kind="web", url="https://example.org/a b", title=f"FAQ {image}", text="x")
    quoted = answer_markdown(f"Cores {image}?", answer(Quote(text=f"Two cores {image}.", n=1)))
    written = Answer(
        parts=(Written(text=f"**Two** cores [1] {image} <img src=z> [2].", cited=(1, 2)),),
        backend="ollama",
        model="qwen3",
        sources=(source, web),
    )
    for text in (quoted, answer_markdown("Cores?", written)):
        html = MarkdownIt("commonmark").render(text)
        assert "evil.example" in html and "<img" not in html
    html = MarkdownIt("commonmark").render(answer_markdown("Cores?", written))
    assert "<strong>Two</strong>" in html and '<a href="https://example.org/a%20b">' in html
