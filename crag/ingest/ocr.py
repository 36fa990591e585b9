"""OCR for pages without a usable text layer: RapidOCR (PP-OCRv4 detection, recognition and angle
models for Chinese and English, shipped inside the ``rapidocr-onnxruntime`` wheel) on onnxruntime,
in-process and offline. Nothing is downloaded at run time.

Three parts, used by the PyMuPDF parser page by page:

- the decision: does the page's text layer carry its text (``measure`` + ``decide``)?
- the engine: loaded once per process, on the first page that needs it (``recognise``). rapidocr
  is imported here and nowhere else.
- the page: rendered within a pixel budget, read, and its lines turned into paragraph blocks in
  reading order (``ocr_layout``) with boxes in PDF points, in the space text extraction reports,
  so citations highlight OCR'd text as they do text-layer text.
"""

from __future__ import annotations

import math
import threading
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Literal

import numpy as np
import pymupdf

from crag.config import cpu_threads
from crag.errors import CragError
from crag.ingest.ocr_layout import Box, OcrLine, paragraphs
from crag.text import join_lines
from crag.types import Block

OcrMode = Literal["auto", "off", "force"]

DEFAULT_DPI = 200
# The longer side of a render, in pixels, whatever the page size: it bounds text detection's memory
# (docs/benchmarks.md has its peak). A4 fits up to 300 dpi.
# A page that fits only below MIN_DPI is too large to read (text would be a few pixels high): skipped.
MAX_SIDE = 3600
MIN_DPI = 50
# Decoding an embedded image this large takes gigabytes, before any OCR: such a page is skipped.
MAX_IMAGE_PIXELS = 200_000_000

# The decision, for CRAG_OCR=auto.
JUNK_SHARE = 0.3  # of a text layer's characters without a Unicode meaning: the layer is junk
IMAGE_PAGE = 0.5  # share of the page covered by images that makes it a picture of a page ...
FEW_LETTERS = 30  # ... when its text layer holds fewer letters than this (a stamp, a page number)

# Recognition. PP-OCRv4 sometimes reads nothing (or garbage) from a very wide line crop, a full
# line of a page: such a line is read again in pieces, and the better reading is kept.
MIN_SCORE = 0.5  # a line read with less confidence is dropped, as rapidocr does by default
RETRY_SCORE = 0.9
WIDE = 12.0  # width / height of a crop above which a weak reading is retried in pieces
PAD = 0.1  # of a line's height, added above and below it before it is read (see _crop)
PIECE = 10.0  # width / height of a piece
# A page read with less confidence than this (mean over its characters) is read again turned over: it lies
# between the scores of upright pages and of pages scanned upside down (docs/benchmarks.md).
UPRIGHT_SCORE = 0.8


class OcrUnavailable(CragError):
    """The OCR engine could not start. The message says how to install it or turn OCR off."""


@dataclass(kw_only=True, frozen=True)
class TextLayer:
    """What a page's text layer holds, measured without layout analysis (cheap: no rendering)."""

    chars: int  # characters other than white space
    junk: int  # of them, U+FFFD, private-use, control or unassigned: glyphs without a Unicode meaning
    letters: int  # letters of any script, Chinese included
    image_share: float  # share of the page covered by images
    graphics: bool  # the page draws images or vector paths (a blank page draws neither)


def _junk(char: str) -> bool:
    return char == "\ufffd" or unicodedata.category(char) in ("Co", "Cc", "Cn", "Cs")


def measure(page: pymupdf.Page) -> TextLayer:
    text = "".join(page.get_text("text").split())
    bounds = page.rect * page.derotation_matrix  # the unrotated page: where image boxes are reported
    area = abs(bounds) or 1.0
    covered = sum(abs(pymupdf.Rect(info["bbox"]) & bounds) for info in page.get_image_info())
    graphics = covered > 0 or (not text and bool(page.get_cdrawings()))
    return TextLayer(
        chars=len(text),
        junk=sum(_junk(c) for c in text),
        letters=sum(c.isalpha() for c in text),
        image_share=min(1.0, covered / area),
        graphics=graphics,
    )


def decide(layer: TextLayer, mode: OcrMode) -> str | None:
    """Why a page needs OCR (for messages), or None when its text layer is used."""
    if mode == "off":
        return None
    if mode == "force":
        return "CRAG_OCR=force"
    if layer.chars == 0:
        return "no text layer" if layer.graphics else None  # a blank page needs no OCR
    if layer.junk / layer.chars >= JUNK_SHARE:
        return "the text layer is unreadable"
    if layer.image_share >= IMAGE_PAGE and layer.letters < FEW_LETTERS:
        return "an image of a page with almost no text layer"
    return None


def render_dpi(width: float, height: float, dpi: int) -> int | None:
    """The resolution a page of this size (points) is rendered at: ``dpi``, lowered to fit ``MAX_SIDE``.
    None when the page is too large to read even at ``MIN_DPI``."""
    fitted = min(dpi, math.floor(MAX_SIDE * 72 / max(width, height, 1.0)))
    return fitted if fitted >= MIN_DPI else None


# ---------------------------------------------------------------------------------------------
# The engine

Recognise = Callable[[np.ndarray], list[OcrLine]]
_lock = threading.Lock()  # the engine keeps per-call state: one page at a time per process
_engine: Any = None
_engine_error: OcrUnavailable | None = None


def engine_version() -> str:
    try:
        return version("rapidocr-onnxruntime")
    except PackageNotFoundError:
        return "missing"


def _load() -> Any:
    """The RapidOCR engine, created on first use; a failure is remembered so each page fails fast."""
    global _engine, _engine_error
    if _engine is None and _engine_error is None:
        try:
            from rapidocr_onnxruntime import RapidOCR

            threads = cpu_threads()
            # One onnxruntime pool per model, as wide as our cores: more threads than cores only
            # make the two engines on a small machine (this and the embedder) fight.
            _engine = RapidOCR(
                intra_op_num_threads=threads,
                inter_op_num_threads=1,
                max_side_len=MAX_SIDE,  # our renders are already bounded; do not shrink them again
            )
        except (ImportError, OSError) as exc:  # the package, or OpenCV's system libraries (libGL)
            _engine_error = OcrUnavailable(
                f"OCR could not start ({exc}). Install it with `pip install rapidocr-onnxruntime==1.4.4` "
                "(on a server without a display OpenCV also needs `apt-get install libgl1 libglib2.0-0`), "
                "or set CRAG_OCR=off."
            )
    if _engine_error is not None:
        raise _engine_error
    return _engine


def recognise(image: np.ndarray) -> list[OcrLine]:
    """Read the text lines of a page image (grey, H x W x 1), top to bottom as the engine finds them."""
    with _lock:
        engine = _load()
        found, _ = engine(image, use_cls=False, use_rec=False)  # detection only: the line boxes
        lines = []
        for points in found or []:
            xs, ys = [p[0] for p in points], [p[1] for p in points]
            box = (float(min(xs)), float(min(ys)), float(max(xs)), float(max(ys)))
            crop = _crop(image, box)
            if crop is None:
                continue
            text, score = _read(engine, crop)
            if score < RETRY_SCORE and crop.shape[1] > WIDE * crop.shape[0]:
                retried = _read_in_pieces(engine, crop)
                if retried[1] > score:
                    text, score = retried
            if text and score >= MIN_SCORE:
                lines.append(OcrLine(text, box, score))
    return lines


def _crop(image: np.ndarray, box: Box) -> np.ndarray | None:
    """A line's pixels with a margin across it. The detector's tight boxes often lose the spaces between
    English words ("WhatistheRFoundation"); a tenth of the line height more keeps them, and a fifth costs
    Chinese accuracy (docs/benchmarks.md)."""
    x0, y0, x1, y1 = box
    vertical = y1 - y0 >= 1.5 * (x1 - x0)  # a column of text, read turned (as rapidocr does)
    pad = PAD * (x1 - x0 if vertical else y1 - y0)
    x0, x1 = (x0 - pad, x1 + pad) if vertical else (x0, x1)
    y0, y1 = (y0, y1) if vertical else (y0 - pad, y1 + pad)
    height, width = image.shape[:2]
    crop = image[max(0, round(y0)) : min(height, round(y1)), max(0, round(x0)) : min(width, round(x1))]
    if not crop.size:
        return None
    return np.ascontiguousarray(np.rot90(crop) if vertical else crop)


def _read(engine: Any, crop: np.ndarray) -> tuple[str, float]:
    # Without rapidocr's angle classifier: per line it costs more than reading the line (measured),
    # and it turns the odd upright line over. Pages scanned upside down are turned whole (PageOCR.read).
    found, _ = engine(crop, use_det=False, use_cls=False)
    return (str(found[0][0]).strip(), float(found[0][1])) if found else ("", 0.0)


def _read_in_pieces(engine: Any, crop: np.ndarray) -> tuple[str, float]:
    """Read a wide line in pieces cut at the blankest columns near even intervals."""
    height, width = crop.shape[:2]
    ink = (crop.reshape(height, width) < 128).sum(axis=0)
    pieces = math.ceil(width / (height * PIECE))
    cuts, gaps = [0], []
    for k in range(1, pieces):
        target, reach = k * width // pieces, width // (4 * pieces)
        window = ink[target - reach : target + reach]
        if not window.size:
            cuts.append(target)
            gaps.append(0)
            continue
        blank = window <= window.min()
        # the longest run of the blankest columns: a word gap rather than the space between letters
        best, best_len, run = target, 0, 0
        for i, flag in enumerate(blank):
            run = run + 1 if flag else 0
            if run > best_len:
                best, best_len = target - reach + i - run // 2, run
        cuts.append(best)
        gaps.append(best_len)
    cuts.append(width)
    spans = list(zip(cuts, cuts[1:], strict=False))
    reads = [_read(engine, np.ascontiguousarray(crop[:, left:right])) for left, right in spans]
    out = reads[0][0]
    for (text, _), gap in zip(reads[1:], gaps, strict=True):
        # a gap of a sixth of the crop's height is a word space; a narrower one falls inside a word
        out = join_lines([out, text], dehyphenate=False) if gap >= height / 6 else out + text
    weights = [right - left for left, right in spans]
    return out.strip(), float(np.average([score for _, score in reads], weights=weights))


# ---------------------------------------------------------------------------------------------
# Pages


def _confidence(lines: Sequence[OcrLine]) -> float:
    chars = sum(len(line.text) for line in lines)
    return sum(len(line.text) * line.score for line in lines) / chars if chars else 0.0


class PageOCR:
    """OCR for the PyMuPDF parser (CRAG_OCR, CRAG_OCR_DPI): which pages, and their blocks."""

    def __init__(self, mode: OcrMode = "auto", dpi: int = DEFAULT_DPI, engine: Recognise | None = None) -> None:
        self.mode = mode
        self.dpi = dpi
        self._recognise = engine or recognise

    @property
    def version(self) -> str:
        return f"rapidocr-onnxruntime {engine_version()} OCR ({self.mode}, {self.dpi} dpi)"

    def reason(self, page: pymupdf.Page) -> str | None:
        """Why this page is read with OCR, or None when its text layer is used."""
        return decide(measure(page), self.mode)

    def read(self, page: pymupdf.Page, number: int) -> tuple[list[Block], str]:
        """The page's paragraphs as blocks, and a warning ("" when none) when it could not be read."""
        bounds = page.rect * page.derotation_matrix  # unrotated: the space text extraction reports
        dpi = render_dpi(page.rect.width, page.rect.height, self.dpi)
        if dpi is None:
            inches = f"{page.rect.width / 72:.0f} x {page.rect.height / 72:.0f} in"
            return [], f"page {number}: too large to OCR ({inches}); skipped. Split or scale the page down"
        largest = max((i["width"] * i["height"] for i in page.get_image_info()), default=0)
        if largest > MAX_IMAGE_PIXELS:
            return [], f"page {number}: its image is too large to OCR ({largest / 1e6:.0f} megapixels); skipped"
        try:
            pix = page.get_pixmap(dpi=dpi, colorspace=pymupdf.csGRAY, alpha=False)
            image = np.frombuffer(pix.samples, np.uint8).reshape(pix.height, pix.width, 1)
            del pix
            lines, turned = self._recognise(image), False
            if _confidence(lines) < UPRIGHT_SCORE:  # upside down, or a poor scan: the better reading wins
                over = self._recognise(np.ascontiguousarray(image[::-1, ::-1]))
                if _confidence(over) > _confidence(lines):
                    lines, turned = over, True
        except OcrUnavailable as exc:
            return [], f"page {number}: {exc}"
        except Exception as exc:  # noqa: BLE001 - one unreadable page must not lose the document
            reason = " ".join(str(exc).split())[:200] or type(exc).__name__
            return [], f"page {number}: OCR failed ({reason}); skipped"
        height, width = image.shape[:2]
        # pixels (of the turned image, if it was turned) -> the page's unrotated points
        turn = pymupdf.Matrix(-1, 0, 0, -1, width, height) if turned else pymupdf.Identity
        to_points = turn * pymupdf.Matrix(72 / dpi, 72 / dpi) * page.derotation_matrix
        blocks: list[Block] = []
        for para in paragraphs(lines):
            rect = (pymupdf.Rect(para.box) * to_points) & bounds
            if not rect.is_empty:
                blocks.append(Block(type="text", text=para.text, page=number, bbox=tuple(rect), order=len(blocks)))
        if not blocks:
            return [], f"page {number}: OCR recognised no text; skipped"
        return blocks, ""
