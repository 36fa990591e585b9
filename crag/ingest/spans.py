"""A layout box's text from PyMuPDF's spans: characters cleaned, spans joined into lines, footnote marks left out,
and code kept as code.

A span is a run of text in one font (``{"text", "bbox", "flags", "font", "size"}``); a line holds spans, a layout box
(pymupdf4llm's ``LayoutBox``) holds lines. The layout model often puts a displayed listing in the box of the sentence
that introduces it ("Three useful forms are" then ten lines of R): lines set wholly in a monospaced font are code, and
a run of them is a block of its own, its line breaks and indentation kept.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from crag.text import NOTE_MARK, drop_glyphs, join_lines, strip_invisible

if TYPE_CHECKING:
    from pymupdf4llm.helpers.document_layout import LayoutBox

SUPERSCRIPT, MONOSPACED, BOLD = 1, 8, 16  # PyMuPDF's span flags
LIGATURE = re.compile("[\ufb00-\ufb06]")
# Two spans closer than this (a share of the font size) touch: no space between them. A word space is a
# quarter of an em or more; logos (the L, raised A and TEX of LaTeX), kerning and font changes are less.
TOUCHING = 0.1
CODE_LINES = 2  # a run of monospaced lines this long is a code block; one such line is a command in a sentence
# Monospaced fonts by name: many PDFs leave the flag unset (NimbusMonL in the bzip2 manual, FreeMono, LiberationMono,
# CMTT9 in TeX-made ones).
MONO_FONT = re.compile(r"mono|courier|cmtt|nimbusmon|typewriter|consola|menlo|inconsolata|sourcecode", re.IGNORECASE)


def clean(text: str) -> str:
    """Ligatures (ﬁ -> fi) are folded so words match; C0/C1 controls (bullets in some fonts) go, and so do glyphs
    that are not text (a symbol font's private-use codes, U+FFFD).

    Only the ligature block is normalised: NFKC on everything would turn Chinese full-width
    punctuation (！？；) into ASCII and blur the sentence boundaries the chunker splits on.
    """
    return drop_glyphs(strip_invisible(LIGATURE.sub(lambda m: unicodedata.normalize("NFKC", m.group()), text)))


def join_spans(spans: Sequence[dict], marks: Collection[str] = ()) -> str:
    """One line's spans as text. TeX-made PDFs often have no space characters between the spans of a
    line (spacing is positional), so the gap between their boxes decides. A raised footnote mark (one of
    ``marks``) is left out: glued to a word, it made another word of it ("secure_path 中4.", "control.6")."""
    out, last = "", None
    for span in spans:
        text = clean(span["text"])
        if span["flags"] & SUPERSCRIPT and text.strip() in marks:
            last = span  # what follows the mark touches it, not the word before it
            continue
        if not text.strip():
            continue
        size = max(span.get("size") or 0.0, (last or {}).get("size") or 0.0, 1.0)
        if last is not None and span["bbox"][0] - last["bbox"][2] < TOUCHING * size:
            out += text
        else:
            out = join_lines([out, text], dehyphenate=False)
        last = span
    return " ".join(out.split())


def spans(box: LayoutBox) -> list[dict]:
    return [span for line in box.textlines or [] for span in line["spans"] if span["text"].strip()]


def _visible(line: dict) -> list[dict]:
    return [span for span in line["spans"] if clean(span["text"]).strip()]


def monospaced(line: dict) -> bool:
    """A line set wholly in a monospaced font (by its flag or its name)."""
    shown = _visible(line)
    return bool(shown) and all(span["flags"] & MONOSPACED or MONO_FONT.search(span.get("font", "")) for span in shown)


def _char_width(lines: Sequence[dict]) -> float:
    """The advance of one character of a monospaced font, from the spans' boxes."""
    shown = [span for line in lines for span in _visible(line)]
    chars = sum(len(span["text"]) for span in shown)
    extent = sum(span["bbox"][2] - span["bbox"][0] for span in shown)
    return extent / chars if chars and extent > 0 else 6.0


def code_lines(lines: Sequence[dict]) -> str:
    """Lines of code, one below the other, indented as the page sets them: the gaps between spans and before a line
    are counted in characters of the font."""
    shown = [_visible(line) for line in lines]
    shown = [s for s in shown if s]
    if not shown:
        return ""
    char = max(_char_width(lines), 0.5)
    left = min(s[0]["bbox"][0] for s in shown)
    out = []
    for line in shown:
        text, end = " " * round((line[0]["bbox"][0] - left) / char), None
        for span in line:
            piece = clean(span["text"])
            gap = 0.0 if end is None else span["bbox"][0] - end
            if gap > char / 2 and not text.endswith(" ") and not piece.startswith(" "):
                text += " " * max(1, round(gap / char))
            text += piece
            end = span["bbox"][2]
        out.append(text.rstrip())
    return "\n".join(out)


def box_text(box: LayoutBox, marks: Collection[str] = ()) -> str:
    if box.boxclass == "table" and box.table:
        return clean(box.table.get("markdown") or "").strip()
    if box.boxclass == "code":
        return code_lines(box.textlines or [])
    marks = () if box.boxclass == "footnote" else marks  # a note opens with its own mark
    return join_lines([join_spans(line["spans"], marks) for line in box.textlines or []])


@dataclass(frozen=True)
class Piece:
    """Part of a layout box: prose, or a run of code lines (``code``), with the region its lines cover."""

    text: str
    code: bool
    bbox: tuple[float, float, float, float]


def box_pieces(box: LayoutBox, marks: Collection[str] = ()) -> list[Piece]:
    """A text box as its prose and its code: each run of at least ``CODE_LINES`` monospaced lines is code, the lines
    around it prose. A box without such a run is one piece, its ``box_text``."""
    lines = box.textlines or []
    whole = (float(box.x0), float(box.y0), float(box.x1), float(box.y1))
    mono = [monospaced(line) for line in lines] if box.boxclass == "text" else []
    if sum(mono) < CODE_LINES:
        return [Piece(box_text(box, marks), box.boxclass == "code", whole)]
    pieces: list[Piece] = []
    start = 0
    for end in range(1, len(lines) + 1):
        if end < len(lines) and mono[end] == mono[start]:
            continue
        run = lines[start:end]
        code = mono[start] and len(run) >= CODE_LINES
        text = code_lines(run) if code else join_lines([join_spans(line["spans"], marks) for line in run])
        if pieces and not code and not pieces[-1].code:  # a lone monospaced line stays in its sentence
            last = pieces.pop()
            pieces.append(Piece(join_lines([last.text, text]), False, _union(last.bbox, _region(run))))
        elif text:
            pieces.append(Piece(text, code, _region(run)))
        start = end
    return pieces


def _region(lines: Sequence[dict]) -> tuple[float, float, float, float]:
    boxes = [tuple(line["bbox"]) for line in lines]
    return (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))


def _union(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float, float]:
    return (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))


def note_marks(boxes: Sequence[LayoutBox]) -> set[str]:
    """The marks that the page's footnotes open with: only those are footnote marks in its text, not every raised
    number (x², 10⁶)."""
    return {m.group(1) for box in boxes if box.boxclass == "footnote" and (m := NOTE_MARK.match(box_text(box)))}
