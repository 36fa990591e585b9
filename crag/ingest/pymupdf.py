"""The offline parser: PyMuPDF with pymupdf4llm and its bundled layout model (pymupdf-layout).

Layout boxes become ``Block``s: titles with their level, paragraphs, list items, tables as
markdown, captions, and page headers and footers (kept as blocks, dropped by the chunker).
Pages without a usable text layer (scans) are read with OCR when the parser is given a
``PageOCR`` (crag.ingest.ocr, CRAG_OCR); the other pages keep their layout text.
Also home to the other PyMuPDF services: page sizes and page images (for MinerU and the UI).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pymupdf
import pymupdf.layout
import pymupdf4llm  # noqa: F401 - importing it activates the layout model in PyMuPDF
from pymupdf4llm.helpers import document_layout

from crag.config import cpu_threads
from crag.ingest.base import Catalogue, Outline, PageProgress, PagesRead, Parser, PDFError
from crag.ingest.spans import BOLD, MONOSPACED, Piece, box_pieces, clean, note_marks, spans
from crag.text import split_sentences
from crag.types import Block, ParsedPDF

if TYPE_CHECKING:  # ocr.py builds on this module, so the parser only receives a PageOCR
    from crag.ingest.ocr import PageOCR


@contextmanager
def layout_sessions() -> Iterator[None]:
    """ONNX Runtime sessions made inside share one memory arena, run on our cores and do not spin.

    pymupdf-layout makes its sessions (page image features, layout graph, table grid) when PyMuPDF is imported,
    arena off, so every page allocates its tensors afresh and the page faults cost as much as the model; idle
    threads spinning take CPU from whatever else runs. With the arena pages parse faster on less CPU for a little
    more memory; one arena for the three models, grown by what a page asks, holds less than one each (figures in
    docs/benchmarks.md)."""
    import onnxruntime as ort

    shared = _shared_arena()
    made_by_library = ort.InferenceSession

    class Session(ort.InferenceSession):  # made_by_library, the class being replaced
        def __init__(self, path: object, sess_options: ort.SessionOptions | None = None, *args, **kwargs) -> None:
            options = sess_options or ort.SessionOptions()
            options.enable_cpu_mem_arena = True
            options.intra_op_num_threads = cpu_threads()
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            if shared:
                options.add_session_config_entry("session.use_env_allocators", "1")
            super().__init__(path, options, *args, **kwargs)

    ort.InferenceSession = Session
    try:
        yield
    finally:
        ort.InferenceSession = made_by_library


@functools.cache
def _shared_arena() -> bool:
    """Register ONNX Runtime's process-wide CPU arena; False where it refuses (each session keeps its own then)."""
    import onnxruntime as ort

    memory = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    try:
        ort.create_and_register_allocator(memory, ort.OrtArenaCfg({"arena_extend_strategy": 1}))  # kSameAsRequested
    except Exception:  # noqa: BLE001 - memory, not correctness: the sessions' own arenas do the same work
        return False
    return True


def load_layout_model() -> None:
    """Make the layout model again inside ``layout_sessions``; where ONNX Runtime refuses, as the library makes it."""
    pymupdf._get_layout = None  # what pymupdf4llm.use_layout(False) does; activate() then makes a new model
    try:
        with layout_sessions():
            pymupdf.layout.activate()
    except Exception:  # noqa: BLE001 - the options are a speed-up; parsing must not depend on them
        pymupdf._get_layout = None
        pymupdf.layout.activate()


load_layout_model()

pymupdf.TOOLS.mupdf_display_errors(False)  # MuPDF's own messages go to stderr; ours go to the manifest

BOX_TYPES = {
    "text": "text",
    "title": "title",
    "section-header": "title",
    "list-item": "list",
    "table": "table",
    "picture": "image",
    "formula": "equation",
    "caption": "caption",
    "footnote": "footnote",
    "page-header": "header",
    "page-footer": "footer",
    "code": "code",
}
# A note in the page's outer margin ("Revised v0.4" beside a changed answer, a line number) is paratext that the
# layout model reads as text: quoted, it cuts a sentence ("CTEX 首页上的下载中心：Revised v0.4 http://…").
# MinerU calls it aside text, and it is dropped with headers and footers.
MARGIN = 0.1  # of the page's width, either side


@contextmanager
def open_pdf(path: Path, max_pages: int | None = None) -> Iterator[pymupdf.Document]:
    """Open a PDF or raise ``PDFError`` with the reason and the fix."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise PDFError(f"{path.name}: cannot be read ({exc.strerror}).") from None
    if size == 0:
        raise PDFError(f"{path.name}: the file is empty (0 bytes). Replace it with the real PDF.")
    with path.open("rb") as fh:
        head = fh.read(1024)
    if b"%PDF-" not in head:
        raise PDFError(f"{path.name}: not a PDF (it has a .pdf name but no PDF header). Convert it to PDF first.")
    try:
        doc = pymupdf.open(path, filetype="pdf")
    except (pymupdf.FileDataError, RuntimeError, ValueError) as exc:
        raise PDFError(f"{path.name}: corrupt or truncated PDF ({exc}). Re-download or re-export it.") from None
    try:
        if doc.needs_pass:
            raise PDFError(
                f"{path.name}: password-protected. Save an unprotected copy (e.g. `qpdf --decrypt`) and rebuild."
            )
        if doc.page_count == 0:
            raise PDFError(f"{path.name}: no pages could be read: truncated or damaged. Re-download or re-export it.")
        if max_pages is not None and doc.page_count > max_pages:
            raise PDFError(
                f"{path.name}: {doc.page_count} pages, over the limit of {max_pages} (CRAG_MAX_PAGES). "
                "Split it into parts, or raise CRAG_MAX_PAGES and allow for the time it takes."
            )
        yield doc
    finally:
        doc.close()


OUTLINE_LEVELS = 2  # bookmark levels kept: an overview lists the top ones
OUTLINE_KEPT = 300
_NO_TITLE = re.compile(r"^(?:untitled|microsoft word|title)\b|\.(?:docx?|tex|dvi|pdf|odt|indd)$", re.IGNORECASE)


def read_outline(doc: pymupdf.Document) -> tuple[str, Outline]:
    """A PDF's own title and the top levels of its bookmarks, from its catalogue (no page is read); nothing when
    it has none or they cannot be read: questions about the whole document then use the headings found."""
    try:
        toc, title = doc.get_toc(simple=True), (doc.metadata or {}).get("title") or ""
    except Exception:  # noqa: BLE001 - an outline only helps; the file's pages may read all the same
        return "", ()
    title = " ".join(title.split())
    outline = tuple(
        (int(level), " ".join(str(heading).split()), int(page))
        for level, heading, page, *_ in toc
        if level <= OUTLINE_LEVELS and page > 0 and str(heading).strip()
    )
    return ("" if len(title) < 3 or _NO_TITLE.search(title) else title[:200]), outline[:OUTLINE_KEPT]


def page_sizes(path: Path, max_pages: int | None = None) -> list[tuple[float, float]]:
    """(width, height) in PDF points for every page; a ``PDFError`` past ``max_pages``, as in ``open_pdf``."""
    with open_pdf(path, max_pages) as doc:
        return [(page.rect.width, page.rect.height) for page in doc.pages()]


def printed_pages(path: Path, pages: Sequence[int]) -> str:
    """The page numbers a document prints on the given pages (1-based), where they differ from the PDF's: "33" on
    page 39 of a manual whose front matter counts apart (its page labels). "" when the PDF has no labels or they
    are the same."""
    with open_pdf(path) as doc:
        labels = [doc[p - 1].get_label() for p in (min(pages), max(pages)) if 0 < p <= doc.page_count]
    if len(labels) < 2 or not all(labels) or labels == [str(min(pages)), str(max(pages))]:
        return ""
    return labels[0] if labels[0] == labels[1] else f"{labels[0]}–{labels[1]}"


# The longer side of a page image, in pixels, whatever the page's size (OCR's bound too): a 200-inch page at
# 200 dpi would be 40,000 pixels square, 4.8 GB in memory. A page too large for its resolution renders at less.
MAX_RENDER_SIDE = 3600


def zoom(area: pymupdf.Rect, dpi: float) -> pymupdf.Matrix:
    """The scale that renders ``area`` (points) at ``dpi``, or at less where that would pass ``MAX_RENDER_SIDE``."""
    # One pixel to spare: an area that does not start on a whole point gains a pixel when rounded outwards.
    fitted = min(dpi, (MAX_RENDER_SIDE - 1) * 72 / max(area.width, area.height, 1.0))
    return pymupdf.Matrix(fitted / 72, fitted / 72)


def render_page(path: Path, page: int, dpi: int = 144):  # -> PIL.Image.Image
    """A page (1-based) as an RGB image, for MinerU: at ``dpi``, within ``MAX_RENDER_SIDE`` pixels."""
    from PIL import Image

    with open_pdf(path) as doc:
        pdf_page = doc[page - 1]
        pix = pdf_page.get_pixmap(matrix=zoom(pdf_page.rect, dpi), alpha=False)
        return Image.frombytes("RGB", (pix.width, pix.height), pix.samples)


HIGHLIGHT_FILL = (1.0, 0.84, 0.0)  # a marker-pen yellow
HIGHLIGHT_EDGE = (0.93, 0.55, 0.0)


def render_highlight(
    path: Path,
    page: int,
    bboxes: Sequence[Sequence[float]],
    dpi: int = 110,
    pad: float = 2.0,
    around: float | None = None,
    quoted: Sequence[str] = (),
) -> bytes:
    """A page (1-based) as PNG bytes, with translucent highlights over the given regions, at ``dpi`` within
    ``MAX_RENDER_SIDE`` pixels.

    ``bboxes`` are ``(page, x0, y0, x1, y1)`` in PDF points, as ``Chunk.bboxes`` and ``Source.bboxes``
    hold them; boxes of other pages are ignored. They are in the page's unrotated coordinates, the
    space text extraction reports, which is also the space PyMuPDF draws in, so rotated pages need
    no conversion. The drawing changes the document in memory only; the file is never written.

    ``around`` (points) crops the image to the highlights with that much margin on every side:
    a readable close-up. Without highlights it has no effect.

    ``quoted``: the sentences an answer quotes from these regions. Only the regions that hold some of them are
    highlighted (all of them when none does): a passage is several paragraphs, and an answer quotes one or two.
    """
    with open_pdf(path) as doc:
        if not 1 <= page <= doc.page_count:
            raise PDFError(f"{path.name}: has no page {page} (it has {doc.page_count}). Rebuild the knowledge base.")
        pdf_page = doc[page - 1]
        rects = [
            pymupdf.Rect(*box[1:]) + (-pad, -pad, pad, pad) for box in bboxes if len(box) == 5 and int(box[0]) == page
        ]
        rects = [r for r in rects if not r.is_empty and not r.is_infinite]
        marks = [m for text in quoted for s in split_sentences(text) if len(m := _squashed(s)) >= 8]
        holding = [r for r in rects if _holds(_squashed(pdf_page.get_textbox(r)), marks)]
        drawn = pymupdf.Rect()  # empty; grows to cover every highlight
        for rect in holding or rects:
            pdf_page.draw_rect(
                rect, color=HIGHLIGHT_EDGE, fill=HIGHLIGHT_FILL, width=0.8, fill_opacity=0.3, stroke_opacity=0.9
            )
            drawn |= rect
        clip = None
        if around is not None and not drawn.is_empty:
            # In the page's displayed (rotated) space, where the pixmap is made.
            band = drawn * pdf_page.rotation_matrix
            clip = (band + (-around, -around, around, around)) & pdf_page.rect
        scale = zoom(clip if clip is not None else pdf_page.rect, dpi)
        return pdf_page.get_pixmap(matrix=scale, alpha=False, clip=clip).tobytes("png")


def _squashed(text: str) -> str:
    """Text to compare a quote with a page's: no spaces, no Markdown marks, ligatures undone."""
    return re.sub(r"[\s*|#`]+", "", unicodedata.normalize("NFKC", text))


def _holds(region: str, quoted: Sequence[str], probe: int = 20) -> bool:
    """Whether a region's text holds part of a quoted sentence: the sentence's start or end, or the region whole."""
    return len(region) >= 8 and any(q[:probe] in region or q[-probe:] in region or region[:probe] in q for q in quoted)


def body_style(boxes: Sequence[document_layout.LayoutBox]) -> tuple[set[str], float] | None:
    """The fonts of the page's running text, and its most common size (by characters)."""
    shown = [span for box in boxes if box.boxclass == "text" for span in spans(box)]
    if not shown:
        return None
    sizes: dict[float, int] = {}
    for span in shown:
        sizes[round(span["size"], 1)] = sizes.get(round(span["size"], 1), 0) + len(span["text"])
    return {span["font"] for span in shown}, max(sizes, key=sizes.__getitem__)


def false_heading(box: document_layout.LayoutBox, body: tuple[set[str], float] | None) -> bool:
    """A line the layout model calls a heading that is not one, and whose words would be lost to the section
    path: a command displayed in a monospaced font ("./configure --prefix=/where/you/want/R/to/go", "make
    install-pdf"), or a line set exactly as the running text ("or", "然后执行") that introduces what follows."""
    shown = spans(box)
    if not shown or box.boxclass not in ("title", "section-header"):
        return False
    if all(span["flags"] & MONOSPACED for span in shown):
        return True
    if body is None:
        return False
    fonts, size = body
    return all(span["font"] in fonts and span["size"] <= size + 0.5 and not span["flags"] & BOLD for span in shown)


def _block(
    box: document_layout.LayoutBox,
    piece: Piece,
    page: int,
    order: int,
    width: float,
    body: tuple[set[str], float] | None,
) -> Block:
    if in_margin(box, piece.text, width):
        kind = "header"
    elif piece.code:
        kind = "code"
    elif false_heading(box, body):
        kind = "text"
    else:
        kind = BOX_TYPES.get(box.boxclass, "text")
    return Block(
        type=kind,
        text=piece.text,
        page=page,
        bbox=piece.bbox,
        order=order,
        level=(box.header_level or (1 if box.boxclass == "title" else 2)) if kind == "title" else 0,
    )


def in_margin(box: document_layout.LayoutBox, text: str, page_width: float) -> bool:
    """A text box wholly in the outer margin that says something (a code brace set far left is no note)."""
    at_edge = box.x0 >= (1 - MARGIN) * page_width or box.x1 <= MARGIN * page_width
    return at_edge and box.boxclass in ("text", "footnote") and sum(c.isalnum() for c in text) >= 2


class PyMuPDFParser(Parser):
    name = "pymupdf"
    version = f"pymupdf {pymupdf.__version__} + pymupdf4llm {pymupdf4llm.__version__} layout"

    def __init__(self, max_pages: int | None = None, ocr: PageOCR | None = None) -> None:
        self.max_pages = max_pages
        self.ocr = ocr if ocr is not None and ocr.mode != "off" else None
        if self.ocr is not None:  # a file that failed without OCR is retried with it (see sync)
            self.version = f"{PyMuPDFParser.version} + {self.ocr.version}"

    def parse(self, path: Path, pages: Sequence[int] | None = None, on_page: PageProgress | None = None) -> ParsedPDF:
        return self.parsed(path, [self.read_pages(path, pages, on_page)])

    def catalogue(self, path: Path) -> Catalogue:
        """The file's page count, title and bookmarks; a ``PDFError`` as ``open_pdf`` gives (over the page cap too)."""
        with open_pdf(path, self.max_pages) as doc:
            title, outline = read_outline(doc)
            return Catalogue(pages=doc.page_count, title=title, outline=outline)

    def read_pages(
        self, path: Path, pages: Sequence[int] | None = None, on_page: PageProgress | None = None
    ) -> PagesRead:
        """Some pages (1-based; all when None) of a file, as a ``PagesRead``; ``parsed`` joins the parts. A worker
        process reads a file in parts this way while the build embeds the parts before."""
        blocks: list[Block] = []
        warnings: list[str] = []
        stages: list[str] = []
        with open_pdf(path, self.max_pages) as doc:
            wanted = list(pages) if pages is not None else list(range(1, doc.page_count + 1))
            blank = ocr_pages = 0
            page_blocks: list[Block] | None
            for done, number in enumerate(wanted, start=1):
                page = doc[number - 1]
                why = self.ocr.reason(page) if self.ocr is not None else None
                if why is not None and self.ocr is not None:
                    if on_page:  # before the page: OCR takes seconds where layout takes a fraction of one
                        on_page(done, len(wanted), "ocr")
                    page_blocks, warning = self.ocr.read(page, number)
                    warnings += [warning] if warning else []
                    blank += not page_blocks
                    ocr_pages += bool(page_blocks)
                else:
                    page_blocks = self._layout_page(doc, number, warnings)
                    if page_blocks is None:  # unparseable: warned already, and not a page without text
                        page_blocks = []
                    elif not any(b.text and b.type not in ("header", "footer") for b in page_blocks):
                        blank += 1
                        warnings.append(self._no_text(number))
                blocks.extend(page_blocks)
                stages.append("parsing" if why is None else "ocr")
                if on_page:
                    on_page(done, len(wanted))
            return PagesRead(
                blocks=tuple(blocks),
                warnings=tuple(warnings),
                stages=tuple(stages),
                blank=blank,
                page_count=doc.page_count,
                ocr_pages=ocr_pages,
            )

    def parsed(self, path: Path, parts: Sequence[PagesRead]) -> ParsedPDF:
        """A file's parts joined, in order; a ``PDFError`` when no page of them had text."""
        warnings = tuple(w for part in parts for w in part.warnings)
        read = sum(len(part.stages) for part in parts)
        if read and sum(part.blank for part in parts) == read:
            raise PDFError(self._nothing_read(path, list(warnings)))
        blocks = tuple(b for part in parts for b in part.blocks)
        ocr_pages = sum(part.ocr_pages for part in parts)
        return ParsedPDF(
            blocks=blocks,
            pages=parts[0].page_count if parts else 0,
            parser=self.name,
            parser_version=self.version,
            warnings=warnings,
            ocr_pages=ocr_pages,
        )

    def _layout_page(self, doc: pymupdf.Document, number: int, warnings: list[str]) -> list[Block] | None:
        """Layout blocks of one page from its text layer; None (and a warning) when it cannot be parsed."""
        try:
            layout = document_layout.parse_document(doc, pages=[number - 1], use_ocr=False)
        except Exception as exc:  # noqa: BLE001 - one bad page must not lose the document
            warnings.append(f"page {number}: could not be parsed ({exc}); skipped")
            return None
        width = doc[number - 1].rect.width
        boxes = [box for page_layout in layout.pages for box in page_layout.boxes]
        body, marks = body_style(boxes), note_marks(boxes)
        pieces = [(box, piece) for box in boxes for piece in box_pieces(box, marks)]
        return [
            _block(box, piece, number, i, width, body)
            for i, (box, piece) in enumerate(p for p in pieces if p[1].text or p[0].boxclass == "picture")
        ]

    def _no_text(self, number: int) -> str:
        if self.ocr is None:
            return f"page {number}: no text layer (scanned or image-only); set CRAG_OCR=auto to read it with OCR"
        return f"page {number}: no text found (a blank page)"

    def _nothing_read(self, path: Path, warnings: list[str]) -> str:
        if self.ocr is None:
            return (
                f"{path.name}: no text layer on any page (a scanned document). Set CRAG_OCR=auto to read it "
                "with the built-in OCR, or configure MinerU (CRAG_MINERU_URL)."
            )
        reasons = "; ".join(warnings[:3]) + ("; ..." if len(warnings) > 3 else "")
        return (
            f"{path.name}: no text could be read on any page ({reasons}). Check that it shows legible text "
            "when opened; a scan at 300 dpi or more, upright, reads best."
        )


def page_texts(path: Path) -> list[str]:
    """Plain text of every page, without layout analysis: the naive baseline of the benchmarks."""
    with open_pdf(path) as doc:
        return [clean(page.get_text("text")) for page in doc.pages()]
