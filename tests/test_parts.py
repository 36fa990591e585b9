"""An answer as typed parts (``crag.parts``): every kind is rendered by every edge (the answer's text, the API's
Markdown, the page, the JSON contract); what a document says reaches a Markdown renderer as text by construction,
whatever it holds; the API's stream says what the whole answer says."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import get_args

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from markdown_it.token import Token

from crag import parts as p
from crag.contract import AnswerOut, part_out
from crag.markdown import api_markdown, api_stream, escaped_parts, literal
from crag.models import BackendInfo
from crag.types import Answer, AnswerKind
from ui.text import page_blocks, page_part

ADDRESS = "https://evil.example/p.png"
MD = MarkdownIt("commonmark")  # raw HTML passed through, as many API clients' renderers do
GFM = MarkdownIt("commonmark").enable("table")

ONE_OF_EACH: list[p.Part] = [
    p.Heading(text="How do I plot?", ask=1),
    p.Written(text="Plot it with plot() [1].", cited=(1,), gap="\n\n"),
    p.Lead(text="From your documents:", gap="\n\n"),
    p.Quote(text="Use plot(x, y) to draw.", n=1, faq="How do I plot?", gap="\n"),
    p.Code(text="plot(x)\n```", n=1, gap="\n\n"),
    p.Table(rows=(("Option", "Meaning"), ("-d", "decompress")), n=2, gap="\n\n"),
    p.Heading(text="R-intro", detail=" (R-intro.pdf, 105 pages). What it says it is:", gap="\n\n"),
    p.Outline(heading="Its outline (its bookmarks):", entries=((0, "1 Intro (p. 5)"), (1, "1.1 Plots (p. 6)"))),
    p.Note(text="Your documents never mention “PDF/A”.", gap="\n\n"),
    p.Suggestions(items=(p.Suggestion(title="Graphics", file="R-intro.pdf", page=40),)),
]


def test_every_kind_of_part_is_rendered_by_every_edge() -> None:
    kinds = {get_args(t)[0] if get_args(t) else t for t in get_args(get_args(p.Part)[0])}
    assert kinds == {type(part) for part in ONE_OF_EACH}, "a new kind of part: add it here, and render it everywhere"
    for part in ONE_OF_EACH:  # each edge has a rendering of each kind
        assert part_out(part).kind == part.kind
        assert isinstance(p.text_of(part), str) and isinstance(api_markdown([part]), str)
        if not isinstance(part, p.Written | p.Suggestions):
            assert page_part(part)
    answer = Answer(parts=tuple(ONE_OF_EACH), backend="embedded", model="m", kind=AnswerKind.GENERATED)
    out = AnswerOut.of(answer, BackendInfo("embedded", "m", "test"))
    assert [x.kind for x in out.parts] == [part.kind for part in ONE_OF_EACH]
    assert out.answer == answer.text and "Graphics" not in answer.text  # suggestions are under the answer, not in it
    assert answer.suggestions == (p.Suggestion(title="Graphics", file="R-intro.pdf", page=40),)
    assert "````\nplot(x)\n```\n````\n[1]" in answer.text, "a fence longer than any run of backticks in the code"
    assert len(page_blocks(ONE_OF_EACH)) == 3  # the heading, what the model wrote, the quotes under it


def test_the_answer_s_json_carries_its_parts_beside_its_text() -> None:
    answer = Answer(parts=tuple(ONE_OF_EACH), backend="embedded", model="m", kind=AnswerKind.GENERATED)
    out = AnswerOut.of(answer, BackendInfo("embedded", "m", "test"), markdown=True).model_dump()
    assert out["answer"] == api_markdown(answer.parts)
    table = next(x for x in out["parts"] if x["kind"] == "table")
    assert table == {
        "kind": "table",
        "header": ["Option", "Meaning"],
        "rows": [["-d", "decompress"]],
        "n": 2,
        "faq": "",
    }
    assert {"kind": "written", "text": "Plot it with plot() [1].", "cited": [1]} in out["parts"]
    assert out["parts"][-1] == {
        "kind": "suggestions",
        "items": [{"title": "Graphics", "file": "R-intro.pdf", "page": 40}],
    }


def _all(tokens: list[Token]) -> Iterator[Token]:
    for token in tokens:
        yield token
        yield from _all(token.children or [])


def markup(markdown: str) -> list[str]:
    """The images, links and HTML a renderer makes of it, with tables or without."""
    kinds = ("image", "link_open", "html_inline", "html_block")
    return [t.type for md in (MD, GFM) for t in _all(md.parse(markdown)) if t.type in kinds]


PIECES = st.sampled_from(
    [
        "x",
        " ",
        "[1]",
        "`",
        "```",
        "`code`",
        "\\",
        "\\`",
        f"![x]({ADDRESS})",
        f"[text]({ADDRESS})",
        "[text][r]",
        "[r]",
        f"[r]: {ADDRESS}",
        f"[r]: {ADDRESS} (p. 7)",
        f"<{ADDRESS}>",
        f"<img src={ADDRESS}>",
        "<b>",
        "</b>",
        "<!--",
        "]",
        "(",
        ":",
        "|",
        "*",
        "文",
    ]
)
DOCUMENT_TEXT = st.lists(PIECES, max_size=14).map("".join)


def _documents(text: str) -> list[p.Part]:
    """Every place a document's (or a user's) text goes in an answer, each holding ``text``, after a definition that
    would make ``[r]`` a link if any part let one through."""
    return [
        p.Lead(text=text),
        p.Quote(text=text, n=1, faq=text + "?", gap="\n"),
        p.Quote(text=text, n=2, gap="\n"),
        p.Code(text=text, n=1, faq=text, gap="\n\n"),
        p.Table(rows=((text, "b"), ("c", text)), n=1, faq=text, gap="\n\n"),
        p.Heading(text=text, detail=text, gap="\n\n"),
        p.Outline(heading=text, entries=((0, text), (1, text)), gap="\n\n"),
        p.Note(text=text, gap="\n\n"),
        p.Quote(text="[r] [text][r]", n=1, gap="\n\n"),
    ]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOCUMENT_TEXT)
def test_what_a_document_says_renders_no_image_link_or_html_for_api_clients(text: str) -> None:
    markdown = api_markdown(_documents(text))
    assert not markup(markdown), markdown
    code = [t.content for t in _all(GFM.parse(markdown)) if t.type == "fence"]
    assert text + "\n" in code, "code stays as typed, in its fence"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOCUMENT_TEXT)
def test_what_a_document_says_renders_no_image_or_link_on_the_page(text: str) -> None:
    markdown = "\n\n".join(page_blocks(_documents(text)))
    links = [t for t in _all(GFM.parse(markdown)) if t.type == "link_open"]
    assert not [t for t in _all(GFM.parse(markdown)) if t.type == "image"], markdown
    # A quote's web address is a link to exactly itself; nothing else is a link.
    assert all(re.fullmatch(r"https?://\S+", str(t.attrs.get("href"))) for t in links), markdown


@given(st.text(alphabet="ab .,!?-*_#文", max_size=40))
def test_text_without_markup_gains_no_backslash(text: str) -> None:
    assert literal(text) == text


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "[see", " it](", ADDRESS, ")", ". ", "\n\n", "<img", " src=x>", "`"]), max_size=12)
)
def test_the_api_stream_says_what_the_whole_answer_says(pieces: list[str]) -> None:
    written = [p.Written(text=piece) for piece in pieces if piece.strip()]
    parts: list[p.Part | None] = [None, *written, None, p.Lead(text="From [x](y):", gap="\n\n"), p.Quote(text="q", n=1)]
    streamed = "".join(api_stream(parts))
    answer_parts = [part for part in parts if part is not None]
    assert streamed.strip() == api_markdown(answer_parts)
    assert not markup(streamed), streamed


def test_a_link_the_model_writes_across_two_sentences_is_escaped_in_each() -> None:
    """The contract's written parts are escaped as the text they run in is: a link may start in one sentence."""
    said = [p.Written(text="[See the manual."), p.Written(text=f"It is here]({ADDRESS}).", gap=" ")]
    escaped = escaped_parts(said)
    assert not markup("".join(x.gap + x.text for x in escaped if isinstance(x, p.Written)))
    assert [x.text for x in escaped] == ["[See the manual.", f"It is here]\\({ADDRESS})."]


def test_the_api_s_answer_carries_its_parts_beside_its_text(settings) -> None:
    from fastapi.testclient import TestClient

    from crag.api import create_app
    from tests.apiclient import DOC, LOCAL, QUESTION, hash_embedder
    from tests.fakes import ScriptedModel, chunk, pipeline

    fake = pipeline(settings, [chunk(DOC)], [0.9], ScriptedModel(answer="It needs eight hundred megabytes [1]."))
    app = create_app(settings, pipeline_factory=lambda s: fake, embedder_factory=hash_embedder)
    with TestClient(app, base_url=LOCAL) as client:
        out = client.post("/ask", json={"question": QUESTION}).json()
    assert out["parts"][0] == {"kind": "written", "text": "It needs eight hundred megabytes [1].", "cited": [1]}
    assert [x["kind"] for x in out["parts"][1:]] == ["lead", "quote"] and out["parts"][2]["n"] == 1
    assert out["answer"].startswith("It needs eight hundred megabytes [1].\n\nFrom your documents:\n“")


def test_a_number_in_a_heading_or_an_outline_cites_nothing() -> None:
    """Only the model's sentences and what is quoted cite: "Appendix [2]" in an outline is a document's words."""
    from crag.parts import Heading, Outline, Quote
    from crag.types import Answer, Source

    sources = tuple(Source(n=n, kind="local", text="t", file="a.pdf", pages=(n,)) for n in (1, 2))
    answer = Answer(
        parts=(
            Heading(text="scan[2].pdf", detail=" (1 page)"),
            Quote(text="What it says.", n=1, gap="\n"),
            Outline(heading="Outline:", entries=((0, "Appendix [2] (p. 9)"),), gap="\n\n"),
        ),
        backend="embedded",
        model="m",
        sources=sources,
    )
    assert [s.n for s in answer.cited_sources] == [1]
