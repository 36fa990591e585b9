"""OCR for pages without a usable text layer: the per-page decision, lines to paragraphs, bad pages,
progress, and, for real, scans of the benchmark corpus (English and Chinese) and a mixed file."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pymupdf
import pytest

import crag.ingest.ocr as ocr
from crag.config import Settings, load_settings
from crag.ingest import sync
from crag.ingest.base import Parser, PDFError
from crag.ingest.ocr import PageOCR, TextLayer, decide, measure, render_dpi
from crag.ingest.ocr_layout import OcrLine
from crag.ingest.pymupdf import PyMuPDFParser, clean, render_highlight
from crag.store import Store
from crag.text import join_lines
from crag.types import ParsedPDF, Progress
from tests.fakes import HashEmbedder
from tests.pdfs import A4, image_only_pdf, manual_pdf, mixed_scan_pdf, scanned_copy

OUTPUT = Path(__file__).resolve().parent.parent / "test-output"


# Which pages: the decision ------------------------------------------------------------------------


def layer(chars: int = 0, junk: int = 0, letters: int = 0, image_share: float = 0.0, graphics: bool = True):
    return TextLayer(chars=chars, junk=junk, letters=letters, image_share=image_share, graphics=graphics)


@pytest.mark.parametrize(
    ("page", "mode", "ocr_it"),
    [
        (layer(), "auto", True),  # a scan: no text layer, an image
        (layer(graphics=False), "auto", False),  # a blank page: nothing to read
        (layer(400, junk=300, letters=90, image_share=1.0), "auto", True),  # a junk invisible layer
        (layer(12, letters=8, image_share=0.95), "auto", True),  # a page number over a scan
        (layer(2500, letters=2000, image_share=1.0), "auto", False),  # a scan that was OCR'd already
        (layer(2500, letters=2000), "auto", False),  # a text page
        (layer(12, letters=8, image_share=0.2), "auto", False),  # a short text page with a small figure
        (layer(2500, letters=2000), "force", True),
        (layer(), "off", False),
        (layer(400, junk=300, image_share=1.0), "off", False),
    ],
    ids=["empty", "blank", "junk", "page-number-on-scan", "ocrd-scan", "text", "short", "force", "off", "off-junk"],
)
def test_the_decision(page: TextLayer, mode, ocr_it: bool) -> None:
    assert (decide(page, mode) is not None) == ocr_it


def test_measure_real_pages(tmp_path: Path) -> None:
    with pymupdf.open(manual_pdf(tmp_path / "m.pdf", pages=1)) as doc:
        text = measure(doc[0])
    assert text.chars > 300 and text.junk == 0 and text.image_share == 0 and decide(text, "auto") is None
    with pymupdf.open(image_only_pdf(tmp_path / "scan.pdf")) as doc:
        scan = measure(doc[0])
    assert (scan.chars, scan.graphics) == (0, True) and decide(scan, "auto") == "no text layer"

    doc = pymupdf.open()
    page = doc.new_page(width=A4[0], height=A4[1])
    grey = pymupdf.Pixmap(pymupdf.csGRAY, pymupdf.IRect(0, 0, 100, 140), False)
    grey.clear_with(230)
    page.insert_image(page.rect, pixmap=grey)
    page.insert_font(fontname="F1", fontbuffer=pymupdf.Font("cjk").buffer)
    # Invisible text whose glyphs map to nothing: what some scanners leave behind.
    page.insert_text((72, 100), "\ue000\ue001\ue002\ue003 \ue004\ue005\ue006", fontname="F1", render_mode=3)
    junk = measure(page)
    assert junk.junk / junk.chars > 0.5 and junk.image_share > 0.9
    assert decide(junk, "auto") == "the text layer is unreadable"


# Lines -> paragraphs ------------------------------------------------------------------------------


def test_render_dpi_keeps_renders_bounded() -> None:
    assert render_dpi(*A4, 200) == 200
    assert render_dpi(72 * 30, 72 * 40, 200) == 90  # a poster: lowered so its long side is 3600 px
    assert render_dpi(14400, 14400, 200) is None  # 200 inches: unreadable at any DPI we could afford


# Bad pages, progress and failures, with a fake engine (the real one is tested below) --------------


class FakeEngine:
    """Reads 'scanned text' on every page; fails on the calls listed in ``fail``; records image sizes, in ``record``
    too when given: a build reads its pages in a worker process, with a copy of the engine."""

    def __init__(self, fail: Sequence[int] = (), nothing: bool = False, record: Path | None = None) -> None:
        self.fail, self.nothing, self.sizes, self.record = set(fail), nothing, [], record

    def recorded(self) -> list[tuple[int, int]]:
        assert self.record is not None
        return [(int(h), int(w)) for h, w in (line.split() for line in self.record.read_text().splitlines())]

    def __call__(self, image: np.ndarray) -> list[OcrLine]:
        self.sizes.append(image.shape[:2])
        if self.record is not None:
            with self.record.open("a") as fh:
                fh.write(f"{image.shape[0]} {image.shape[1]}\n")
        if len(self.sizes) in self.fail:
            raise RuntimeError("onnxruntime: bad allocation")
        if self.nothing:
            return []
        h, w = image.shape[:2]
        return [OcrLine(f"Scanned text of call {len(self.sizes)}.", (w * 0.1, h * 0.1, w * 0.9, h * 0.12))]


def scans(path: Path, pages: int = 3, size: tuple[float, float] = A4) -> Path:
    doc = pymupdf.open()
    grey = pymupdf.Pixmap(pymupdf.csGRAY, pymupdf.IRect(0, 0, 100, 140), False)
    grey.clear_with(200)
    for _ in range(pages):
        page = doc.new_page(width=size[0], height=size[1])
        page.insert_image(page.rect, pixmap=grey)
    doc.save(path)
    return path


def use_engine(monkeypatch: pytest.MonkeyPatch, engine: FakeEngine) -> FakeEngine:
    monkeypatch.setattr(ocr, "recognise", engine)
    return engine


@pytest.fixture
def kb(tmp_path: Path) -> Settings:
    (tmp_path / "Files").mkdir()
    return load_settings(files_dir=tmp_path / "Files", chroma_dir=tmp_path / "db", parser="pymupdf")


@pytest.mark.reliability
def test_a_page_ocr_cannot_read_is_a_warning_and_the_rest_indexes(
    monkeypatch: pytest.MonkeyPatch, kb: Settings
) -> None:
    engine = use_engine(monkeypatch, FakeEngine(fail=[2], record=kb.files_dir.parent / "sizes"))
    scans(kb.files_dir / "scan.pdf")
    events: list[Progress] = []
    (result,) = sync(kb, HashEmbedder(), on_progress=events.append).files
    assert result.status == "indexed" and result.pages == 3, result
    assert result.warnings == ("page 2: OCR failed (onnxruntime: bad allocation); skipped",)
    assert result.ocr_pages == 2, "pages 1 and 3 were read with OCR"
    assert Store(kb.chroma_dir).manifest()[0].ocr_pages == 2, "the index's manifest keeps it, for the Files list"
    chunks = Store(kb.chroma_dir).reader().chunks
    assert {page for c in chunks for page in c.pages} == {1, 3} and len(engine.recorded()) == 3
    assert max(engine.recorded()[0]) == 2339  # A4 at CRAG_OCR_DPI=200

    ocr_events = [(e.page, e.page_count) for e in events if e.stage == "ocr"]
    assert ocr_events == [(1, 3), (2, 3), (3, 3)]
    fractions = [e.fraction for e in events]
    assert fractions == sorted(fractions), "the bar only moves forward"


def test_progress_shows_ocr_pages(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    import crag.ingest
    import crag.retriever
    from crag.cli import main
    from crag.ingest import SyncReport
    from ui.text import progress_text

    p = Progress(stage="ocr", file="scan.pdf", file_index=1, file_count=2, page=3, page_count=12)
    assert progress_text(p) == "Reading **scan\\.pdf** · file 1/2 · OCR page 3/12"
    assert (
        Progress(stage="ocr", file="a.pdf", file_index=1, file_count=1, page=1, page_count=4).fraction == 0.0
    )  # page 1 is starting, none is done
    assert Progress(
        stage="ocr", file="a.pdf", file_index=1, file_count=1, page=3, page_count=4
    ).fraction == pytest.approx(0.4)

    def fake_sync(settings, embedder, rebuild=False, on_progress=None):
        on_progress(p)
        return SyncReport()

    monkeypatch.setattr(crag.ingest, "sync", fake_sync)
    monkeypatch.setattr(crag.retriever, "index_embedder", lambda settings, rebuild: HashEmbedder())
    assert main(["index"]) == 0
    assert "ocr scan.pdf (1/2) OCR page 3/12" in capsys.readouterr().err


@pytest.mark.reliability
def test_a_too_large_page_is_rendered_smaller_or_skipped(tmp_path: Path) -> None:
    engine = FakeEngine()
    parser = PyMuPDFParser(ocr=PageOCR(engine=engine))
    poster = parser.parse(scans(tmp_path / "poster.pdf", pages=1, size=(72 * 30, 72 * 40)))
    assert engine.sizes == [(3600, 2700)] and poster.warnings == ()  # 90 dpi instead of 200
    assert poster.blocks[0].bbox[2] <= 72 * 30

    doc = pymupdf.open(scans(tmp_path / "one.pdf", pages=1))
    huge = doc.new_page(width=14400, height=14400)  # the largest page PDF allows: 200 inches
    huge.insert_text((72, 72), "x")
    huge.insert_image(huge.rect, pixmap=pymupdf.Pixmap(pymupdf.csGRAY, pymupdf.IRect(0, 0, 10, 10), False))
    doc.save(tmp_path / "huge.pdf")
    parsed = parser.parse(tmp_path / "huge.pdf")
    assert parsed.warnings == ("page 2: too large to OCR (200 x 200 in); skipped. Split or scale the page down",)
    assert {b.page for b in parsed.blocks} == {1} and len(engine.sizes) == 2


@pytest.mark.reliability
def test_scanned_pdfs_index_with_ocr_and_fail_clearly_without(monkeypatch: pytest.MonkeyPatch, kb: Settings) -> None:
    use_engine(monkeypatch, FakeEngine())
    scans(kb.files_dir / "scan.pdf", pages=2)
    (failed,) = sync(kb.model_copy(update={"ocr": "off"}), HashEmbedder()).files
    assert failed.status == "failed" and "no text layer on any page" in failed.error and "CRAG_OCR=auto" in failed.error

    # OCR on (the default): the file that failed without it is read again, not carried over as failed.
    (indexed,) = sync(kb, HashEmbedder()).files
    assert indexed.status == "indexed" and indexed.chunks >= 1 and indexed.warnings == ()
    assert "rapidocr-onnxruntime" in indexed.parser_version


@pytest.mark.reliability
def test_a_file_no_page_of_which_can_be_read_fails_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, kb: Settings
) -> None:
    use_engine(monkeypatch, FakeEngine(nothing=True))
    scans(kb.files_dir / "blank-scan.pdf", pages=2)
    (result,) = sync(kb, HashEmbedder()).files
    assert result.status == "failed"
    assert result.error.startswith("blank-scan.pdf: no text could be read on any page (page 1: OCR recognised no text")
    assert "300 dpi" in result.error


def test_the_engine_loads_once_lazily_with_our_threads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import sys
    import types

    made: list[dict] = []
    fake = types.ModuleType("rapidocr_onnxruntime")
    fake.RapidOCR = lambda **kwargs: made.append(kwargs) or (lambda image, **_: (None, None))
    monkeypatch.setitem(sys.modules, "rapidocr_onnxruntime", fake)
    monkeypatch.setattr(ocr, "_engine", None)
    parser = PyMuPDFParser(ocr=PageOCR())
    parser.parse(manual_pdf(tmp_path / "text.pdf"))
    assert made == [], "a PDF with a text layer never loads the engine"
    scanned = scans(tmp_path / "scan.pdf", pages=2)
    with pytest.raises(PDFError, match="OCR recognised no text"):
        parser.parse(scanned)
    threads = len(os.sched_getaffinity(0))  # the cores we may use, not the machine's
    assert made == [{"intra_op_num_threads": threads, "inter_op_num_threads": 1, "max_side_len": 3600}]

    monkeypatch.setitem(sys.modules, "rapidocr_onnxruntime", None)  # not installed: import fails
    monkeypatch.setattr(ocr, "_engine", None)
    monkeypatch.setattr(ocr, "_engine_error", None)
    with pymupdf.open(scanned) as doc:
        blocks, warning = PageOCR().read(doc[0], 1)
    assert blocks == [] and "pip install rapidocr-onnxruntime==1.4.4" in warning and "CRAG_OCR=off" in warning


# For real: the packaged PP-OCRv4 models on scans of real PDFs -------------------------------------


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance, one row at a time with numpy (insertions by a running minimum)."""
    row = np.arange(len(b) + 1)
    codes = np.array([ord(c) for c in b])
    cols = np.arange(len(b) + 1)
    for i, char in enumerate(a, start=1):
        best = np.minimum(row[:-1] + (codes != ord(char)), row[1:] + 1)  # substitute or delete
        row = np.minimum.accumulate(np.concatenate(([i], best)) - cols) + cols  # then insert
    return int(row[-1])


CJK_SPACE = re.compile(r"(?<=[\u3000-\u9fff\uff00-\uffef]) | (?=[\u3000-\u9fff\uff00-\uffef])")


def normalise(text: str) -> str:
    """White space is layout, not content: one space between words, none beside a Chinese character."""
    return CJK_SPACE.sub("", " ".join(text.split()))


def text_layer(page: pymupdf.Page) -> str:
    """The reference: the page's own text, its lines joined by the rule the parsers use."""
    blocks = [b for b in page.get_text("dict")["blocks"] if b["type"] == 0]
    lines = [
        [join_lines([clean(s["text"]) for s in ln["spans"]], dehyphenate=False) for ln in b["lines"]] for b in blocks
    ]
    return " ".join(join_lines(block) for block in lines)


# (file, pages of it scanned, questions whose answer is on a scanned page: (question, page of the scan))
SCANS = {
    "en": ("R-FAQ.pdf", [7, 14, 21], [
        ("Who first wrote R, and at which university?", 1),
        ("Can my company use R for paid consulting work, or does the license forbid commercial use?", 2),
        ("Is it safe to write T and F in my code instead of TRUE and FALSE?", 3),
    ]),
    "zh": ("ctex-faq.pdf", [5, 12, 13], [
        ("这份 FAQ 能不能随便转载？它采用什么许可证？", 1),
        ("用 CJK 排中文时，怎样让每段开头空两个汉字？", 2),
        ("CJK 环境和 CJK* 环境到底差在哪？", 3),
    ]),
}  # fmt: skip


class Recording(Parser):
    """The real parser, keeping what it parsed and how long it took, so OCR runs once per page."""

    def __init__(self, inner: Parser) -> None:
        self.inner, self.name, self.version = inner, inner.name, inner.version
        self.parsed: dict[str, tuple[ParsedPDF, float]] = {}

    def parse(self, path, pages=None, on_page=None) -> ParsedPDF:
        start = time.perf_counter()
        result = self.inner.parse(path, pages, on_page)
        self.parsed[path.name] = (result, time.perf_counter() - start)
        return result


@pytest.fixture(scope="module")
def corpus_scans(tmp_path_factory: pytest.TempPathFactory) -> dict:
    if shutil.which("apt-get") is None:
        pytest.skip("the corpus comes from Debian packages (apt-get)")
    from crag.bench.corpus import default_cache_dir, fetch_corpus
    from crag.ingest import choose_parser
    from crag.models import USEEmbedder

    pdfs = fetch_corpus(default_cache_dir())
    root = tmp_path_factory.mktemp("ocr")
    (root / "Files").mkdir()
    for lang, (name, pages, _) in SCANS.items():
        scanned_copy(pdfs[name], root / "Files" / f"scan-{lang}.pdf", pages)
    settings = load_settings(files_dir=root / "Files", chroma_dir=root / "db", parser="pymupdf")
    parser = Recording(choose_parser(settings))
    embedder = USEEmbedder()
    report = sync(settings, embedder, parser=parser)
    return {"pdfs": pdfs, "settings": settings, "embedder": embedder, "report": report, "parser": parser}


@pytest.mark.integration
@pytest.mark.slow
def test_character_error_rate_of_scans_is_under_10_percent(corpus_scans: dict) -> None:
    assert all(f.status == "indexed" and f.warnings == () for f in corpus_scans["report"].files)
    results = {}
    for lang, (name, pages, _) in SCANS.items():
        parsed, seconds = corpus_scans["parser"].parsed[f"scan-{lang}.pdf"]
        errors = chars = 0
        with pymupdf.open(corpus_scans["pdfs"][name]) as original:
            for scan_page, page in enumerate(pages, start=1):
                reference = normalise(text_layer(original[page - 1]))
                ocr_text = normalise(" ".join(b.text for b in parsed.blocks if b.page == scan_page))
                errors += edit_distance(ocr_text, reference)
                chars += len(reference)
        results[lang] = {
            "file": name,
            "pages": pages,
            "reference_chars": chars,
            "edits": errors,
            "cer": round(errors / chars, 4),
            "seconds": round(seconds, 2),
            "pages_per_second": round(len(pages) / seconds, 3),
        }
    report = {"engine": PageOCR().version, "threads": ocr.cpu_threads(), "languages": results}
    OUTPUT.mkdir(exist_ok=True)
    (OUTPUT / "ocr.json").write_text(json.dumps(report, ensure_ascii=False, indent=1), encoding="utf-8")
    print(json.dumps(report, ensure_ascii=False))
    for lang, result in results.items():
        assert result["cer"] < 0.10, (lang, result)


@pytest.mark.integration
@pytest.mark.slow
def test_retrieval_finds_the_scanned_page(corpus_scans: dict) -> None:
    from crag.retriever import Retriever

    retriever = Retriever(corpus_scans["settings"], corpus_scans["embedder"])
    for lang, (_, _, questions) in SCANS.items():
        for question, page in questions:
            hits = retriever.retrieve(question, 3, "hybrid")
            found = [(h.chunk.file, h.chunk.pages) for h in hits]
            assert any(f == f"scan-{lang}.pdf" and page in p for f, p in found), (question, found)


@pytest.mark.integration
@pytest.mark.slow
def test_a_mixed_file_indexes_text_pages_and_scanned_pages(kb: Settings) -> None:
    path = mixed_scan_pdf(kb.files_dir / "mixed.pdf")
    (result,) = sync(kb, HashEmbedder()).files
    assert (result.status, result.pages, result.warnings, result.ocr_pages) == ("indexed", 5, (), 3), result
    chunks = Store(kb.chroma_dir).reader().chunks
    text_pages = [c for c in chunks if set(c.pages) <= {1, 2}]
    assert any("table" in c.block_types for c in text_pages), "text pages keep their layout blocks"
    assert any("widget" in c.text for c in text_pages)

    with pymupdf.open(manual_pdf(kb.files_dir.parent / "source.pdf", topic="gadget", pages=1)) as source:
        title = source[0].search_for("Chapter 1")[0]  # where the scanned pages show it
    with pymupdf.open(path) as doc:
        bounds = {n: doc[n - 1].rect * doc[n - 1].derotation_matrix for n in (3, 4, 5)}
        # in the space text extraction reports: the unrotated page (page 4 has /Rotate 90)
        expected = {n: title * doc[n - 1].derotation_matrix for n in (3, 4)}
        expected[5] = title * pymupdf.Matrix(-1, 0, 0, -1, *A4)  # scanned upside down
    for number in (3, 4, 5):
        scanned = [c for c in chunks if number in c.pages]  # a chunk may run on from the page before
        assert "two processor cores" in " ".join(c.text for c in scanned), number
        boxes = [box for c in scanned for box in c.bboxes if box[0] == number]
        assert boxes and all(pymupdf.Rect(box[1:]) in bounds[number] for box in boxes), boxes
        centre = (expected[number].tl + expected[number].br) / 2
        assert any(centre in pymupdf.Rect(box[1:]) for box in boxes), (number, centre, boxes)  # the title's box
        png = render_highlight(path, number, boxes)
        assert png.startswith(b"\x89PNG")
