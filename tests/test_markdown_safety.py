"""A written answer reaches a Markdown renderer (the page, /ask, /v1, MCP) with no image, link or HTML a document could
have put in it: what is code, and what a link, is decided as markdown-it-py decides it, for any mix of fences, code
spans, links, definitions, autolinks and tags; code stays as typed; text without markup gains no backslash; a stream
gives the text the whole answer gives, and holds back nothing once the paragraph it is in has ended."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from markdown_it.token import Token

from crag.markdown import model_markdown, safe_stream

ADDRESS = "https://evil.example/p.png"
MD = MarkdownIt("commonmark")  # HTML passed through, as many API clients' renderers do
GFM = MarkdownIt("commonmark").enable("table")


def rendered(markdown: str) -> str:
    return MD.render(markdown)


def loads_or_links(page: str) -> bool:
    """Whether rendered HTML holds an image or a link (a tag, not its text: "&lt;a href" is text)."""
    return "<img" in page or re.search(r"<[^>]*\bhref=", page) is not None


def markup(markdown: str) -> list[str]:
    """The images, links and HTML a renderer makes of it, with tables or without (the page's renderer shows HTML as
    text, not as HTML)."""
    kinds = ("image", "link_open", "html_inline", "html_block")
    return [t.type for md in (MD, GFM) for t in _all(md.parse(markdown)) if t.type in kinds]


def _all(tokens: list[Token]) -> Iterator[Token]:
    for token in tokens:
        yield token
        yield from _all(token.children or [])


def code(markdown: str) -> list[str]:
    """What the renderer shows as code."""
    return [t.content for t in _all(GFM.parse(markdown)) if t.type in ("code_inline", "code_block", "fence")]


# ---------------------------------------------------------------------------------------------
# The texts: lines a source or a model could hold


def _fence_line(indent: int, char: str, length: int, info: str) -> str:
    return " " * indent + char * length + info


FENCE_LINES = st.builds(
    _fence_line,
    st.integers(0, 5),
    st.sampled_from("`~"),
    st.integers(1, 6),
    st.sampled_from(["", "sh", " x ```", "`", "sh`", " ~~~", "~", " "]),
)
PIECES = st.sampled_from(
    [
        "x",
        " ",
        "words ",
        "[1]",
        "`",
        "``",
        "`code`",
        "``a ` b``",
        f"![x]({ADDRESS})",
        f"![x](<{ADDRESS}>)",
        f"[text]({ADDRESS})",
        f'[text]({ADDRESS} "title `")',
        "[text][r]",
        "[r]",
        "[r][]",
        f"[r]: {ADDRESS}",
        "[r]:",
        f"<{ADDRESS}>",
        "<me@evil.example>",
        f"<img src={ADDRESS}>",
        f"<a href='{ADDRESS}'>",
        "<a title='`'>",
        "</a>",
        "<!--",
        "-->",
        "<div>",
        "[",
        "]",
        "](",
        f"]({ADDRESS})",
        "!",
        "(",
        ")",
        "\\",
        "|",
        "*",
        "$",
        ":",
        "<",
        ">",
        "\t",
    ]
)
PREFIXES = st.sampled_from(["", "", "", "> ", "- ", "1. ", "    ", "  ", "| ", "|---|---|", "> > ", "- > "])
LINES = st.one_of(FENCE_LINES, st.builds(lambda p, xs: p + "".join(xs), PREFIXES, st.lists(PIECES, max_size=6)))
TEXTS = st.lists(LINES, max_size=12).map("\n".join)


def _cuts(text: str, data: st.DataObject) -> list[str]:
    points = sorted(data.draw(st.sets(st.integers(0, len(text)), max_size=12)))
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


def _inserted_backslashes(before: str, after: str) -> bool:
    """Whether ``after`` is ``before`` with backslashes put before some "(", ":", "<" or "`" (the page's)."""
    i = 0
    for j, char in enumerate(after):
        if i < len(before) and before[i] == char:
            i += 1
        elif char != "\\" or after[j + 1 : j + 2] not in ("(", ":", "<", "`"):
            return False
    return i == len(before)


PROPERTY = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(TEXTS)
@example(f"``` x ```\n![x]({ADDRESS})\n")
@example(f"```sh`\n![x]({ADDRESS})\n")
@example(f"~~~\n```\n~~~\n![x]({ADDRESS})")
@example(f"| a | b |\n|---|---|\n| `x | ![x]({ADDRESS}) ` |")
@example(f"[a [b]({ADDRESS})]({ADDRESS})")
@example(f"> [r]: {ADDRESS}\n> [r]")
@example(f"<a title='`'>` ![x]({ADDRESS}) `")
def test_no_text_renders_an_image_or_a_link(text: str) -> None:
    for html in (True, False):
        shown = model_markdown(text, html=html)
        assert _inserted_backslashes(text, shown), (text, shown)
        assert model_markdown(shown, html=html) == shown  # nothing left to escape
        if html:
            for page in (rendered(shown), GFM.render(shown)):
                assert not loads_or_links(page), (text, shown, page)
        else:  # the page: HTML is shown as text there; images and links would render
            assert not {"image", "link_open"} & set(markup(shown)), (text, shown)


@PROPERTY
@given(TEXTS)
def test_text_without_markup_gains_no_backslash(text: str) -> None:
    """For the page, only where its renderer could read more than CommonMark: a code span that opens inside a web
    address (GFM links the address, backtick and all), a directive or math."""
    env: dict = {}
    tokens = [t for md in (MD, GFM) for t in _all(md.parse(text, env))]
    if not env.get("references") and not any(t.type in ("image", "link_open") for t in tokens):
        if not any(t.type in ("html_inline", "html_block") for t in tokens):
            assert model_markdown(text, html=True) == text
        if not re.search(r"[:$]|www\.", text):
            assert model_markdown(text) == text


@PROPERTY
@given(TEXTS, st.data())
def test_a_stream_gives_what_the_whole_gives(text: str, data: st.DataObject) -> None:
    pieces = _cuts(text, data)
    for html in (True, False):
        assert "".join(safe_stream(pieces, html=html)) == model_markdown(text, html=html), pieces


def test_a_streamed_directive_waits_for_its_paragraph() -> None:
    """For the page, a directive is escaped once markup could follow it: its paragraph is not given out before."""
    text = ":x[text][r]\n]("
    for pieces in ([text], [":x[text][r]\n", "]("]):
        assert "".join(safe_stream(pieces)) == model_markdown(text) == "\\:x[text][r]\n]("


@PROPERTY
@given(TEXTS, st.data())
def test_a_stream_holds_nothing_back_once_its_paragraph_ends(text: str, data: st.DataObject) -> None:
    """Everything is given out before the stream ends: its reader sees the answer as it comes."""
    pieces = [*_cuts(text, data), "\n\n"]
    given_out: list[str] = []
    ended = False

    def deltas() -> Iterator[str]:
        nonlocal ended
        yield from pieces
        ended = True

    for piece in safe_stream(deltas(), html=True):
        if ended:
            break
        given_out.append(piece)
    assert "".join(given_out) == model_markdown("".join(pieces), html=True)


# Code a source or a model writes, each in a block or a span of its own: markup in it stays as typed.
CODE_BODIES = st.lists(PIECES, min_size=1, max_size=6).map("".join).filter(lambda s: "`" not in s and s.strip())


@PROPERTY
@given(st.lists(st.tuples(CODE_BODIES, st.booleans(), st.lists(PIECES, max_size=4).map("".join)), max_size=5))
def test_code_stays_as_typed(parts: list[tuple[str, bool, str]]) -> None:
    blocks = []
    for body, fenced, prose in parts:
        snippet = f"```\n{body}\n```" if fenced else f"Run `{body.replace(chr(10), ' ')}` now."
        blocks += [snippet, "words " + prose.replace("`", "")]
    text = "\n\n".join(blocks)
    for html in (True, False):
        assert code(model_markdown(text, html=html)) == code(text)


# ---------------------------------------------------------------------------------------------
# The lines, and what stays as it was


@pytest.mark.parametrize("opening", ["``` x ```", "```sh`", "  ```a`b", "<div>\n```\n</div>\n"])
def test_a_line_that_opens_no_fence_escapes_what_follows(opening: str) -> None:
    """Lines a guess line by line took for a fence that stays open (a backtick fence's info holds no backtick; an HTML
    block ends at a blank line, a fence in it with it)."""
    text = f"{opening}\n![x]({ADDRESS})\n"
    assert "<img" in rendered(text)  # what the line guess let through
    assert "<img" not in rendered(model_markdown(text, html=True))
    assert model_markdown(text) == f"{opening}\n![x]\\({ADDRESS})\n"


def test_citations_and_plain_brackets_are_left_as_they_are() -> None:
    for text in ["Cited [1]: it needs [2] cores.", "Two cores [1][2].", "a < b and c > d", "![1]", "Use `a[0](b)`."]:
        assert model_markdown(text, html=True) == text


def test_a_definition_shows_and_links_nothing() -> None:
    text = f"See [the manual][m] and [m].\n\n[m]: {ADDRESS}"
    shown = model_markdown(text)
    assert shown == f"See [the manual][m] and [m].\n\n[m]\\: {ADDRESS}"
    assert ADDRESS in rendered(shown) and not loads_or_links(rendered(shown))  # the address shows, as text


# ---------------------------------------------------------------------------------------------
# A document's lines, written into an answer, through every edge


# A passage with lines that open no fence, an image and a link after them, and a model that writes them all into its
# answer (grounding keeps them: the passage holds them).
PLANTED = f"Install it so:\n\n``` x ```\n![status]({ADDRESS}) and [the manual]({ADDRESS}) <img src={ADDRESS}>\n"
WRITTEN = f"The widget needs eight hundred megabytes of memory [1].\n\n{PLANTED}"


def harmless(markdown: str, html: bool = True) -> bool:
    """No image or link however it is rendered: as HTML (raw HTML passed through), and as the page's tokens."""
    kinds = set(markup(markdown)) - ({"html_inline", "html_block"} if not html else set())
    return not kinds and not any(loads_or_links(md.render(markdown)) for md in (MD, GFM) if html)


def test_an_answer_that_writes_a_document_s_lines_reaches_every_reader_harmless(settings) -> None:
    import json as jsonlib

    import anyio
    from fastapi.testclient import TestClient
    from mcp import Client

    from crag.api import create_app
    from crag.mcp import ToolBackend, create_server
    from tests.apiclient import DOC, LOCAL, QUESTION, hash_embedder, sse
    from tests.fakes import ScriptedModel, chunk, pipeline

    assert not harmless(WRITTEN)  # what a renderer makes of the answer as written
    fake = pipeline(settings, [chunk(f"{DOC}\n\n{PLANTED}")], [0.9], ScriptedModel(answer=WRITTEN))
    app = create_app(settings, pipeline_factory=lambda s: fake, embedder_factory=hash_embedder)
    with TestClient(app, base_url=LOCAL) as client:
        asked = client.post("/ask", json={"question": QUESTION}).json()["answer"]
        streamed = sse(client.post("/ask", json={"question": QUESTION, "stream": True}).text.splitlines())
        chat = {"model": "crag-kb", "messages": [{"role": "user", "content": QUESTION}]}
        whole = client.post("/v1/chat/completions", json=chat).json()["choices"][0]["message"]["content"]
        lines = client.post("/v1/chat/completions", json={**chat, "stream": True}).text.splitlines()

    async def mcp_ask() -> str:
        async with Client(create_server(ToolBackend(settings, lambda: fake))) as mcp:
            return (await mcp.call_tool("ask", {"question": QUESTION})).structured_content["answer"]

    deltas = [jsonlib.loads(line[len("data: ") :]) for line in lines if line.startswith("data: {")]
    v1_stream = "".join(d["choices"][0]["delta"].get("content") or "" for d in deltas if d.get("choices"))
    tokens = "".join(data["text"] for kind, data in streamed if kind == "token")
    for text in (asked, tokens, whole, v1_stream, anyio.run(mcp_ask)):
        assert ADDRESS in text and "``` x ```" in text, text  # the lines are there, as text
        assert harmless(text), text


def test_the_page_shows_a_document_s_lines_harmless(monkeypatch: pytest.MonkeyPatch, files) -> None:
    from tests.apiclient import DOC
    from tests.apptest import app, ask, use_pipeline
    from tests.fakes import chunk

    # Indented, as a model may open an answer: the page strips it, so it is no code block there.
    written = f"    ![status]({ADDRESS})\n\n{WRITTEN}"
    use_pipeline(monkeypatch, [0.9], answer=written, chunks=[chunk(f"{DOC}\n\n{written}")])
    at = ask(app())
    assert not at.exception
    shown = [m for m in at.markdown if ADDRESS in m.value]  # the written answer, and the quotes under it
    assert "![status]\\(" in shown[0].value, [m.value for m in shown]  # the indented line, escaped as the page reads it
    for markdown in shown:
        assert not markdown.allow_html  # the page shows HTML as text
        assert not hidden(markdown.value.strip()), markdown.value


def hidden(markdown: str) -> list[str]:
    """The images, and the links whose text is not the address they lead to (an address a quote gives is a link to
    exactly itself), in the page's reading."""
    out, tokens = [], list(_all(GFM.parse(markdown)))
    for i, token in enumerate(tokens):
        if token.type == "image":
            out.append(str(token.attrs.get("src")))
        elif token.type == "link_open" and tokens[i + 1].content != token.attrs.get("href"):
            out.append(str(token.attrs.get("href")))
    return out
