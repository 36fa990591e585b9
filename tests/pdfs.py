"""Real PDFs made by the tests, good and bad, with PyMuPDF."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pymupdf

A4 = (595, 842)


def _chinese_font(page: pymupdf.Page) -> str:
    page.insert_font(fontname="china", fontbuffer=pymupdf.Font("china-s").buffer)
    return "china"


def manual_pdf(path: Path, topic: str = "widget", pages: int = 2, chinese: bool = False) -> Path:
    """A small manual: a running header, numbered sections, paragraphs, a table with a caption, a footer."""
    doc = pymupdf.open()
    for n in range(1, pages + 1):
        page = doc.new_page(width=A4[0], height=A4[1])
        font = _chinese_font(page) if chinese else "helv"
        page.insert_text((72, 40), f"The {topic} manual", fontsize=8)
        if chinese:
            title = f"{n} 第{n}章 {topic}"
            body = (f"本章介绍{topic}的第{n}项功能。它需要两个处理器核心和八百兆内存。请先安装依赖再运行。") * 3
        else:
            title = f"{n} Chapter {n}: {topic}"
            body = (
                f"This chapter describes feature number {n} of the {topic}. It needs two processor cores "
                f"and eight hundred megabytes of memory. Install the dependencies before you run it. "
            ) * 3
        page.insert_text((72, 100), title, fontsize=20, fontname=font)
        page.insert_textbox(pymupdf.Rect(72, 120, 520, 300), body, fontsize=11, fontname=font)
        if n == 1 and not chinese:
            page.insert_text((72, 330), f"Table 1: Limits of the {topic}", fontsize=10)
            rows = [["Setting", "Default", "Maximum"], ["cores", "2", "64"], ["memory", "800 MB", "64 GB"]]
            for i, row in enumerate(rows):
                for j, cell in enumerate(row):
                    rect = pymupdf.Rect(72 + j * 120, 340 + i * 20, 72 + (j + 1) * 120, 340 + (i + 1) * 20)
                    page.draw_rect(rect, color=(0, 0, 0), width=0.5)
                    page.insert_text((rect.x0 + 4, rect.y1 - 6), cell, fontsize=10)
        page.insert_text((290, 810), f"Page {n}", fontsize=8)
    doc.save(path)
    return path


def encrypted_pdf(path: Path) -> Path:
    manual_pdf(path.with_suffix(".plain.pdf"))
    doc = pymupdf.open(path.with_suffix(".plain.pdf"))
    doc.save(path, encryption=pymupdf.PDF_ENCRYPT_AES_256, owner_pw="owner", user_pw="secret")
    path.with_suffix(".plain.pdf").unlink()
    return path


def truncated_pdf(path: Path) -> Path:
    source = manual_pdf(path.with_suffix(".full.pdf"))
    data = source.read_bytes()
    source.unlink()
    path.write_bytes(data[: len(data) // 3])
    return path


def corrupt_pdf(path: Path) -> Path:
    path.write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 40)
    return path


def image_only_pdf(path: Path) -> Path:
    """A 'scanned' page: a picture of text, no text layer."""
    doc = pymupdf.open()
    page = doc.new_page(width=A4[0], height=A4[1])
    pix = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 200, 100), False)
    pix.set_rect(pix.irect, (200, 200, 200))
    page.insert_image(pymupdf.Rect(72, 72, 472, 272), pixmap=pix)
    doc.save(path)
    return path


def zero_page_pdf(path: Path) -> Path:
    """A well-formed PDF whose page tree is empty (PyMuPDF refuses to save one, so it is written by hand)."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [] /Count 0 >>"]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    path.write_bytes(bytes(out))
    return path


def mixed_pdf(path: Path) -> Path:
    """A text page followed by a scanned (image-only) page."""
    manual_pdf(path.with_suffix(".text.pdf"), pages=1)
    image_only_pdf(path.with_suffix(".scan.pdf"))
    doc = pymupdf.open(path.with_suffix(".text.pdf"))
    doc.insert_pdf(pymupdf.open(path.with_suffix(".scan.pdf")))
    doc.save(path)
    path.with_suffix(".text.pdf").unlink()
    path.with_suffix(".scan.pdf").unlink()
    return path


def text_pdf(path: Path, paragraphs: list[str]) -> Path:
    """One page of plain paragraphs."""
    doc = pymupdf.open()
    page = doc.new_page(width=A4[0], height=A4[1])
    y = 72
    for text in paragraphs:
        rect = pymupdf.Rect(72, y, 520, y + 120)
        page.insert_textbox(rect, text, fontsize=11)
        y += 130
    doc.save(path)
    return path


def scanned_copy(
    source: Path, path: Path, pages: Sequence[int], dpi: int = 200, rotation: int = 0, upside_down: bool = False
) -> Path:
    """A 'scan' of some pages (1-based) of a real PDF: each page a picture of itself, no text layer.

    With ``rotation``, each scanned page carries that /Rotate and its picture is turned to match, so it
    shows upright while its unrotated coordinates differ from the displayed ones, as in real scans.
    ``upside_down`` puts the sheet in the scanner the wrong way round.
    """
    src = pymupdf.open(source)
    doc = pymupdf.open()
    for number in pages:
        page = src[number - 1]
        pix = page.get_pixmap(dpi=dpi, colorspace=pymupdf.csGRAY)
        width, height = page.rect.width, page.rect.height
        if rotation in (90, 270):
            width, height = height, width
        scan = doc.new_page(width=width, height=height)
        scan.set_rotation(rotation)
        turn = (rotation + (180 if upside_down else 0)) % 360
        scan.insert_image(scan.mediabox, pixmap=pix, rotate=turn, keep_proportion=False)
    doc.save(path, deflate=True)
    src.close()
    return path


def mixed_scan_pdf(path: Path) -> Path:
    """Two text pages of a widget manual, then three scans of a gadget manual's page: upright, with
    /Rotate 90, and upside down."""
    text = manual_pdf(path.with_suffix(".text.pdf"), topic="widget", pages=2)
    source = manual_pdf(path.with_suffix(".source.pdf"), topic="gadget", pages=1)
    scan = scanned_copy(source, path.with_suffix(".scan.pdf"), [1], dpi=150)
    rotated = scanned_copy(source, path.with_suffix(".rotated.pdf"), [1], dpi=150, rotation=90)
    turned = scanned_copy(source, path.with_suffix(".turned.pdf"), [1], dpi=150, upside_down=True)
    doc = pymupdf.open(text)
    for part in (scan, rotated, turned):
        with pymupdf.open(part) as other:
            doc.insert_pdf(other)
    doc.save(path)
    doc.close()
    for temp in (text, source, scan, rotated, turned):
        temp.unlink()
    return path


def folders_of_pdfs(files: Path) -> dict[str, str]:
    """Real PDFs in folders, English and Chinese: two folders (one with two subfolders) and the top level. Each
    manual is about its own topic, so a passage tells its file. Returns file -> topic."""
    layout = {
        "widget.pdf": ("widget", False),
        "projects/gadget.pdf": ("gadget", False),
        "projects/alpha/zorblax.pdf": ("Zorblax", False),
        "projects/beta/sprocket.pdf": ("sprocket", False),
        "courses/部件.pdf": ("部件", True),
        "courses/齿轮.pdf": ("齿轮", True),
    }
    for name, (topic, chinese) in layout.items():
        (files / name).parent.mkdir(parents=True, exist_ok=True)
        manual_pdf(files / name, topic=topic, chinese=chinese)
    return {name: topic for name, (topic, _) in layout.items()}


def chinese_pdf(path: Path, sections: Sequence[tuple[str, str]]) -> Path:
    """A Chinese manual: one page per (title, paragraph), the title in a larger type, so each is a passage."""
    doc = pymupdf.open()
    for n, (title, text) in enumerate(sections, start=1):
        page = doc.new_page(width=A4[0], height=A4[1])
        font = _chinese_font(page)
        page.insert_text((72, 100), f"{n} {title}", fontsize=20, fontname=font)
        page.insert_textbox(pymupdf.Rect(72, 120, 520, 400), text, fontsize=11, fontname=font)
    doc.save(path)
    return path


CODE = ['df <- read.table("data.csv", header = TRUE,', '                 sep = ",")', "summary(df)"]
ZH_CODE = ["tlmgr update --self", "tlmgr update --all"]


def code_pdf(path: Path) -> Path:
    """A page of prose with a listing set in a monospaced font (Courier), as manuals display code, then a Chinese
    page that introduces two commands the same way."""
    doc = pymupdf.open()
    page = doc.new_page(width=A4[0], height=A4[1])
    page.insert_text((72, 100), "1 Reading data", fontsize=20)
    intro = (
        "Data are read with read.table, which returns a data frame. The file must have one line per row. "
        "To read a file with a header line and commas between the fields, you can type:"
    )
    page.insert_textbox(pymupdf.Rect(72, 120, 520, 200), intro, fontsize=11, fontname="helv")
    for i, line in enumerate(CODE):
        page.insert_text((90, 215 + i * 13), line, fontsize=10, fontname="cour")
    after = "The summary shows the range of every column of the data frame."
    page.insert_textbox(pymupdf.Rect(72, 260, 520, 340), after, fontsize=11, fontname="helv")
    page = doc.new_page(width=A4[0], height=A4[1])
    font = _chinese_font(page)
    page.insert_text((72, 100), "2 升级宏包", fontsize=20, fontname=font)
    intro = "要升级全部宏包，先升级 tlmgr 自身，再执行以下命令："
    page.insert_textbox(pymupdf.Rect(72, 120, 520, 200), intro, fontsize=11, fontname=font)
    for i, line in enumerate(ZH_CODE):
        page.insert_text((90, 215 + i * 13), line, fontsize=10, fontname="cour")
    page.insert_textbox(pymupdf.Rect(72, 260, 520, 340), "升级完成后重新启动编辑器。", fontsize=11, fontname=font)
    doc.save(path)
    return path
