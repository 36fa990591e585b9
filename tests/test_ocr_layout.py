"""OCR lines to paragraphs in reading order: gaps, indentation, columns, list items, Chinese joining."""

from __future__ import annotations

from crag.ingest.ocr_layout import OcrLine, paragraphs


def line(text: str, x0: float, y0: float, x1: float, height: float = 30) -> OcrLine:
    return OcrLine(text, (x0, y0, x1, y0 + height))


def test_paragraphs_by_vertical_gaps_and_indentation() -> None:
    lines = [
        line("Installation of the pack-", 100, 100, 1400),
        line("age takes two minutes on", 100, 135, 1400),
        line("two cores.", 100, 170, 400),  # a short last line ends the paragraph
        line("Then run it. It needs eight", 160, 205, 1400),  # set in: a new paragraph
        line("hundred megabytes.", 100, 240, 700),
        line("Limits", 100, 340, 300),  # well below: a new paragraph
    ]
    paras = paragraphs(list(reversed(lines)))  # the engine's order does not matter
    assert [p.text for p in paras] == [
        "Installation of the package takes two minutes on two cores.",
        "Then run it. It needs eight hundred megabytes.",
        "Limits",
    ]
    assert paras[0].box == (100, 100, 1400, 200)
    assert paras[1].box == (100, 205, 1400, 270)


def test_chinese_lines_join_without_spaces_and_pieces_of_a_row_join_in_order() -> None:
    lines = [
        line("本手册介绍如何安装小部件，它需要两个处理", 100, 100, 1400),
        line("器核心。运行 make run", 100, 135, 700),
        line("启动它。", 720, 137, 900, height=28),  # the same row, split by the engine at a wide space
    ]
    (para,) = paragraphs(lines)
    assert para.text == "本手册介绍如何安装小部件，它需要两个处理器核心。运行 make run 启动它。"
    assert para.box == (100, 100, 1400, 165)


def test_two_columns_are_read_one_after_the_other() -> None:
    title = line("A report in two columns", 100, 50, 1500, height=45)
    left = [line(f"left {i} of the first column", 100, 150 + 35 * i, 760) for i in range(8)]
    right = [line(f"right {i} of the second column", 840, 150 + 35 * i, 1500) for i in range(8)]
    footer = line("Page 1 of the report, printed across both columns", 100, 500, 1500)
    paras = paragraphs([title, footer, *(x for pair in zip(left, right, strict=True) for x in pair)])
    texts = [p.text for p in paras]
    assert texts[0] == title.text and texts[-1] == footer.text
    body = " ".join(texts[1:-1])
    assert body.index("left 7") < body.index("right 0"), "the left column comes first"
    assert all(not ("left" in t and "right" in t) for t in texts), "no paragraph mixes the columns"
    lefts = [p for p in paras if "left" in p.text]
    assert all(p.box[2] <= 760 for p in lefts) and all(p.box[0] >= 840 for p in paras if "right" in p.text)


def test_list_items_and_margin_labels() -> None:
    lines = [
        line("• In R, T and F are just variables, but they", 100, 100, 1400),
        line("are not reserved words.", 140, 135, 800),
        line("• Categories do not exist in R.", 100, 170, 1000),
        line("Revised", 1500, 100, 1600),  # a margin note: not a column
        line("v0.4", 1500, 135, 1600),
    ]
    texts = [p.text for p in paragraphs(lines)]
    assert "• In R, T and F are just variables, but they are not reserved words." in texts
    assert "• Categories do not exist in R." in texts
