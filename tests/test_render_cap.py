"""Page images have a pixel cap, whatever the page's size: a 200-inch page renders within MAX_RENDER_SIDE pixels in
the sources panel and in a MinerU build (uncapped: about 1.4 GB and 4.8 GB)."""

from __future__ import annotations

import io
from pathlib import Path

import pymupdf
import pytest
from PIL import Image

from crag.ingest.mineru import MinerUParser
from crag.ingest.pymupdf import MAX_RENDER_SIDE, render_highlight, render_page

SIDE = 200 * 72  # a 200-inch page, in points: the largest a PDF allows


@pytest.fixture
def huge_pdf(tmp_path: Path) -> Path:
    doc = pymupdf.open()
    page = doc.new_page(width=SIDE, height=SIDE)
    page.insert_text((72, 144), "The widget needs two processor cores.", fontsize=48)
    path = tmp_path / "huge.pdf"
    doc.save(path)
    doc.close()
    return path


@pytest.fixture(autouse=True)
def refuse_huge_renders(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail a render that would pass the cap before it allocates anything (on the old code, gigabytes)."""
    real = pymupdf.Page.get_pixmap

    def checked(page: pymupdf.Page, *args, matrix=None, dpi=None, clip=None, **kwargs):
        scale = pymupdf.Matrix(dpi / 72, dpi / 72) if dpi else matrix or pymupdf.Identity
        area = (pymupdf.Rect(clip) if clip is not None else page.rect) * scale
        assert max(area.width, area.height) <= MAX_RENDER_SIDE, f"a render of {area.width:.0f} x {area.height:.0f} px"
        return real(page, *args, matrix=matrix, dpi=dpi, clip=clip, **kwargs)

    monkeypatch.setattr(pymupdf.Page, "get_pixmap", checked)


def test_the_sources_panel_renders_a_huge_page_within_the_cap(huge_pdf: Path) -> None:
    image = Image.open(io.BytesIO(render_highlight(huge_pdf, 1, [(1, 72, 100, 1000, 160)], dpi=110)))
    assert max(image.size) <= MAX_RENDER_SIDE and min(image.size) > 0.9 * MAX_RENDER_SIDE
    close_up = Image.open(io.BytesIO(render_highlight(huge_pdf, 1, [(1, 72, 100, 1000, 160)], dpi=110, around=54)))
    assert close_up.size[0] == pytest.approx((1000 - 72 + 2 * 54 + 4) * 110 / 72, abs=3), "a close-up keeps its dpi"


def test_a_mineru_build_renders_a_huge_page_within_the_cap(huge_pdf: Path) -> None:
    seen: list[tuple[int, int]] = []

    class Client:  # MinerU's client, as the parser uses it: one page image in, its blocks out
        def two_step_extract(self, image: Image.Image) -> list[dict]:
            seen.append(image.size)
            return [{"type": "text", "bbox": [0.0, 0.0, 0.1, 0.01], "angle": 0, "content": "two processor cores"}]

    parser = MinerUParser(server_url="http://127.0.0.1:9")
    parser._client = Client()
    parsed = parser.parse(huge_pdf)
    assert parsed.parser == "mineru" and [b.text for b in parsed.blocks] == ["two processor cores"]
    assert seen and max(seen[0]) <= MAX_RENDER_SIDE
    assert max(render_page(huge_pdf, 1, dpi=200).size) <= MAX_RENDER_SIDE
