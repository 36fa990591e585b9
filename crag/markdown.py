"""Model output as Markdown that is safe to show: images, links and HTML are left as the text that was typed.

A document or a web page can put words in a model's mouth (prompt injection). An image in its answer would make
the reader's browser fetch an address that text dictated, with whatever it put in the query (the question, the
documents): no click needed. A link's text could hide where it leads. So wherever what a model wrote leaves for a
Markdown renderer (the app's page, the API's /v1 and MCP clients) it goes through ``model_markdown``: ``![x](url)``
shows as ``![x](url)``. What a document says (a quote, code, a table, a heading) is never the model's Markdown: it is
set as text by construction (``literal``, code in a fence longer than any run of backticks in it), and
``api_markdown`` renders an answer's parts (``crag.parts``) for API clients that way.

What is code, and what a link, is decided the way a renderer decides it: markdown-it-py parses the answer, and a
backslash goes where the parse found an image, a link, a link's definition, an autolink or (for renderers that pass
HTML through) HTML, and nowhere else. A guess line by line cannot know that "``` x ```" opens no fence, and it stopped
escaping there. Renderers differ in what they read beyond CommonMark, and each difference can move what is code: the
answer is read with GFM's tables and without, with remark-math's math and without (the page renders math), until no
reading finds more. The page's renderer (Streamlit's) also reads directives and links bare web addresses: what could
open a directive is escaped there, and so are the backticks of a code span that opens inside an address.

Every backslash goes before one of these characters: the "(" that follows a link's "]" ("[a]\\(b)"), the ":" that
follows a definition's "]" ("[a]\\: b"), the "<" of an autolink or tag ("\\<img>"), and for the page the ":" of a
directive and the backticks of a code span that opens in a web address. Nothing else changes: citations such as "[1]"
stay as they are, and code keeps its text.
"""

from __future__ import annotations

import functools
import re
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from itertools import groupby
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.rules_block import StateBlock
from markdown_it.rules_block.fence import make_fence_rule
from markdown_it.rules_block.html_block import HTML_SEQUENCES
from markdown_it.rules_core import StateCore
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token

from crag.parts import Code, Heading, Lead, Note, Outline, Part, Quote, Suggestions, Table, Written, text_of

# What an image, a link, a definition, an autolink or HTML needs: text holding none of these is left alone unparsed,
# unless it is for the page and could open a directive (which a parse escapes whatever follows it).
_MARKUP = ("](", "]:", "<")
_DIRECTIVE = re.compile(r":[A-Za-z]")
# Parses of one text at most: escaping a link can make an enclosing one ("[a [b](c)](d)" then "[a [b]\(c)](d)"), one
# round per level of nesting; past the parser's own nesting limit the text is escaped without parsing anyway.
_ROUNDS = 32
_FOUND = "crag.markdown"  # the key of what a parse finds, in markdown-it's env

InlineRule = Callable[[StateInline, bool], bool]
BlockRule = Callable[[StateBlock, int, int, bool], bool]


@dataclass
class _Found:
    """What one parse found, as markdown-it's rules saw it: a backslash goes before each character at ``spots``
    (offsets into the parsed text), or at ``inline_spots`` (an inline token's index and an offset into its content).
    ``deep``: the first line of a block nested past the parser's limit, which it leaves unparsed."""

    html: bool
    spots: set[int] = field(default_factory=set)
    inline: list[Token] = field(default_factory=list)
    inline_spots: set[tuple[int, int]] = field(default_factory=set)
    deep: int | None = None

    def mark(self, state: StateInline, at: int) -> None:
        self.inline_spots.add((len(self.inline) - 1, at))


def _found(state: StateInline | StateBlock | StateCore) -> _Found | None:
    found = state.env.get(_FOUND)
    return found if isinstance(found, _Found) else None


def _deeper(state: StateInline, found: _Found) -> None:
    """A link's text nested near the parser's limit, past which it stops looking for links: the paragraph's first
    line is where the parse stops being the renderer's."""
    if state.level >= state.md.options["maxNesting"] - 1:
        line = found.inline[-1].map[0] if found.inline and found.inline[-1].map else 0
        found.deep = line if found.deep is None else min(found.deep, line)


def _link(rule: InlineRule, image: bool) -> InlineRule:
    """The rule for links (or images) that marks the "(" after a link's text, then reads the link as the text it
    becomes when escaped."""

    def link(state: StateInline, silent: bool) -> bool:
        found = _found(state)
        if found is None or silent:
            if found is not None:
                _deeper(state, found)
            return rule(state, silent)
        start = state.pos
        if not rule(state, True):
            return False
        state.pos = start
        end = state.md.helpers.parseLinkLabel(state, start + 1 if image else start, not image)
        if 0 <= end < len(state.src) - 1 and state.src[end + 1] == "(":
            found.mark(state, end + 1)
        else:  # a link by reference, though no definition is left standing: cannot be
            found.deep = 0
        return False

    return link


def _tag(rule: InlineRule, html_only: bool) -> InlineRule:
    """The rule for autolinks (or inline HTML) that marks their "<", then reads them as the text they become."""

    def tag(state: StateInline, silent: bool) -> bool:
        found = _found(state)
        if found is None or (html_only and not found.html):
            return rule(state, silent)
        start = state.pos
        if not rule(state, True):
            return False
        state.pos = start
        if not silent:
            found.mark(state, start)
        return False

    return tag


def _definition(rule: BlockRule) -> BlockRule:
    """The rule for link definitions ("[a]: url") that marks the ":" after the label, then reads the definition as
    the paragraph it becomes. No definition stands, so no "[a]" anywhere becomes a link by reference."""

    def definition(state: StateBlock, line: int, end: int, silent: bool) -> bool:
        found = _found(state)
        if found is None or silent:
            return rule(state, line, end, silent)
        if not rule(state, line, end, True):  # True for a definition, without a token
            return False
        src, at = state.src, state.bMarks[line] + state.tShift[line] + 1
        while at < len(src) and src[at] != "]":  # the label holds no "[", and "\]" does not end it
            at += 2 if src[at] == "\\" else 1
        if src[at + 1 : at + 2] == ":":
            found.spots.add(at + 1)
        else:
            found.deep = 0
        return False

    return definition


def _html_block(rule: BlockRule) -> BlockRule:
    """The rule for HTML blocks that marks their "<" (for renderers that pass HTML through), then reads them as the
    text they become: a paragraph's, or a paragraph of their own. Asked whether the line interrupts a paragraph
    (``silent``), it marks the line too: escaped, it does not."""

    def html_block(state: StateBlock, line: int, end: int, silent: bool) -> bool:
        found = _found(state)
        if found is None or not found.html:
            return rule(state, line, end, silent)
        at = state.bMarks[line] + state.tShift[line]
        text = state.src[at : state.eMarks[line]]
        # (opens, closes, interrupts a paragraph): asked about a paragraph's line, only a block that interrupts
        blocks = any(opens.search(text) and (interrupts or not silent) for opens, _, interrupts in HTML_SEQUENCES)
        if blocks and text.startswith("<") and not state.is_code_block(line):
            found.spots.add(at)
        return False

    return html_block


def _inline(state: StateCore) -> None:
    """markdown-it's own rule, which also keeps the inline tokens in order: a rule that finds a link is told which
    token's content it reads."""
    found = _found(state)
    for token in state.tokens:
        if token.type == "inline":
            if found is not None:
                found.inline.append(token)
            token.children = [] if token.children is None else token.children
            state.md.inline.parse(token.content, state.md, state.env, token.children)


def _wrap(ruler: Any, name: str, wrapper: Callable[[Any], Any]) -> None:
    """Replace rule ``name`` by ``wrapper(rule)``, in the same chains of rules it may interrupt."""
    rule = ruler.__rules__[ruler.__find__(name)]
    ruler.at(name, wrapper(rule.fn), {"alt": list(rule.alt)})


def _math(state: StateInline, silent: bool) -> bool:
    """Inline math as remark-math reads it (the page's renderer, when the answer holds math): a run of dollars opens,
    the next run of as many closes, and what is between is no Markdown, as in a code span."""
    src, start, end = state.src, state.pos, state.posMax
    if src[start] != "$":
        return False
    opened = start + 1
    while opened < end and src[opened] == "$":
        opened += 1
    at = opened
    while (at := src.find("$", at, end)) >= 0:
        closed = at + 1
        while closed < end and src[closed] == "$":
            closed += 1
        if closed - at == opened - start:
            if not silent:
                state.push("math_inline", "math", 0).content = src[opened:at]
            state.pos = closed
            return True
        at = closed
    if not silent:
        state.pending += src[start:opened]
    state.pos = opened
    return True


def _directive(state: StateInline, silent: bool) -> bool:
    """Marks the ":" of a directive (":name[label]{attributes}", "::name", ":::name"), which the page's renderer reads
    and others do not: its attributes are no Markdown, and a container's end closes a fence in it. Escaped, the
    page reads the text as any CommonMark renderer does."""
    found, src, at = _found(state), state.src, state.pos
    if found is None or found.html or silent or src[at] != ":" or not _letter(src[at + 1 : at + 2]):
        return False
    end = at + 1
    while end < state.posMax and (_letter(src[end]) or src[end].isdigit() or src[end] in "-_"):
        end += 1
    if src[end : end + 1] in ("[", "{") or src[at - 1 : at] == ":":
        found.mark(state, at)
    return False


def _directive_line(state: StateBlock, line: int, end: int, silent: bool) -> bool:
    """Marks the ":" of a line that opens a leaf or container directive ("::name", ":::name"), which the page's
    renderer takes for a block of its own: it would end a paragraph, and a code span running on in it. Asked about
    a paragraph's line too (``silent``): escaped, it ends nothing."""
    found, src = _found(state), state.src
    at = state.bMarks[line] + state.tShift[line]
    colons = at
    while colons < state.eMarks[line] and src[colons] == ":":
        colons += 1
    if found is not None and not found.html and colons - at >= 2 and _letter(src[colons : colons + 1]):
        found.spots.add(colons - 1)
    return False


def _code_span(rule: InlineRule) -> InlineRule:
    """The rule for code spans, which for the page escapes the backticks of a span that opens inside a web address:
    the page's renderer links "www.x.org/`a" as one address, backtick and all, so no span opens there, and a later
    backtick opens one where this parse would close it. Escaped, no renderer opens one."""

    def code_span(state: StateInline, silent: bool) -> bool:
        found, src, start = _found(state), state.src, state.pos
        if found is None or found.html or src[start] != "`" or not _in_address(src, start):
            return rule(state, silent)
        run = start
        while run < state.posMax and src[run] == "`":
            run += 1
        opens = rule(state, True) and state.pos > run  # past its run: a span, closed by a run as long
        state.pos = start
        if not opens:
            return rule(state, silent)
        if not silent:
            for at in range(start, run):
                found.mark(state, at)
            state.pending += src[start:run]
        state.pos = run
        return True

    return code_span


def _in_address(src: str, at: int) -> bool:
    """Whether ``at`` is inside what GFM could take for a web address: a run without spaces or "<" that holds
    "www." or "://" before it, within ``_ADDRESS`` characters (each code span looks back that far at most)."""
    start = max([at - _ADDRESS, *(src.rfind(char, 0, at) + 1 for char in " \t\n<")])
    return "www." in src[start:at] or "://" in src[start:at]


_ADDRESS = 2000  # characters: longer than any web address an answer holds


def _letter(char: str) -> bool:
    return char.isascii() and char.isalpha()


# Math between lines of dollars (remark-math's math flow): a fence of its own, two dollars or more, which interrupts
# what a fence interrupts.
_MATH_BLOCK = make_fence_rule(markers=("$",), token_type="math_block", disallow_marker_in_info=("$",), min_markers=2)
_INTERRUPTS = ("paragraph", "reference", "blockquote", "list")


@functools.cache
def _parser(tables: bool, math: bool) -> MarkdownIt:
    """CommonMark, with GFM's tables or without, with remark-math's math or without: a pipe ends a table's cell even
    inside a code span, and math hides what is between its dollars, so renderers that differ in these can disagree on
    what is code and what a link; each way is asked. The page's directives are escaped in every way (``_directive``).
    """
    md = MarkdownIt("commonmark").enable("table") if tables else MarkdownIt("commonmark")
    md.inline.ruler.after("escape", "directive", _directive)
    md.block.ruler.before("table", "directive", _directive_line, {"alt": list(_INTERRUPTS)})
    if math:
        md.inline.ruler.after("backticks", "math_inline", _math)
        md.block.ruler.after(
            "fence", "math_block", _MATH_BLOCK, {"alt": ["paragraph", "reference", "blockquote", "list"]}
        )
    md.core.ruler.at("inline", _inline)
    _wrap(md.inline.ruler, "backticks", _code_span)
    _wrap(md.inline.ruler, "link", lambda rule: _link(rule, image=False))
    _wrap(md.inline.ruler, "image", lambda rule: _link(rule, image=True))
    _wrap(md.inline.ruler, "autolink", lambda rule: _tag(rule, html_only=False))
    _wrap(md.inline.ruler, "html_inline", lambda rule: _tag(rule, html_only=True))
    _wrap(md.block.ruler, "reference", _definition)
    _wrap(md.block.ruler, "html_block", _html_block)
    return md


@dataclass(frozen=True)
class _Escaped:
    """A text and where backslashes go in it to show it as typed: before each character at ``spots``. ``settled``:
    how much of it (an offset) is escaped so whatever text comes after it; the rest, an open paragraph that more text
    could still turn into something else (until the line that ends it comes)."""

    text: str
    spots: tuple[int, ...] = ()
    settled: int = 0

    def shown(self, start: int = 0, end: int | None = None) -> str:
        """The text from ``start`` to ``end``, its backslashes in."""
        end = len(self.text) if end is None else end
        out, last = [], start
        for at in self.spots[bisect_left(self.spots, start) : bisect_left(self.spots, end)]:
            out += [self.text[last:at], "\\"]
            last = at
        return "".join([*out, self.text[last:end]])


def _escaped(text: str, html: bool) -> _Escaped:
    """Where ``text`` needs backslashes, found by parsing it again with each round's backslashes in, until a parse
    finds no more. From a block nested past the parser's limit on, every character that could make markup gets one."""
    if not any(markup in text for markup in _MARKUP) and (html or not _DIRECTIVE.search(text)):
        return _Escaped(text, (), len(text))
    src, back = _normal(text)
    starts = _line_starts(src)
    spots: list[int] = []
    deep: int | None = None
    # No table without a pipe, and no math without a dollar
    readings = [(tables, math) for tables in (True, "|" not in src) for math in (False, "$" in src)]
    for _ in range(_ROUNDS):
        shown = _Escaped(src, tuple(spots)).shown()
        parses = [_parse(shown, html, *reading) for reading in dict.fromkeys(readings)]
        new = sorted({*_original(spots, set().union(*(_offsets(shown, found) for found, _ in parses)))})
        for found, _ in parses:
            deep = found.deep if deep is None or found.deep is None else min(deep, found.deep)
        if deep is not None:
            new = [at for at in new if at < starts[deep]]
        if not new:
            break
        spots = sorted({*spots, *new})
    else:
        deep = 0
    if deep is not None:
        spots = sorted({*(at for at in spots if at < starts[deep]), *_markup(src, starts[deep], page=not html)})
    # A paragraph that runs to the last line is open: the next line could still join it, or make its last line a
    # table's head. Every other block is as it will stay, and so are its backslashes.
    lines, last = len(starts) - src.endswith("\n"), len(starts) if deep is None else deep
    opened = (t.map for _, tokens in parses for t in tokens if t.type == "paragraph_open" and t.map)
    settled = min((starts[first] for first, end in opened if end >= lines and first < last), default=len(src))
    return _Escaped(text, tuple(back(at) for at in spots), back(settled))


def _parse(src: str, html: bool, tables: bool, math: bool) -> tuple[_Found, list[Token]]:
    md = _parser(tables, math)
    found = _Found(html)
    tokens = md.parse(src, {_FOUND: found})
    nested = [t.map[0] for t in tokens if t.map and t.level >= md.options["maxNesting"] - 1]
    if found.deep is not None:
        nested.append(found.deep)
    found.deep = min(nested, default=None)
    return found, tokens


def _offsets(src: str, found: _Found) -> set[int]:
    """Where in ``src`` the backslashes go that a parse found. A rule that reads a paragraph sees its content, without
    the line's indent, list marker or ">": an offset there is the nth "(", "<", ":" or "`" of its line, counted after
    those that earlier cells of a table row hold (a line's markers hold none)."""
    starts = _line_starts(src)
    spots = set(found.spots)
    by_token: dict[int, list[int]] = {}
    for index, at in found.inline_spots:
        by_token.setdefault(index, []).append(at)
    taken: Counter[tuple[int, str]] = Counter()
    where: dict[tuple[int, str], list[int]] = {}  # a line's offsets of a character
    for index, token in enumerate(found.inline):
        content, first = token.content, token.map[0] if token.map else -1
        rows = _line_starts(content)
        for at in by_token.get(index, ()):
            char, row = content[at], bisect_left(rows, at + 1) - 1
            line = first + row
            if (line, char) not in where and 0 <= line < len(starts):
                end = starts[line + 1] if line + 1 < len(starts) else len(src)
                where[line, char] = [i for i in range(starts[line], end) if src[i] == char]
            nth = taken[line, char] + content.count(char, rows[row], at)
            if first < 0 or nth >= len(where.get((line, char), ())):  # the parse and the text disagree
                found.deep = 0
                return spots
            spots.add(where[line, char][nth])
        for row, text in enumerate(content.split("\n")):
            for char in "(<:`":
                taken[first + row, char] += text.count(char)
    return spots


def _original(spots: list[int], offsets: Iterable[int]) -> Iterator[int]:
    """Offsets in a text with backslashes before ``spots`` (sorted), as offsets in the text without them."""
    inserted = [at + i for i, at in enumerate(spots)]  # where each backslash sits
    for offset in offsets:
        yield offset - bisect_left(inserted, offset)


def _markup(src: str, start: int, page: bool) -> Iterator[int]:
    """Every character from ``start`` on that could make an image, a link, a definition, an autolink or HTML: each
    "(" or ":" after a "]", and each "<" that no backslash escapes already; for the page, each ":" before a letter,
    which could open a directive."""
    for at in range(start, len(src)):
        char = src[at]
        opens = char == "<" or (page and char == ":" and _letter(src[at + 1 : at + 2]))
        if (char in "(:" and src[at - 1 : at] == "]") or (opens and _unescaped(src, at)):
            yield at


def _unescaped(src: str, at: int) -> bool:
    run = 0
    while at - run > 0 and src[at - run - 1] == "\\":
        run += 1
    return run % 2 == 0


def _line_starts(src: str) -> list[int]:
    return [0, *(found.end() for found in _NEWLINE.finditer(src))]


def _normal(text: str) -> tuple[str, Callable[[int], int]]:
    """``text`` with markdown-it's line breaks (it reads "\\r\\n" and "\\r" as "\\n", and NUL as U+FFFD), and the way
    back from an offset in it to one in ``text``."""
    if "\r" not in text and "\0" not in text:
        return text, lambda at: at
    joined = [found.start() - i for i, found in enumerate(_CRLF.finditer(text))]  # each "\r\n" made one "\n"
    src = _CRLF.sub("\n", text).replace("\r", "\n").replace("\0", "\ufffd")
    return src, lambda at: at + bisect_left(joined, at)


_NEWLINE = re.compile("\n")
_CRLF = re.compile("\r\n")


@functools.lru_cache(maxsize=256)  # the page shows every answer of a conversation again on each rerun
def model_markdown(markdown: str, html: bool = False) -> str:
    """A model's answer as Markdown to show, with images and links as the text that was typed: the browser fetches
    no address a document or web page could have dictated, and a link's target is in view, never hidden behind its
    text (``[the manual](https://elsewhere)`` shows whole). Code is left as it is: it renders no link.
    ``html``: HTML tags are shown as typed too, for readers whose renderer would pass them through (API clients);
    without it, the text is for the app's page, whose renderer shows HTML as text but reads Streamlit's directives
    and links bare web addresses."""
    return _escaped(markdown, html).shown()


def safe_stream(deltas: Iterable[str], html: bool = False) -> Iterator[str]:
    """``model_markdown`` for a stream: the text it gives, joined, is ``model_markdown`` of the whole. Text comes out
    as it comes in, up to a "(" or ":" after a "]" or a "<" whose paragraph is still open: from there it waits for the
    line that ends that paragraph (or for the end), and what the parse then decides comes out at once. An empty delta
    passes as "": the stream is alive, and its reader may stop it there."""
    text, done, read = "", 0, 0  # text[:done] has been given out; text[:read], its lines looked at
    for delta in deltas:
        if not delta:
            yield ""
            continue
        text += delta
        piece, lines = "", text[read : text.rfind("\n") + 1]
        read += len(lines)
        if _may_end(lines) and _next_markup(text, done, page=not html) < len(text):
            whole = _escaped(text[:read], html)
            if whole.settled > done:
                piece, done = whole.shown(done, whole.settled), whole.settled
        end = _next_markup(text, done, page=not html)
        piece, done = piece + text[done:end], max(done, end)
        if piece:
            yield piece
    if rest := _escaped(text, html).shown(done):
        yield rest


def _may_end(lines: str) -> bool:
    """Whether a paragraph could end at one of these (whole) lines: a blank one, or one that opens with what could
    open a block (a marker, a digit, a fence, a pipe). A line that opens with a letter goes on the paragraph before
    it, so a long paragraph is not parsed again line after line."""
    return any(not line.strip() or not line.lstrip()[0].isalpha() for line in lines.split("\n")[:-1])


def _next_markup(text: str, start: int, page: bool) -> int:
    """Where the first character that may get a backslash is, from ``start`` on: a "<", or a "(" or ":" after a "]";
    for the page, a ":" before a letter, or last (the next delta may bring the letter), and a backtick in a web
    address. The length of ``text`` when there is none."""
    found = [text.find("<", start)]
    found += [at + 1 for at in (text.find(pair, max(start - 1, 0)) for pair in ("](", "]:")) if at >= 0]
    if page:
        at = text.find(":", start)
        while at >= 0 and at + 1 < len(text) and not _letter(text[at + 1]):
            at = text.find(":", at + 1)
        tick = text.find("`", start)
        while tick >= 0 and not _in_address(text, tick):
            tick = text.find("`", tick + 1)
        found += [at, tick]
    return min((at for at in found if at >= start), default=len(text))


# ---------------------------------------------------------------------------------------------
# An answer's parts as Markdown for API clients (/ask, /v1, MCP)

# What could open code, a link, a definition, an autolink or HTML in a line of a document's text: a backtick, a "(" or
# ":" right after a "]", a "<" before a letter, "/", "!" or "?".
_OPENS = re.compile(r"`|(?<=\])[(:]|<(?=[A-Za-z/!?])")
_SPAN = re.compile(r"`[^`\n]+`")  # a command in the app's own words: "`python -m crag index`"


def literal(text: str) -> str:
    """A document's text (or a user's) as Markdown that any renderer shows as text, whatever it holds: a backslash
    goes before each character that could open code, a link, a definition, an autolink or HTML, unless one escapes it
    already. Decided character by character: no parse, so nothing in the text can make it guess wrong. Other markup
    (emphasis) is left as it is: it changes how words look, never where a reader's browser goes."""
    out, last = [], 0
    for found in _OPENS.finditer(text):
        at = found.start()
        if _unescaped(text, at):
            out += [text[last:at], "\\"]
            last = at
    return "".join([*out, text[last:]])


def _coded(text: str) -> str:
    """The app's words: each `command` code as it is (a span that no backslash keeps from opening), the rest
    ``literal``."""
    out, last = [], 0
    for found in _SPAN.finditer(text):
        if not _unescaped(text, found.start()):
            continue
        out += [literal(text[last : found.start()]), found[0]]
        last = found.end()
    return "".join([*out, literal(text[last:])])


def _rows(rows: Sequence[Sequence[str]]) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(literal(cell) for cell in row) for row in rows)


_API: dict[type, Callable[[Any], str]] = {
    Lead: lambda p: literal(p.text),
    Note: lambda p: _coded(p.text),
    Quote: lambda p: text_of(replace(p, text=literal(p.text), faq=literal(p.faq))),
    Code: lambda p: text_of(replace(p, faq=literal(p.faq))),  # in a fence longer than any run of backticks in it
    Table: lambda p: text_of(replace(p, rows=_rows(p.rows), faq=literal(p.faq))),
    Heading: lambda p: text_of(replace(p, text=literal(p.text), detail=literal(p.detail))),
    Outline: lambda p: text_of(
        replace(p, heading=literal(p.heading), entries=tuple((d, literal(e)) for d, e in p.entries))
    ),
    Suggestions: lambda p: "",  # under the answer, not in it: the contract's ``suggestions``
}


def api_stream(parts: Iterable[Part | None], html: bool = True) -> Iterator[str]:
    """An answer's parts as the Markdown API clients get, as they come: what the model wrote through ``safe_stream``
    (its sentences in a row are one text), every other part as text by construction (``literal``; code in its fence).
    A None (the answer goes on, nothing new) passes as "". Joined, it is ``api_markdown``."""
    for written, group in groupby(parts, key=lambda p: p is None or isinstance(p, Written)):
        if written:
            yield from safe_stream(("" if p is None else p.gap + p.text for p in group), html=html)  # type: ignore[union-attr]
        else:
            yield from (p.gap + _API[type(p)](p) for p in group if p is not None)


def api_markdown(parts: Iterable[Part]) -> str:
    """An answer's parts as Markdown for clients that render it (the API's /ask and /v1, MCP), stripped as the
    answer's text is: images, links and HTML show as typed, and so does everything a document says."""
    return "".join(api_stream(parts)).strip()


def escaped_parts(parts: Sequence[Part]) -> list[Part]:
    """The parts as API clients get them as data: what the model wrote as ``model_markdown`` escapes it, each
    sentence in the context of those around it (a link may run across two); every other part as it is, its text the
    document's or the app's, to be shown as text."""
    out: list[Part] = []
    for written, group in groupby(parts, key=lambda p: isinstance(p, Written)):
        run = list(group)
        if not written:
            out += run
            continue
        joined = "".join(p.gap + p.text for p in run if isinstance(p, Written))
        escaped, at = _escaped(joined, True), 0
        for p in run:
            assert isinstance(p, Written)
            start = at + len(p.gap)
            at = start + len(p.text)
            out.append(replace(p, text=escaped.shown(start, at)))
    return out
