"""The MinerU parser, driving the real ``mineru_vl_utils.MinerUClient`` against a loopback stub server."""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pymupdf
import pytest

from crag.errors import ConfigError
from crag.ingest.base import PDFError
from crag.ingest.mineru import MinerUParser, mineru_reachable, models_url, to_blocks
from crag.ingest.ocr import PageOCR
from crag.ingest.pymupdf import PyMuPDFParser
from tests.conftest import FakeOllama
from tests.mineru_stub import EQUATION, MODEL_ID, PAGE_SIZE, PAGES, MinerUStub
from tests.pdfs import scanned_copy

pytestmark = pytest.mark.integration  # real PDFs and the real client: about 8 s in all

DPI = 200
TABLE_HTML = (
    "<table><tr><td>Region</td><td>Revenue</td></tr><tr><td>North</td><td>120</td></tr>"
    "<tr><td>South</td><td>95</td></tr></table>"
)


def points(box: tuple[int, int, int, int]) -> tuple[float, float, float, float]:
    """A stub box (thousandths of the page) in PDF points."""
    width, height = PAGE_SIZE
    return (box[0] / 1000 * width, box[1] / 1000 * height, box[2] / 1000 * width, box[3] / 1000 * height)


@pytest.fixture
def pdf(tmp_path: Path) -> Path:
    """Two A4 pages of English text laid out as the stub's pages, each box filled with its colour."""
    path = tmp_path / "report.pdf"
    doc = pymupdf.open()
    for blocks in PAGES:
        page = doc.new_page(width=PAGE_SIZE[0], height=PAGE_SIZE[1])
        for block in blocks:
            if block.color is None:
                continue
            rect = pymupdf.Rect(points(block.box))
            page.draw_rect(rect, color=None, fill=[c / 255 for c in block.color])
            assert page.insert_textbox(rect, block.printed, fontsize=9, fontname="helv") >= 0, block
    doc.save(path)
    doc.close()
    return path


@pytest.fixture
def stub() -> Iterator[MinerUStub]:
    with MinerUStub() as server:
        yield server


@pytest.fixture(scope="module")
def fallback() -> PyMuPDFParser:
    return PyMuPDFParser()


def test_parse_through_the_real_client(stub: MinerUStub, pdf: Path, fallback: PyMuPDFParser) -> None:
    progress: list[tuple[int, int]] = []
    parser = MinerUParser(server_url=stub.url, fallback=fallback, dpi=DPI)
    result = parser.parse(pdf, on_page=lambda done, total: progress.append((done, total)))

    assert (result.parser, result.pages, result.warnings) == ("mineru", 2, ())
    assert result.parser_version == f"mineru-vl-utils {version('mineru-vl-utils')} + MinerU2.5"
    assert progress == [(1, 2), (2, 2)]

    page1 = [b for b in result.blocks if b.page == 1]
    assert [b.type for b in page1] == ["header", "title", "text", "table", "caption", "equation", "footer"]
    assert [b.order for b in page1] == list(range(7))
    assert [b.text for b in page1[:3]] == [b.answer for b in PAGES[0][:3]]
    assert page1[1].level == 1 and {b.level for b in page1 if b.type != "title"} == {0}
    assert page1[3].text == TABLE_HTML  # the client's OTSL-to-HTML table, kept verbatim
    assert page1[4].text == "Table 1: Revenue by region."
    assert page1[5].text == "\\[\n" + EQUATION + "\n\\]"  # LaTeX, in the display delimiters MinerU adds
    for block, expected in zip(page1, PAGES[0], strict=True):
        assert block.bbox == pytest.approx(points(expected.box))
        x0, y0, x1, y1 = block.bbox
        assert 0 <= x0 < x1 <= PAGE_SIZE[0] and 0 <= y0 < y1 <= PAGE_SIZE[1]

    page2 = [b for b in result.blocks if b.page == 2]
    assert [(b.type, b.text) for b in page2] == [
        ("header", "CRAG test report"),
        ("title", "Method"),
        ("text", PAGES[1][2].answer),
        ("list", "First, export the invoices."),
        ("list", "Second, sum the totals."),
        ("footer", "2"),
    ]
    assert page2[1].level == 2  # a paragraph title sits under the document's titles
    assert [b.order for b in page2] == list(range(6))
    assert page2[3].bbox == pytest.approx(points(PAGES[1][4].box))


def test_mineru_blocks_become_chunks(stub: MinerUStub, pdf: Path, fallback: PyMuPDFParser) -> None:
    """End to end: the real client's output, converted to blocks, chunked along the layout."""
    from crag.ingest.chunking import chunk_blocks
    from crag.models import count_tokens

    result = MinerUParser(server_url=stub.url, fallback=fallback, dpi=DPI).parse(pdf)
    chunks = chunk_blocks(result, "report.pdf", "ab" * 32, count_tokens, chunk_tokens=60, overlap=0)
    text = "\n".join(c.text for c in chunks)
    assert "CRAG test report" not in text, "page headers and footers are dropped"
    table = [c for c in chunks if TABLE_HTML in c.text]
    assert len(table) == 1 and "Table 1: Revenue by region." in table[0].text
    assert set(table[0].block_types) == {"table", "caption"}
    assert any(EQUATION in c.text for c in chunks)
    assert {c.parser for c in chunks} == {"mineru"}
    assert chunks[-1].section.endswith("Method") and chunks[-1].pages == (2,)
    assert "First, export the invoices." in chunks[-1].text


def test_the_stub_saw_the_real_client_protocol(stub: MinerUStub, pdf: Path, fallback: PyMuPDFParser) -> None:
    MinerUParser(server_url=stub.url, fallback=fallback, dpi=DPI).parse(pdf)

    assert stub.requests[0].method == "GET" and stub.requests[0].path == "/v1/models"
    assert all(r.status == 200 for r in stub.requests)
    layout = stub.chat_requests("layout")
    assert [r.page for r in layout] == [1, 2]
    assert all(r.images == ((1036, 1036),) for r in layout)  # the whole page, resized for layout detection
    body = layout[0].body
    assert body["model"] == MODEL_ID and body["temperature"] == 0.0 and body["skip_special_tokens"] is False
    assert body["messages"][0] == {"role": "system", "content": "You are a helpful assistant."}
    assert body["messages"][1]["content"] == [
        {"type": "image_url", "image_url": {"url": "<png 1036x1036>"}},
        {"type": "text", "text": "\nLayout Detection:"},
    ]

    # One recognition request per box, with the prompt its type needs and a crop of that box.
    recognised = [r for r in stub.chat_requests() if r.kind != "layout"]
    boxes = [b for page in PAGES for b in page if b.color]
    assert sorted(boxes, key=repr) == sorted((r.block for r in recognised), key=repr)
    assert {r.block.type: r.kind for r in recognised if r.block.type in ("table", "equation")} == {
        "table": "table",
        "equation": "equation",
    }
    scale = DPI / 72
    for r in recognised:
        x0, y0, x1, y1 = points(r.block.box)
        ((width, height),) = r.images
        assert width == pytest.approx((x1 - x0) * scale, abs=2) and height == pytest.approx((y1 - y0) * scale, abs=2)


def test_a_failing_page_falls_back_to_pymupdf(stub: MinerUStub, pdf: Path, fallback: PyMuPDFParser) -> None:
    stub.fail_pages = {2}
    result = MinerUParser(server_url=stub.url, fallback=fallback, dpi=DPI).parse(pdf)

    assert result.parser == "mineru"
    assert result.warnings[0].startswith("page 2: MinerU failed (Unexpected status code: [500]")
    assert result.warnings[0].endswith("; parsed with PyMuPDF")
    assert [b.type for b in result.blocks if b.page == 1][3] == "table"  # page 1 still came from MinerU
    page2 = " ".join(b.text for b in result.blocks if b.page == 2)
    assert "Method" in page2 and "checked each total twice" in page2 and "<table>" not in page2
    assert [r.status for r in stub.chat_requests("layout")] == [200, 500]


@pytest.mark.slow  # real OCR
def test_a_failing_scanned_page_falls_back_to_pymupdf_with_ocr(stub: MinerUStub, pdf: Path, tmp_path: Path) -> None:
    """The fallback reads a scanned page with OCR (the real engine), and says so in the progress."""
    scan = scanned_copy(pdf, tmp_path / "page2.pdf", [2], dpi=150)
    mixed = pymupdf.open(pdf)
    mixed.delete_page(1)
    mixed.insert_pdf(pymupdf.open(scan))
    mixed.save(tmp_path / "mixed.pdf")
    stub.fail_pages = {2}
    progress: list[tuple] = []
    parser = MinerUParser(server_url=stub.url, fallback=PyMuPDFParser(ocr=PageOCR()), dpi=DPI)
    result = parser.parse(tmp_path / "mixed.pdf", on_page=lambda *args: progress.append(args))

    assert len(result.warnings) == 1 and result.warnings[0].endswith("; parsed with PyMuPDF")
    page2 = " ".join(b.text for b in result.blocks if b.page == 2)
    assert "Method" in page2 and "invoices" in page2
    assert progress == [(1, 2), (2, 2, "ocr"), (2, 2)]


def test_garbled_layout_output_falls_back(stub: MinerUStub, pdf: Path, fallback: PyMuPDFParser) -> None:
    stub.garbled_pages = {1}
    result = MinerUParser(server_url=stub.url, fallback=fallback, dpi=DPI).parse(pdf)

    assert result.warnings == ("page 1: MinerU recognised no text; parsed with PyMuPDF",)
    assert "Quarterly Results" in " ".join(b.text for b in result.blocks if b.page == 1)
    assert [b.type for b in result.blocks if b.page == 2][1] == "title"


def test_a_slow_page_times_out_and_falls_back(stub: MinerUStub, pdf: Path, fallback: PyMuPDFParser) -> None:
    stub.delays = {1: 30.0}
    result = MinerUParser(server_url=stub.url, fallback=fallback, dpi=DPI, timeout=1.0).parse(pdf)

    assert result.warnings == ("page 1: MinerU failed (timed out); parsed with PyMuPDF",)
    assert "Quarterly Results" in " ".join(b.text for b in result.blocks if b.page == 1)
    assert [b.type for b in result.blocks if b.page == 2][3] == "list"


def test_some_pages_only(stub: MinerUStub, pdf: Path, fallback: PyMuPDFParser) -> None:
    result = MinerUParser(server_url=stub.url, fallback=fallback, dpi=DPI).parse(pdf, pages=[2])
    assert result.pages == 1 and {b.page for b in result.blocks} == {2}
    assert [r.page for r in stub.chat_requests("layout")] == [2]
    with pytest.raises(PDFError, match="has 2 pages, so page 3"):
        MinerUParser(server_url=stub.url, fallback=fallback).parse(pdf, pages=[3])


def test_server_down_parses_everything_with_the_fallback(
    closed_port_url: str, pdf: Path, fallback: PyMuPDFParser
) -> None:
    result = MinerUParser(server_url=closed_port_url, fallback=fallback).parse(pdf)
    assert result.parser == "pymupdf" and result.pages == 2
    assert result.warnings[0].startswith(f"MinerU unavailable at {closed_port_url} (Failed to connect")
    assert result.warnings[0].endswith("; parsed with PyMuPDF")
    assert "Quarterly Results" in " ".join(b.text for b in result.blocks)


def test_unreadable_file_is_a_pdf_error(tmp_path: Path, stub: MinerUStub) -> None:
    bad = tmp_path / "bad.pdf"
    bad.write_text("not a pdf")
    with pytest.raises(PDFError, match="not a PDF"):
        MinerUParser(server_url=stub.url).parse(bad)
    assert stub.requests == []


def test_mineru_reachable(stub: MinerUStub, closed_port_url: str, fake_ollama: FakeOllama) -> None:
    assert mineru_reachable(stub.url)
    assert mineru_reachable(stub.url + "/v1/")
    assert not mineru_reachable(closed_port_url)
    assert not mineru_reachable(fake_ollama.url)  # answers, but has no /v1/models
    assert not mineru_reachable("not a url") and not mineru_reachable("file:///etc")


def test_models_url_follows_the_client_rules() -> None:
    assert models_url("http://h:30000") == "http://h:30000/v1/models"
    assert models_url("http://h:30000/v1") == "http://h:30000/v1/models"
    assert models_url("http://h/proxy/v1/") == "http://h/proxy/v1/models"
    assert models_url("http://h/proxy/") == "http://h/proxy/v1/models"
    assert models_url("http://h/proxy") == "http://h/v1/models"  # the client drops a path without a slash


def test_to_blocks_maps_types_and_boxes() -> None:
    raw = [
        {"type": "doc_title", "bbox": [0.1, 0.1, 0.9, 0.2], "angle": 0, "content": "Report"},
        {"type": "list", "bbox": [0.1, 0.3, 0.9, 0.6], "angle": 0, "content": None},
        {"type": "text", "bbox": [0.12, 0.31, 0.88, 0.4], "angle": 0, "content": "one", "merge_prev": False},
        {"type": "image", "bbox": [0.1, 0.6, 0.5, 0.8], "angle": 0, "content": None},
        {"type": "image_caption", "bbox": [0.1, 0.8, 0.5, 0.85], "angle": 0, "content": "Figure 1"},
        {"type": "aside_text", "bbox": [0.0, 0.2, 0.05, 0.8], "angle": 270, "content": "arXiv:2509.22186"},
        {"type": "something_new", "bbox": [0.1, 0.86, 0.5, 0.9], "angle": 0, "content": " later "},
        {"type": "text", "bbox": [0.1, 0.9, 0.5, 0.95], "angle": 0, "content": ""},
        {"type": "page_number", "bbox": [0.45, 0.96, 0.55, 0.99], "angle": 0, "content": "7"},
    ]
    blocks = to_blocks(raw, page=3, size=(600.0, 800.0))
    assert [(b.type, b.text, b.level) for b in blocks] == [
        ("title", "Report", 1),
        ("list", "one", 0),
        ("image", "", 0),
        ("caption", "Figure 1", 0),
        ("header", "arXiv:2509.22186", 0),
        ("text", "later", 0),
        ("footer", "7", 0),
    ]
    assert [b.order for b in blocks] == list(range(7)) and {b.page for b in blocks} == {3}
    assert blocks[0].bbox == pytest.approx((60.0, 80.0, 540.0, 160.0))


def test_configuration_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="CRAG_MINERU_URL"):
        MinerUParser()
    both = MinerUParser(server_url="http://127.0.0.1:1", model_path=tmp_path / "missing")
    assert (both.server_url, both.model_path) == ("http://127.0.0.1:1", None)  # the server wins
    # transformers, which `make run` does not install, as a user of the local model has it
    monkeypatch.setattr("crag.ingest.mineru.importlib.util.find_spec", lambda name: object())
    with pytest.raises(ConfigError, match="is not a folder"):
        MinerUParser(model_path=tmp_path / "missing")
    monkeypatch.setattr("crag.ingest.mineru.importlib.util.find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r'pip install "mineru-vl-utils\[transformers\]"'):
        MinerUParser(model_path=tmp_path)


def test_the_page_limit_holds_before_any_request(stub: MinerUStub, pdf: Path, fallback: PyMuPDFParser) -> None:
    parser = MinerUParser(server_url=stub.url, fallback=fallback, max_pages=1)
    with pytest.raises(PDFError, match=r"2 pages, over the limit of 1 \(CRAG_MAX_PAGES\)"):
        parser.parse(pdf)
    assert stub.requests == []


def test_choose_parser_passes_the_page_limit(stub: MinerUStub) -> None:
    from crag.config import load_settings
    from crag.ingest import choose_parser

    parser = choose_parser(load_settings(mineru_url=stub.url, max_pages=7))
    assert isinstance(parser, MinerUParser) and parser.max_pages == 7


def repeated(pdf: Path, path: Path, times: int) -> Path:
    """The stub's two pages, ``times`` over: page 2k+1 shows page 1's layout, page 2k+2 page 2's."""
    doc = pymupdf.open()
    for _ in range(times):
        doc.insert_pdf(pymupdf.open(pdf))
    doc.save(path)
    return path


def test_consecutive_failures_give_up_on_mineru_for_the_build(
    stub: MinerUStub, pdf: Path, fallback: PyMuPDFParser, tmp_path: Path
) -> None:
    stub.fail_pages = {1, 2}
    parser = MinerUParser(server_url=stub.url, fallback=fallback, dpi=DPI, max_failures=3)
    progress: list[tuple] = []
    first = parser.parse(repeated(pdf, tmp_path / "six.pdf", 3), on_page=lambda *a: progress.append(a))
    assert len(stub.chat_requests("layout")) == 3, "no request after the third failure in a row"
    assert first.parser == "pymupdf", "MinerU did not finish it: parsed again once MinerU works"
    assert [w.split(":")[0] for w in first.warnings[:3]] == ["page 1", "page 2", "page 3"]
    assert first.warnings[3].startswith("MinerU given up for this build: it failed on 3 pages in a row (last: ")
    assert first.warnings[3].endswith("; pages 4-6 parsed with PyMuPDF")
    assert "checked each total twice" in " ".join(b.text for b in first.blocks if b.page == 6)
    assert progress == [(n, 6) for n in range(1, 7)]

    second = parser.parse(pdf)  # the next file of the same build: MinerU is not asked
    assert len(stub.chat_requests("layout")) == 3
    assert second.parser == "pymupdf" and second.warnings[0].startswith("MinerU not asked for the rest of this build")
    assert "Quarterly Results" in " ".join(b.text for b in second.blocks)


def test_a_page_that_works_resets_the_count(
    stub: MinerUStub, pdf: Path, fallback: PyMuPDFParser, tmp_path: Path
) -> None:
    stub.fail_pages = {2}
    parser = MinerUParser(server_url=stub.url, fallback=fallback, dpi=DPI, max_failures=2)
    result = parser.parse(repeated(pdf, tmp_path / "four.pdf", 2))
    assert result.parser == "mineru" and not parser.gave_up
    assert [r.page for r in stub.chat_requests("layout")] == [1, 2, 1, 2]
    assert [w.split(":")[0] for w in result.warnings] == ["page 2", "page 4"]


def test_the_build_keeps_files_mineru_parsed_while_it_is_down(
    stub: MinerUStub, pdf: Path, tmp_path: Path, closed_port_url: str
) -> None:
    """Through ``sync`` and ``choose_parser``: MinerU unreachable means PyMuPDF for new files, and no re-parse."""
    import shutil

    from crag.config import load_settings
    from crag.ingest import sync
    from tests.fakes import HashEmbedder

    files = tmp_path / "Files"
    files.mkdir()
    shutil.copy(pdf, files / "report.pdf")
    settings = load_settings(files_dir=files, chroma_dir=tmp_path / "db", mineru_url=stub.url)
    embedder = HashEmbedder()
    assert {f.parser for f in sync(settings, embedder).files} == {"mineru"}

    down = settings.model_copy(update={"mineru_url": closed_port_url})
    (files / "copy.pdf").write_bytes(pdf.read_bytes() + b"\n% another file\n")
    report = {f.file: f for f in sync(down, embedder).files}
    assert (report["report.pdf"].status, report["report.pdf"].parser) == ("unchanged", "mineru")
    assert (report["copy.pdf"].status, report["copy.pdf"].parser) == ("indexed", "pymupdf")
