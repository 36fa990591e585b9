"""OCR lines -> paragraphs in reading order. Pure geometry: no engine, no PDF.

Columns first: a vertical strip that no line crosses, or that only lines wider than a column
cross, splits the page, and the left side is read before the right one (a heading across both
columns closes the columns above it). Within a column, pieces of one visual line are joined left to
right, and lines are grouped into paragraphs by vertical gaps, indentation, short last lines, size
changes and bullets. Chinese lines join without spaces, English lines with one (``join_lines``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from crag.text import join_lines

Box = tuple[float, float, float, float]  # x0, y0, x1, y1

# In units of the page's median line height.
PARA_GAP = 0.5  # vertical space beyond the usual line gap that starts a paragraph
INDENT = 0.8  # first-line indentation that starts a paragraph
SHORT = 4.0  # a line ending this far before the column's right edge ends its paragraph
HEADING = 1.3  # a line this much taller or shorter than the one before starts a paragraph
COLUMN_SHARE = 0.15  # of a page's lines that each side of a gutter holds, at least
BULLETS = "•·●○■□▪▫◆◇►▶‣⁃–-*"  # a row starting with one starts a list item


@dataclass(frozen=True)
class OcrLine:
    """A line (or part of one) as the engine read it; ``box`` in pixels of the rendered page."""

    text: str
    box: Box
    score: float = 1.0


@dataclass(frozen=True)
class Paragraph:
    text: str
    box: Box  # pixels of the rendered page


def paragraphs(lines: Sequence[OcrLine]) -> list[Paragraph]:
    """Group lines into paragraphs, column by column. Chinese lines join without spaces."""
    columns = [_rows(column) for column in _columns([line for line in lines if line.text.strip()])]
    rows = [row for column in columns for row in column]
    if not rows:
        return []
    # The page's usual line height and spacing: a column of two lines has no usual spacing of its own.
    height = median(_height(r.box) for r in rows)
    gaps = [b.box[1] - a.box[3] for column in columns for a, b in zip(column, column[1:], strict=False)]
    usual_gap = median(gaps) if gaps else 0.0
    return [para for column in columns for para in _paragraphs(column, height, usual_gap)]


def _height(box: Box) -> float:
    return box[3] - box[1]


def _union(boxes: Sequence[Box]) -> Box:
    return (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))


def _gutter(lines: Sequence[OcrLine]) -> tuple[float, float] | None:
    """A vertical strip between columns: one that no line crosses at all (a margin note beside the
    text, columns without a heading over them), else the widest one that no column-wide line crosses,
    with columns of lines on both sides of it."""
    if len(lines) < 2:
        return None
    height = median(_height(ln.box) for ln in lines)
    clean = _gaps(lines, height / 2)
    if clean:
        return max(clean, key=lambda gap: gap[1] - gap[0])
    left_edge, right_edge = min(ln.box[0] for ln in lines), max(ln.box[2] for ln in lines)
    # Lines over half the text width are headings or spanning text, not column lines.
    narrow = [ln for ln in lines if ln.box[2] - ln.box[0] < 0.55 * (right_edge - left_edge)]
    enough = max(3, COLUMN_SHARE * len(lines))  # a column, not a few labels in a margin
    best: tuple[float, float] | None = None
    for lo, hi in _gaps(narrow, height):
        left = [ln.box for ln in narrow if ln.box[2] <= lo]
        right = [ln.box for ln in narrow if ln.box[0] >= hi]
        wider = best is None or hi - lo > best[1] - best[0]
        if wider and len(left) >= enough and len(right) >= enough and _side_by_side(left, right):
            best = (lo, hi)
    return best


def _gaps(lines: Sequence[OcrLine], width: float) -> list[tuple[float, float]]:
    """The x intervals at least ``width`` wide that none of the lines covers, between the lines."""
    spans = sorted((ln.box[0], ln.box[2]) for ln in lines)
    gaps = []
    end = spans[0][1] if spans else 0.0
    for x0, x1 in spans[1:]:
        if x0 - end >= width:
            gaps.append((end, x0))
        end = max(end, x1)
    return gaps


def _side_by_side(left: Sequence[Box], right: Sequence[Box]) -> bool:
    """Whether two groups of lines share most of their height, as columns do (a stray label does not)."""
    a, b = _union(left), _union(right)
    overlap = min(a[3], b[3]) - max(a[1], b[1])
    return overlap >= 0.5 * min(_height(a), _height(b))


def _columns(lines: Sequence[OcrLine], depth: int = 0) -> list[list[OcrLine]]:
    """Groups of lines in reading order: across a gutter, the left column before the right one.
    A line crossing the gutter (a heading over both columns) closes the columns above it."""
    gutter = _gutter(lines) if depth < 3 else None
    if gutter is None:
        return [list(lines)] if lines else []
    lo, hi = gutter
    groups: list[list[OcrLine]] = []
    left: list[OcrLine] = []
    right: list[OcrLine] = []
    for line in sorted(lines, key=lambda ln: ln.box[1]):
        if line.box[2] <= hi and line.box[0] < lo:
            left.append(line)
        elif line.box[0] >= lo and line.box[2] > hi:
            right.append(line)
        else:  # crossing the gutter
            groups += _columns(left, depth + 1) + _columns(right, depth + 1) + [[line]]
            left, right = [], []
    return groups + _columns(left, depth + 1) + _columns(right, depth + 1)


def _rows(lines: Sequence[OcrLine]) -> list[OcrLine]:
    """Pieces of one visual line (the engine splits a line at wide spaces) joined left to right."""
    rows: list[list[OcrLine]] = []
    for line in sorted(lines, key=lambda ln: (ln.box[1] + ln.box[3]) / 2):
        if rows:
            span = _union([ln.box for ln in rows[-1]])
            overlap = min(span[3], line.box[3]) - max(span[1], line.box[1])
            if overlap >= 0.5 * min(_height(span), _height(line.box)):
                rows[-1].append(line)
                continue
        rows.append([line])
    joined = []
    for row in rows:
        row.sort(key=lambda ln: ln.box[0])
        text = join_lines([ln.text for ln in row], dehyphenate=False)
        joined.append(OcrLine(text, _union([ln.box for ln in row]), min(ln.score for ln in row)))
    return joined


def _bullet(text: str) -> bool:
    return bool(text) and text[0] in BULLETS


def _paragraphs(rows: Sequence[OcrLine], height: float, usual_gap: float) -> list[Paragraph]:
    if not rows:
        return []
    left, right = min(r.box[0] for r in rows), max(r.box[2] for r in rows)
    groups: list[list[OcrLine]] = [[rows[0]]]
    for prev, row in zip(rows, rows[1:], strict=False):
        taller = max(_height(prev.box), _height(row.box)) / max(min(_height(prev.box), _height(row.box)), 1.0)
        # A first line set in: a new paragraph. Lines set in under a bullet continue its item.
        indented = row.box[0] - left > INDENT * height >= prev.box[0] - left and not _bullet(prev.text)
        if (
            _bullet(row.text)
            or row.box[1] - prev.box[3] > usual_gap + PARA_GAP * height
            or taller > HEADING
            or indented
            or prev.box[2] < right - SHORT * height
        ):
            groups.append([])
        groups[-1].append(row)
    return [Paragraph(join_lines([r.text for r in group]), _union([r.box for r in group])) for group in groups]
