"""Layout blocks -> chunks, along the layout.

- A title closes the chunk before it and opens a section; chunks carry the heading path.
- A table stays whole, with its caption; an equation is never split.
- Paragraphs are packed up to ``chunk_tokens``; one that is too long is split at sentence ends
  (Chinese sentence punctuation included), and consecutive chunks share ``overlap`` tokens.
- Page headers, footers and page numbers are dropped, and so are tables of contents and indexes.
- A page's footnotes wait until the paragraph open at the foot of their page has ended on the next one: they
  stood between the two halves of a sentence ("接下来在 Terminal 中执行" / [footnotes] / the command).
- With ``max_tokens`` (the embedder's window), heading path + text never exceed it: the embedder
  would silently cut the rest. The text then gets what the heading leaves, the overlap shrinks when
  it must, and a table or equation larger than the window is cut (a table between rows, its header
  row repeated on every piece).

``Chunker`` takes a file page by page, so a build embeds the first pages' chunks while the parser
reads the next ones; ``chunk_blocks`` is the same for a whole parsed file.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from crag.text import ENDED, drop_glyphs, join_sentences, note_text, split_sentences
from crag.types import Block, Chunk, ParsedPDF

TokenCounter = Callable[[str], int]

# Goes up when the same blocks make different chunks: an index of older chunks is then rebuilt whole.
# 2: tables of contents and indexes left out; 3: margin notes (PyMuPDF) left out; 4: displayed commands and lines of
# running text that the layout model calls headings are text (PyMuPDF); 5: a paragraph goes on over a page break;
# 6: footnotes wait for the paragraph they interrupt; their raised marks leave the text (PyMuPDF); 7: a footnote's own
# mark is raised ("²sudo …"), so that its strip ends with it; 8: code keeps its line breaks, a code block split over
# two boxes is one, glyphs that are not text are dropped (and PyMuPDF finds code set in a monospaced font); 9: sizes are
# counted in the built-in embedder's tokens (USE's SentencePiece), no longer MiniLM's
CHUNKER_VERSION = 9

ATOMIC = ("table", "equation")
# How a paragraph's second half may open: a lower-case word or a Chinese character, not a capital or a number.
GOES_ON = re.compile(r"[a-z\u3400-\u9fff]")
DROPPED = ("header", "footer")
MARKDOWN_RULE = re.compile(r"^\|?\s*:?-{3,}")  # the |---|---| line under a markdown table's header row
# A line of a table of contents or of an index: dot leaders, then page numbers ("Legalese . . . . 1",
# "|1.2|What is Debian?<br>. . . .|1|", "Quoting strings_. . . ._ 5, 8|").
# Tried only where a run of leaders starts, and taken whole: a line of dots alone is read once, not once per dot.
LEADER_LINE = re.compile(
    r"(?<!\.)(?<!\.\s)(?:\.\s?){4,}+[\s_*|]*(?:<br>)?[\s_*|]*(?:\d+|[ivxlc]+)(?:\s*[,，–-]\s*\d+)*[\s_*|]*$",
    re.IGNORECASE,
)


def is_navigation(text: str) -> bool:
    """A table of contents or an index: most lines are dot leaders to a page number. It says where, not what:
    its entries are the document's own headings, which stay with their sections. Indexed, it would outrank
    the section it points to (it holds every heading's words) and has nothing to quote."""
    lines = [ln for ln in (ln.strip() for ln in text.split("\n")) if ln and not MARKDOWN_RULE.match(ln)]
    return bool(lines) and 2 * sum(bool(LEADER_LINE.search(ln)) for ln in lines) >= len(lines)


@dataclass(kw_only=True)
class _Unit:
    """A piece that is never split further: a sentence, a list item, a table with its caption."""

    text: str
    tokens: int
    blocks: tuple[Block, ...]
    atomic: bool = False  # a table or an equation: a chunk of its own, no overlap into it
    whole: bool = False  # cut only to fit the embedder's window, never to chunk size (atomic, captions, code)


@dataclass
class _Draft:
    units: list[_Unit] = field(default_factory=list)
    tokens: int = 0
    carried: int = 0  # leading units that are the previous chunk's overlap


def _hard_split(text: str, limit: int, count: TokenCounter) -> list[str]:
    """A 'sentence' longer than a chunk (a run-on line, a long URL list) is cut by size; a word longer
    than a chunk, by characters."""
    words = text.split(" ") if " " in text else list(text)
    joiner = " " if " " in text else ""
    pieces: list[str] = []
    current: list[str] = []
    for word in words:
        if current and count(joiner.join([*current, word])) > limit:
            pieces.append(joiner.join(current))
            current = []
        if joiner and count(word) > limit:
            pieces += _hard_split(word, limit, count)
            continue
        current.append(word)
    if current:
        pieces.append(joiner.join(current))
    return [p for p in pieces if p.strip()]


def _pack_lines(
    lines: Sequence[str], limit: int, count: TokenCounter, header: Sequence[str] = (), joiner: str = "\n"
) -> list[str]:
    """Lines packed into pieces of at most ``limit`` tokens, each opening with ``header``."""
    head = count(joiner.join(header)) if header else 0
    pieces: list[str] = []
    current: list[str] = []
    size = head
    for line in lines:
        tokens = count(line)
        if tokens + head > limit:  # a row longer than a chunk: cut by size
            for part in _hard_split(line, max(limit - head, 1), count):
                pieces.append(joiner.join([*header, part]))
            continue
        if current and size + tokens > limit:
            pieces.append(joiner.join([*header, *current]))
            current, size = [], head
        current.append(line)
        size += tokens
    if current:
        pieces.append(joiner.join([*header, *current]))
    return pieces


def _split_table(unit: _Unit, limit: int, count: TokenCounter) -> list[str]:
    """A table too large for one chunk, cut between rows. Its header row opens every piece; its caption
    stays on the first piece (a caption above) or the last (a caption below)."""
    table = next(b for b in unit.blocks if b.type == "table")
    before = "\n\n".join(b.text for b in unit.blocks[: unit.blocks.index(table)])
    after = "\n\n".join(b.text for b in unit.blocks[unit.blocks.index(table) + 1 :])
    lines, joiner = table.text.split("\n"), "\n"
    if len(lines) == 1 and "</tr>" in table.text:  # MinerU's HTML: one line, rows end with </tr>
        lines, joiner = [row for row in re.split(r"(?<=</tr>)", table.text) if row], ""
    header = lines[:2] if len(lines) > 2 and MARKDOWN_RULE.match(lines[1].strip()) else []
    body = lines[len(header) :]
    room = limit - count(before) - count(after)
    if room <= count("\n".join(header)) + 8:  # a caption that fills the window travels on its own
        return [
            *_pack_lines([before], limit, count),
            *_pack_lines(lines, limit, count, joiner=joiner),
            *_pack_lines([after], limit, count),
        ]
    pieces = _pack_lines(body, room, count, header, joiner)
    if before:
        pieces[0] = f"{before}\n\n{pieces[0]}"
    if after:
        pieces[-1] = f"{pieces[-1]}\n\n{after}"
    return [p for p in pieces if p.strip()]


def _fit(unit: _Unit, limit: int, room: int | None, count: TokenCounter) -> list[_Unit]:
    """The unit as pieces that fit: text at most ``limit`` tokens, a whole unit at most ``room`` (the window
    left by the heading; None: no window known, it stays whole)."""
    if unit.whole:
        if room is None or unit.tokens <= room:
            return [unit]
        limit = room
    elif unit.tokens <= limit:
        return [unit]
    if any(b.type == "table" for b in unit.blocks):
        texts = _split_table(unit, limit, count)
    elif unit.atomic:
        texts = _hard_split(unit.text, limit, count)
    elif "\n" in unit.text:  # code: whole lines, still one below the other
        texts = _pack_lines(unit.text.split("\n"), limit, count)
    else:
        texts = [
            p for s in split_sentences(unit.text) for p in (_hard_split(s, limit, count) if count(s) > limit else [s])
        ]
    return [_Unit(text=t, tokens=count(t), blocks=unit.blocks, atomic=unit.atomic, whole=unit.whole) for t in texts]


class Chunker:
    """Chunks of one file, fed page by page. ``add`` returns the chunks it completed; ``finish`` the rest.

    Chunks come without ``parser``/``parser_version``: a parser may change its mind about a file at its end
    (MinerU falling back for the whole file), so the build sets them once the file is parsed.
    """

    def __init__(
        self,
        file: str,
        file_hash: str,
        count: TokenCounter,
        chunk_tokens: int = 256,
        overlap: int = 32,
        max_tokens: int | None = None,
    ) -> None:
        self.file, self.file_hash, self.count = file, file_hash, count
        self.chunk_tokens, self.overlap, self.max_tokens = chunk_tokens, overlap, max_tokens
        self.made = 0
        self._headings: list[tuple[int, str]] = []
        self._section = ""
        self._budget = chunk_tokens  # for the text of a chunk
        self._room: int | None = None  # the window less the heading path; None without a window
        self._enter_section()
        self._draft = _Draft()
        self._blocks: list[Block] = []  # kept blocks not yet made units: the last waits for a caption below it
        self._units: list[_Unit | Block] = []  # the last waits, in case a table below takes it as its caption
        self._notes: list[Block] = []  # footnotes waiting for the paragraph they interrupt to end
        self._out: list[Chunk] = []

    def add(self, blocks: Sequence[Block]) -> list[Chunk]:
        self._blocks += [
            b
            for b in map(_text_only, blocks)
            if b.type == "title" or (b.type not in DROPPED and b.text.strip() and not is_navigation(b.text))
        ]
        self._make_units(final=False)
        return self._take()

    def finish(self) -> list[Chunk]:
        self._make_units(final=True)
        self._flush(carry=False)
        return self._take()

    def _take(self) -> list[Chunk]:
        out, self._out = self._out, []
        return out

    def _make_units(self, final: bool) -> None:
        """Blocks as units, with titles left in place as section markers; then pack the units."""
        kept, i = self._blocks, 0
        while i < len(kept) - (0 if final else 1):
            block = kept[i]
            self._place_notes(block)
            if block.type == "footnote":
                self._notes.append(block)
            elif block.type == "title":
                self._units.append(block)
            elif block.type == "table":
                group = [block]
                last = self._units[-1] if self._units else None
                if isinstance(last, _Unit) and last.blocks[-1].type == "caption":
                    self._units.pop()
                    group.insert(0, last.blocks[0])
                elif i + 1 < len(kept) and kept[i + 1].type == "caption":
                    group.append(kept[i + 1])
                    i += 1
                text = "\n\n".join(b.text for b in group)
                self._units.append(
                    _Unit(text=text, tokens=self.count(text), blocks=tuple(group), atomic=True, whole=True)
                )
            elif self._units and (_goes_on(self._units[-1], block) or _code_goes_on(self._units[-1], block)):
                last = self._units.pop()
                assert isinstance(last, _Unit)  # only a _Unit goes on (_goes_on, _code_goes_on)
                text = (_join_code if block.type == "code" else join_sentences)(last.text, block.text)
                self._units.append(
                    _Unit(text=text, tokens=self.count(text), blocks=(*last.blocks, block), whole=last.whole)
                )
            else:
                atomic = block.type in ATOMIC
                whole = atomic or block.type in ("caption", "code")
                self._units.append(
                    _Unit(text=block.text, tokens=self.count(block.text), blocks=(block,), atomic=atomic, whole=whole)
                )
            i += 1
        self._blocks = kept[i:]
        if final:
            self._place_notes(None)
        ready = self._units if final else self._units[:-1]
        self._units = [] if final else self._units[-1:]
        for item in ready:
            self._pack(item)

    def _pack(self, item: _Unit | Block) -> None:
        if isinstance(item, Block):  # a title: close the chunk, enter the section
            self._flush(carry=False)
            level = item.level or 1
            self._headings = [(lv, t) for lv, t in self._headings if lv < level] + [(level, item.text.strip())]
            self._enter_section()
            return
        for piece in _fit(item, self._budget, self._room, self.count):
            draft = self._draft
            if draft.units and draft.tokens + piece.tokens > self._budget and draft.carried < len(draft.units):
                self._flush(carry=not piece.atomic)
            draft = self._draft
            # Overlap is a courtesy: it shrinks, oldest sentence first, rather than push a chunk past its budget.
            while draft.carried and draft.tokens + piece.tokens > self._budget:
                draft.tokens -= draft.units.pop(0).tokens
                draft.carried -= 1
            draft.units.append(piece)
            draft.tokens += piece.tokens

    def _enter_section(self) -> None:
        """The heading path, and what it leaves of the window for the text. A path longer than half the
        window keeps its innermost headings."""
        if self.max_tokens is None:
            self._section = " > ".join(text for _, text in self._headings)
            return
        headings = [text for _, text in self._headings]
        while len(headings) > 1 and self.count(" > ".join(headings)) > self.max_tokens // 2:
            headings.pop(0)
        section = " > ".join(headings)
        if self.count(section) > self.max_tokens // 2:
            section = _hard_split(section, self.max_tokens // 2, self.count)[0]
        self._section = section
        self._room = self.max_tokens - self.count(section)
        self._budget = max(1, min(self.chunk_tokens, self._room))

    def _flush(self, carry: bool) -> None:
        units = self._draft.units
        if not units or self._draft.carried == len(units):
            self._draft = _Draft()
            return
        rest: list[_Unit] = []
        # Counts add up across the units of a chunk (the tokenizer splits at spaces and around CJK), so this
        # rarely fires; it keeps the promise when a join would merge two pieces into other tokens.
        while self.max_tokens and len(units) > 1 and self._too_long(_join(units)):
            rest.insert(0, units.pop())
        blocks = [b for u in units for b in u.blocks]
        self._out.append(
            Chunk(
                id=f"{self.file_hash[:16]}-{self.made:05d}",
                text=_join(units),
                file=self.file,
                pages=tuple(sorted({b.page for b in blocks})),
                section=self._section,
                bboxes=tuple(dict.fromkeys((b.page, *b.bbox) for b in blocks)),
                block_types=tuple(dict.fromkeys(b.type for b in blocks)),
                file_hash=self.file_hash,
            )
        )
        self.made += 1
        if rest:
            self._draft = _Draft(rest, sum(u.tokens for u in rest))
            self._flush(carry)
            return
        tail: list[_Unit] = []
        if carry:
            # Overlap: the last whole sentences of this chunk open the next one.
            budget = self.overlap
            for unit in reversed(units):
                if unit.atomic or unit.tokens > budget:
                    break
                tail.insert(0, unit)
                budget -= unit.tokens
        self._draft = _Draft(tail, sum(u.tokens for u in tail), carried=len(tail))

    def _too_long(self, text: str) -> bool:
        return self.max_tokens is not None and self.count(self._section) + self.count(text) > self.max_tokens

    def _place_notes(self, block: Block | None) -> None:
        """The footnotes held back go in before ``block`` (None: the file's end) once the paragraph open at the foot
        of their page has ended: at a title, at a later page after a full stop, or two pages on at the latest."""
        if not self._notes or (block is not None and block.type == "footnote"):
            return
        page, last = self._notes[-1].page, self._units[-1] if self._units else None
        ended = not isinstance(last, _Unit) or bool(ENDED.search(last.text))
        if block is None or block.type == "title" or block.page > page + 1 or (block.page > page and ended):
            for note in self._notes:
                text = note_text(note.text)
                self._units.append(_Unit(text=text, tokens=self.count(text), blocks=(note,)))
            self._notes = []


def chunk_blocks(
    parsed: ParsedPDF,
    file: str,
    file_hash: str,
    count: TokenCounter,
    chunk_tokens: int = 256,
    overlap: int = 32,
    max_tokens: int | None = None,
) -> list[Chunk]:
    """Chunks for one parsed file. Ids are stable for the same content and settings."""
    chunker = Chunker(file, file_hash, count, chunk_tokens, overlap, max_tokens)
    chunks = chunker.add(parsed.blocks) + chunker.finish()
    return [replace(c, parser=parsed.parser, parser_version=parsed.parser_version) for c in chunks]


def _goes_on(last: _Unit | Block, block: Block) -> bool:
    """Whether a text block on a new page goes on with the paragraph the last page ended in: that one has no full
    stop yet ("…不能用 \\clearpage 命令，这个命" / "令会开始在新的一页上排版…"). Cut at the page break, the two
    halves of the sentence would be quoted apart."""
    return (
        isinstance(last, _Unit)
        and block.type == last.blocks[-1].type == "text"
        and block.page > last.blocks[-1].page
        and not ENDED.search(last.text)
        and bool(GOES_ON.match(block.text))
    )


def _code_goes_on(last: _Unit | Block, block: Block) -> bool:
    """Whether a code block goes on with the one before it: a listing the layout cut into two boxes of one page."""
    return (
        isinstance(last, _Unit) and block.type == last.blocks[-1].type == "code" and block.page == last.blocks[-1].page
    )


def _join_code(left: str, right: str) -> str:
    return f"{left}\n{right}" if left else right


def _text_only(block: Block) -> Block:
    """A block without the glyphs that are not text (``drop_glyphs``), whichever parser read it. A line of code or a
    row of a table keeps its line break; in prose, the space a glyph leaves goes with it."""
    text = drop_glyphs(block.text)
    if text == block.text:
        return block
    if block.type not in ("code", "table", "equation"):
        text = " ".join(text.split())
    return replace(block, text=text)


def _join(units: Sequence[_Unit]) -> str:
    """Sentences of one paragraph join with a space (none for CJK); paragraphs join with a blank line."""
    text = ""
    previous: tuple[Block, ...] = ()
    for unit in units:
        if not text:
            text = unit.text
        elif previous and (unit.blocks[0] is previous[-1] or unit.blocks == previous) and not unit.atomic:
            # Two pieces of one block: a sentence goes on a paragraph, a line of code goes below the one before.
            text = (_join_code if unit.blocks[0].type == "code" else join_sentences)(text, unit.text)
        else:
            text += "\n\n" + unit.text
        previous = unit.blocks
    return text
