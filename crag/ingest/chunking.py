"""Layout blocks -> chunks, along the layout.

- A title closes the chunk before it and opens a section; chunks carry the heading path.
- A table stays whole, with its caption; an equation is never split.
- Paragraphs are packed up to ``chunk_tokens``; one that is too long is split at sentence ends
  (Chinese sentence punctuation included), and consecutive chunks share ``overlap`` tokens.
- Page headers, footers and page numbers are dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from crag.text import join_sentences, split_sentences
from crag.types import Block, Chunk, ParsedPDF

TokenCounter = Callable[[str], int]

ATOMIC = ("table", "equation")
DROPPED = ("header", "footer")


@dataclass
class _Unit:
    """A piece that is never split further: a sentence, a list item, a table with its caption."""

    text: str
    tokens: int
    blocks: tuple[Block, ...]
    atomic: bool = False


@dataclass
class _Draft:
    units: list[_Unit] = field(default_factory=list)
    tokens: int = 0


def _hard_split(text: str, limit: int, count: TokenCounter) -> list[str]:
    """A 'sentence' longer than a chunk (a run-on line, a long URL list) is cut by size."""
    words = text.split(" ") if " " in text else list(text)
    joiner = " " if " " in text else ""
    pieces, current = [], []
    for word in words:
        if current and count(joiner.join([*current, word])) > limit:
            pieces.append(joiner.join(current))
            current = []
        current.append(word)
    if current:
        pieces.append(joiner.join(current))
    return pieces


def _units(blocks: Sequence[Block], limit: int, count: TokenCounter) -> list[_Unit | Block]:
    """Blocks as units, with titles left in place as section markers."""
    kept = [b for b in blocks if b.type not in DROPPED and (b.text.strip() or b.type == "title")]
    out: list[_Unit | Block] = []
    i = 0
    while i < len(kept):
        block = kept[i]
        if block.type == "title":
            out.append(block)
        elif block.type == "table":
            group = [block]
            if out and isinstance(out[-1], _Unit) and out[-1].blocks[-1].type == "caption":
                group.insert(0, out.pop().blocks[0])
            elif i + 1 < len(kept) and kept[i + 1].type == "caption":
                group.append(kept[i + 1])
                i += 1
            text = "\n\n".join(b.text for b in group)
            out.append(_Unit(text, count(text), tuple(group), atomic=True))
        elif block.type in ATOMIC or block.type in ("caption", "code"):
            out.append(_Unit(block.text, count(block.text), (block,), atomic=block.type in ATOMIC))
        else:
            tokens = count(block.text)
            if tokens <= limit:
                out.append(_Unit(block.text, tokens, (block,)))
            else:
                for sentence in split_sentences(block.text):
                    for piece in _hard_split(sentence, limit, count) if count(sentence) > limit else [sentence]:
                        out.append(_Unit(piece, count(piece), (block,)))
        i += 1
    return out


def chunk_blocks(
    parsed: ParsedPDF,
    file: str,
    file_hash: str,
    count: TokenCounter,
    chunk_tokens: int = 256,
    overlap: int = 32,
) -> list[Chunk]:
    """Chunks for one parsed file. Ids are stable for the same content and settings."""
    chunks: list[Chunk] = []
    headings: list[tuple[int, str]] = []
    draft = _Draft()

    def section() -> str:
        return " > ".join(text for _, text in headings)

    def flush(carry: bool) -> None:
        nonlocal draft
        if not draft.units:
            return
        blocks = [b for u in draft.units for b in u.blocks]
        chunks.append(
            Chunk(
                id=f"{file_hash[:16]}-{len(chunks):05d}",
                text=_join(draft.units),
                file=file,
                pages=tuple(sorted({b.page for b in blocks})),
                section=section(),
                bboxes=tuple(dict.fromkeys((b.page, *b.bbox) for b in blocks)),
                block_types=tuple(dict.fromkeys(b.type for b in blocks)),
                parser=parsed.parser,
                parser_version=parsed.parser_version,
                file_hash=file_hash,
            )
        )
        tail: list[_Unit] = []
        if carry:
            # Overlap: the last whole sentences of this chunk open the next one.
            budget = overlap
            for unit in reversed(draft.units):
                if unit.atomic or unit.tokens > budget:
                    break
                tail.insert(0, unit)
                budget -= unit.tokens
        draft = _Draft(tail, sum(u.tokens for u in tail))

    for item in _units(parsed.blocks, chunk_tokens, count):
        if isinstance(item, Block):  # a title: close the chunk, enter the section
            flush(carry=False)
            level = item.level or 1
            headings = [(lv, t) for lv, t in headings if lv < level] + [(level, item.text.strip())]
            continue
        if draft.units and draft.tokens + item.tokens > chunk_tokens:
            flush(carry=not item.atomic)
            if item.atomic:
                draft = _Draft()
        draft.units.append(item)
        draft.tokens += item.tokens
    flush(carry=False)
    return chunks


def _join(units: Sequence[_Unit]) -> str:
    """Sentences of one block join with a space (none for CJK); blocks join with a blank line."""
    text = ""
    previous: Block | None = None
    for unit in units:
        block = unit.blocks[0]
        if not text:
            text = unit.text
        elif block is previous and not unit.atomic:
            text = join_sentences(text, unit.text)
        else:
            text += "\n\n" + unit.text
        previous = unit.blocks[-1]
    return text
