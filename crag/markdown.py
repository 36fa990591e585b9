"""Model output as Markdown that is safe to show: images and links are left as the text that was typed.

A document or a web page can put words in a model's mouth (prompt injection). An image in its answer would make
the reader's browser fetch an address that text dictated, with whatever it put in the query (the question, the
documents): no click needed. A link's text could hide where it leads. So wherever an answer leaves for a Markdown
renderer (the app's page, the API's /v1 and MCP clients) it goes through ``model_markdown``: ``![x](url)`` shows as
``![x](url)``. Fenced code is left as it is: it renders no image and no link.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import replace

from crag.types import Answer

# What Markdown would render as an image or a link: "![" opens an image; "](" "][" "]:" end a link's text (inline,
# by reference, or a reference's definition). A backslash after the "!" or "]" leaves the text as typed.
_MARKUP = re.compile(r"(?<=!)(?=\[)|(?<=\])(?=[(\[:])")
# An HTML tag, comment or declaration ("<img src=...>"), which many Markdown renderers pass through: a backslash
# before the "<" shows it as typed. The app's page never renders HTML; API clients may.
_HTML = re.compile(r"(?=<[A-Za-z/!?])")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")


def model_markdown(markdown: str, html: bool = False) -> str:
    """A model's answer as Markdown to show, with images and links as the text that was typed: the browser fetches
    no address a document or web page could have dictated, and a link's target is in view, never hidden behind its
    text (``[the manual](https://elsewhere)`` shows whole). Fenced code is left as it is: it renders no link.
    ``html``: HTML tags are shown as typed too, for readers whose renderer would pass them through."""
    out, fence = [], ""
    for line in markdown.splitlines(keepends=True):
        found = _FENCE.match(line)
        if fence:
            if found and found[1][0] == fence[0] and len(found[1]) >= len(fence) and not line[found.end() :].strip():
                fence = ""
        elif found:
            fence = found[1]
        else:
            line = _MARKUP.sub("\\\\", line)
            if html:
                line = _HTML.sub("\\\\", line)
        out.append(line)
    return "".join(out)


def safe_stream(deltas: Iterable[str], html: bool = False) -> Iterator[str]:
    """``model_markdown`` for a stream. A ``!``, ``]`` (or ``<`` with ``html``) at the end of what came waits for
    what follows it. An empty delta passes as "": the stream is alive, and its reader may stop it there."""
    held = ("!", "]", "<") if html else ("!", "]")
    text, shown = "", ""
    for delta in deltas:
        if not delta:
            yield ""
            continue
        text += delta
        ready = model_markdown(text[:-1] if text.endswith(held) else text, html)
        if len(ready) > len(shown):
            yield ready[len(shown) :]
            shown = ready
    if rest := model_markdown(text, html)[len(shown) :]:
        yield rest


def outgoing(answer: Answer) -> Answer:
    """An answer as it leaves for a client that renders Markdown (the API's /v1 and /ask, MCP): its text with
    images, links and HTML shown as typed. The sources listed after it are the user's own and stay links."""
    return replace(answer, text=model_markdown(answer.text, html=True))
