"""The PyMuPDF layout parser on real PDFs made here, good and bad."""

from __future__ import annotations

import gc
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import onnxruntime as ort
import pymupdf
import pytest

from crag.config import cpu_threads
from crag.evidence import evidence_parts, select
from crag.ingest.base import PDFError
from crag.ingest.chunking import chunk_blocks
from crag.ingest.pymupdf import (
    PyMuPDFParser,
    body_style,
    false_heading,
    in_margin,
    layout_sessions,
    load_layout_model,
    page_sizes,
    printed_pages,
    render_page,
)
from crag.ingest.spans import box_text, note_marks
from crag.parts import Part
from crag.parts import plain as text_of_parts
from crag.refine import local_strips, number_sources
from crag.text import join_lines, language
from crag.types import Action, ScoredChunk
from tests.helpers import quotes_of
from tests.pdfs import (
    CODE,
    ZH_CODE,
    code_pdf,
    corrupt_pdf,
    encrypted_pdf,
    image_only_pdf,
    manual_pdf,
    mixed_pdf,
    truncated_pdf,
    zero_page_pdf,
)


@pytest.fixture(scope="module")
def parser() -> PyMuPDFParser:
    return PyMuPDFParser()


def test_layout_blocks_of_a_manual(tmp_path: Path, parser: PyMuPDFParser) -> None:
    pages_seen = []
    parsed = parser.parse(manual_pdf(tmp_path / "m.pdf"), on_page=lambda done, total: pages_seen.append((done, total)))
    assert parsed.pages == 2 and pages_seen == [(1, 2), (2, 2)]
    assert parsed.parser == "pymupdf" and "pymupdf4llm" in parsed.parser_version
    first = [b for b in parsed.blocks if b.page == 1]
    types = [b.type for b in first]
    assert types[0] == "header" and types[-1] == "footer"
    title = next(b for b in first if b.type == "title")
    assert title.text == "1 Chapter 1: widget" and title.level >= 1
    table = next(b for b in first if b.type == "table")
    assert "|Setting|Default|Maximum|" in table.text.replace(" ", "") and "800 MB" in table.text
    assert any(b.type == "caption" and "Table 1" in b.text for b in first)
    text = next(b for b in first if b.type == "text")
    assert "two processor cores" in text.text and "\n" not in text.text
    assert [b.order for b in first] == sorted(b.order for b in first)
    width, height = page_sizes(tmp_path / "m.pdf")[0]
    assert all(0 <= b.bbox[0] < b.bbox[2] <= width and 0 <= b.bbox[1] < b.bbox[3] <= height for b in first)


def test_chinese_text(tmp_path: Path, parser: PyMuPDFParser) -> None:
    parsed = parser.parse(manual_pdf(tmp_path / "zh.pdf", topic="小部件", chinese=True))
    body = " ".join(b.text for b in parsed.blocks if b.type == "text")
    assert "它需要两个处理器核心和八百兆内存。" in body


def test_render_page(tmp_path: Path) -> None:
    image = render_page(manual_pdf(tmp_path / "m.pdf"), 1, dpi=72)
    assert image.size == (595, 842) and image.mode == "RGB"


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: _write(p, b""), "empty \\(0 bytes\\)"),
        (lambda p: _write(p, b"just some notes\n"), "not a PDF"),
        (encrypted_pdf, "password-protected"),
        (corrupt_pdf, "corrupt or truncated"),
        (image_only_pdf, "no text layer"),
        (zero_page_pdf, "no pages"),
    ],
    ids=["empty", "renamed-text", "encrypted", "corrupt", "scanned", "zero-pages"],
)
def test_bad_files_are_refused_with_the_reason(tmp_path: Path, parser: PyMuPDFParser, make, message: str) -> None:
    path = make(tmp_path / "bad.pdf")
    with pytest.raises(PDFError, match=message) as err:
        parser.parse(path)
    assert "bad.pdf" in str(err.value)


@pytest.mark.reliability
def test_truncated_pdf_is_refused_or_repaired(tmp_path: Path, parser: PyMuPDFParser) -> None:
    """MuPDF repairs what it can of a truncated file; what it cannot is refused, never a crash."""
    path = truncated_pdf(tmp_path / "cut.pdf")
    try:
        parsed = parser.parse(path)
    except PDFError as exc:
        assert "cut.pdf" in str(exc)
    else:
        assert parsed.pages >= 1


def testjoin_lines() -> None:
    assert join_lines(["install-", "ation of the", "package"]) == "installation of the package"
    assert join_lines(["本手册介绍如何", "安装小部件。"]) == "本手册介绍如何安装小部件。"
    assert join_lines(["运行 make run", "启动它"]) == "运行 make run 启动它"
    assert join_lines(["see R-", "project"], dehyphenate=False) == "see R- project"


def test_clean_folds_ligatures_and_drops_control_characters() -> None:
    from crag.ingest.pymupdf import clean

    assert clean("\x87 indent\ufb01rst and pd\ufb02atex") == " indentfirst and pdflatex"
    assert clean("是吗？对！") == "是吗？对！"


@pytest.mark.reliability
def test_a_scanned_page_among_text_pages_is_a_warning(tmp_path: Path, parser: PyMuPDFParser) -> None:
    parsed = parser.parse(mixed_pdf(tmp_path / "mixed.pdf"))
    assert parsed.pages == 2
    assert any(b.page == 1 and "processor cores" in b.text for b in parsed.blocks)
    assert parsed.warnings == ("page 2: no text layer (scanned or image-only); set CRAG_OCR=auto to read it with OCR",)


def _layout_sessions_alive() -> list[ort.InferenceSession]:
    gc.collect()
    return [s for s in gc.get_objects() if issubclass(type(s), ort.InferenceSession) and "pymupdf" in s._model_path]


def test_the_layout_model_keeps_its_memory_arena_and_does_not_spin(tmp_path: Path, parser: PyMuPDFParser) -> None:
    """pymupdf-layout turns the arena off; the parser's sessions have it on (with more than one core), our thread
    count and no spinning."""
    load_layout_model()
    sessions = _layout_sessions_alive()
    assert len(sessions) >= 2  # page image features and the layout graph, at least
    for session in sessions:
        options = session.get_session_options()
        assert options.enable_cpu_mem_arena == (cpu_threads() > 1) and options.intra_op_num_threads == cpu_threads()
        assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert parser.parse(manual_pdf(tmp_path / "m.pdf")).pages == 2  # and the model made again still parses


def test_options_the_runtime_refuses_leave_the_library_s_own_model(
    tmp_path: Path, parser: PyMuPDFParser, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self, key: str, value: str) -> None:
        raise RuntimeError(f"unknown session option {key}")

    monkeypatch.setattr(ort.SessionOptions, "add_session_config_entry", refuse)
    load_layout_model()
    assert not any(s.get_session_options().enable_cpu_mem_arena for s in _layout_sessions_alive())
    assert parser.parse(manual_pdf(tmp_path / "m.pdf")).pages == 2
    monkeypatch.undo()
    load_layout_model()  # the faster sessions again, for the tests that follow
    assert all(s.get_session_options().enable_cpu_mem_arena for s in _layout_sessions_alive())


def test_layout_sessions_leave_onnxruntime_as_they_found_it() -> None:
    library = ort.InferenceSession
    with pytest.raises(RuntimeError), layout_sessions():
        assert ort.InferenceSession is not library
        raise RuntimeError("a model that fails to load")
    assert ort.InferenceSession is library


def test_a_note_in_the_margin_is_not_read_as_text(tmp_path: Path, parser: PyMuPDFParser) -> None:
    """A revision stamp beside a paragraph ("Revised v0.4", as the CTeX FAQ has) would be quoted inside its
    sentences; it is paratext, as MinerU's aside text is, and the chunker drops it with headers and footers."""
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    body = "The widget needs two processor cores and eight hundred megabytes of memory to run. " * 4
    page.insert_textbox(pymupdf.Rect(72, 100, 520, 220), body, fontsize=11)
    page.insert_text((551, 160), "Revised", fontsize=8)  # on two lines, as the CTeX FAQ sets it: read as text
    page.insert_text((551, 170), "v0.4", fontsize=8)
    page.insert_textbox(pymupdf.Rect(72, 240, 520, 360), body.replace("widget", "gadget"), fontsize=11)
    doc.save(tmp_path / "m.pdf")
    blocks = parser.parse(tmp_path / "m.pdf").blocks
    note = [b for b in blocks if "Revised" in b.text]
    assert note and all(b.type == "header" for b in note)
    assert any(b.type == "text" and "gadget" in b.text for b in blocks)
    # Only what says something is a note: a code brace set far left (the Asymptote FAQ has one) stays.
    brace = SimpleNamespace(x0=50.0, x1=56.0, boxclass="text")
    assert not in_margin(brace, "{", 595) and in_margin(brace, "12", 595)


def _box(boxclass: str, *spans: tuple[str, str, float, int]) -> SimpleNamespace:
    """A layout box as pymupdf4llm gives it: lines of spans with their font, size and flags."""
    return SimpleNamespace(
        boxclass=boxclass,
        textlines=[{"spans": [{"text": t, "font": f, "size": size, "flags": flags} for t, f, size, flags in spans]}],
    )


def test_a_command_or_a_line_of_text_the_layout_model_calls_a_heading_stays_text() -> None:
    """The R manuals display commands on a line of their own, and the layout model calls them section headers:
    "./configure --prefix=/where/you/want/R/to/go" then left the text for the section path, and no answer could
    quote it. A line set like the running text ("or", "然后执行") is no heading either. Real headings stay."""
    body = _box("text", ("The prefix is set by running configure with the option, as in", "CMR10", 10.9, 4))
    chinese = _box("text", ("在命令行中执行以下命令即可完成安装。", "FandolSong-Regular", 10.0, 4))
    style = body_style([body, chinese])
    command = _box("section-header", ("./configure --prefix=/where/you/want/R/to/go", "CMTT10", 10.9, 12))
    assert false_heading(command, style)
    assert false_heading(_box("section-header", ("or", "CMR10", 10.9, 4)), style)
    assert false_heading(_box("section-header", ("然后执行", "FandolSong-Regular", 10.0, 4)), style)
    # Headings: bold, larger, or in a font the running text does not use.
    assert not false_heading(_box("section-header", ("2.4 Installation", "CMBX12", 14.3, 20)), style)
    assert not false_heading(_box("section-header", ("Installation notes", "CMR10", 10.9, 20)), style)
    assert not false_heading(_box("section-header", ("Installation", "CMR12", 14.3, 4)), style)
    assert not false_heading(_box("section-header", ("安装方法", "FandolHei-Regular", 10.0, 4)), style)
    # A page without running text gives no style to compare with: only a monospaced line is known for code.
    assert not false_heading(_box("section-header", ("or", "CMR10", 10.9, 4)), None)
    assert false_heading(command, None)
    assert not false_heading(body, style)  # only headings are ever demoted


def _placed(boxclass: str, *spans: tuple[str, float, float, int]) -> SimpleNamespace:
    """A one-line layout box whose spans have places: (text, x0, x1, flags); flag 1 is a raised span."""
    placed = [{"text": t, "font": "CMR10", "size": 10.0, "flags": f, "bbox": (x0, 0, x1, 10)} for t, x0, x1, f in spans]
    return SimpleNamespace(boxclass=boxclass, textlines=[{"spans": placed}])


def test_a_footnote_mark_is_not_glued_to_the_word_it_follows() -> None:
    """A raised footnote mark is no part of the text ("添加在 secure_path 中4.", "precise control.6 However"): a
    quote would carry it, and a word with a mark glued on is another word. A raised number that none of the page's
    notes opens with is no mark (an exponent), and a note keeps its own mark."""
    chinese = _placed(
        "text", ("添加在 secure_path 中", 0, 100, 4), ("4", 100, 104, 5), (". 然后保存退出.", 104, 170, 4)
    )
    english = _placed("text", ("give more precise control.", 0, 120, 4), ("6", 120, 124, 5), ("However,", 127, 160, 4))
    power = _placed("text", ("a million is 10", 0, 60, 4), ("3", 60, 64, 5), ("squared", 67, 110, 4))
    notes = [
        _placed("footnote", ("4", 0, 4, 5), ("这里只讨论默认安装的情况", 4, 80, 4)),
        _placed("footnote", ("6 See 4.2.", 0, 40, 4)),
    ]
    marks = note_marks([chinese, english, power, *notes])
    assert marks == {"4", "6"}
    assert box_text(chinese, marks) == "添加在 secure_path 中. 然后保存退出."
    assert box_text(english, marks) == "give more precise control. However,"
    assert box_text(power, marks) == "a million is 103 squared"
    assert [box_text(note, marks) for note in notes] == ["4这里只讨论默认安装的情况", "6 See 4.2."]


def test_the_page_numbers_a_manual_prints_are_read_from_its_page_labels(tmp_path: Path) -> None:
    labelled = manual_pdf(tmp_path / "labelled.pdf", pages=3)
    with pymupdf.open(labelled) as doc:  # a title page counted apart, then 1, 2: the manual's own numbers
        doc.set_page_labels(
            [
                {"startpage": 0, "prefix": "", "style": "r", "firstpagenum": 1},
                {"startpage": 1, "style": "D", "firstpagenum": 1},
            ]
        )
        doc.saveIncr()
    assert printed_pages(labelled, [2]) == "1"
    assert printed_pages(labelled, [2, 3]) == "1–2"
    assert printed_pages(labelled, [1]) == "i"
    plain = manual_pdf(tmp_path / "plain.pdf", pages=2)
    assert printed_pages(plain, [1, 2]) == ""  # no labels: the PDF's numbers are the printed ones


def _evidence(parsed, question: str) -> list[Part]:
    """The evidence answer a question gets from every chunk of a parsed file, all graded relevant."""
    graded = [
        ScoredChunk(chunk=c, score=0.9) for c in chunk_blocks(parsed, "code.pdf", "0" * 16, lambda t: len(t.split()))
    ]
    strips = [replace(s, kept=True) for s in local_strips(graded)]
    chosen = select(strips, question)
    return evidence_parts(chosen, number_sources(strips, graded, chosen), language(question), Action.CORRECT)


def test_code_set_in_a_monospaced_font_is_quoted_as_code_with_its_lines(tmp_path: Path, parser: PyMuPDFParser) -> None:
    """A listing the layout model reads as text (the manuals' code is set in Courier or CMTT) keeps its lines and their
    indentation from the page to the quote: fenced, its citation under the fence, the sentence that introduces it
    quoted before it. Flattened, "sep = "," ) summary(df)" ran on as one line."""
    parsed = parser.parse(code_pdf(tmp_path / "code.pdf"))
    assert [b.text for b in parsed.blocks if b.type == "code"] == ["\n".join(CODE), "\n".join(ZH_CODE)]
    parts = _evidence(parsed, "How do I read a file with a header line and commas between the fields?")
    text = text_of_parts(parts)
    assert "\n".join(["```", *CODE, "```", "[1]"]) in text
    assert "the fields, you can type:” [1]\n\n```" in text
    [code] = [q for q in quotes_of(parts) if q.quote.startswith("df <-")]
    assert code.quote == "\n".join(CODE) and code.n == 1 and code.kind == "code"
    zh = text_of_parts(_evidence(parsed, "怎样升级全部宏包？"))
    assert "\n".join(["```", *ZH_CODE, "```"]) in zh and "“要升级全部宏包，先升级 tlmgr 自身，再执行以下命令：”" in zh


def test_glyphs_that_are_not_text_are_dropped_when_a_page_is_read() -> None:
    """A symbol font's characters come out as private-use code points or U+FFFD ("R2 = 1 − �i Ri2/ �i yi2" in the R
    FAQ): they go, runs of them too, while real symbols (math, arrows, Chinese punctuation) stay."""
    formula = _placed(
        "text",
        ("R2 = 1 −", 0, 40, 4),
        ("\ufffd", 42, 48, 4),
        ("i Ri2/", 48, 70, 4),
        ("\uf8f1\ue000 \U000f0001", 72, 80, 4),
        ("yi2 → ∑ ≤ 3，完。", 82, 150, 4),
    )
    assert box_text(formula) == "R2 = 1 − i Ri2/ yi2 → ∑ ≤ 3，完。"
    assert box_text(_placed("text", ("不过 FAQ 随版本变动不大\ufffd。", 0, 100, 4))) == "不过 FAQ 随版本变动不大。"


def test_lines_in_a_monospaced_font_are_code_even_when_the_pdf_does_not_flag_the_font() -> None:
    """The layout model puts a listing in the box of the sentence that introduces it; lines set wholly in a
    monospaced font (flagged, or known by name: NimbusMonL, FreeMono, CMTT9 often carry no flag) are a code block of
    their own, indented as the page sets them. One such line inside a sentence stays in it."""
    from crag.ingest.spans import box_pieces

    def line(y: float, *spans: tuple[str, str, float]) -> dict:
        placed = [
            {"text": t, "font": f, "size": 10.0, "flags": 0, "bbox": (x, y, x + 6 * len(t), y + 10)}
            for t, f, x in spans
        ]
        box = (min(s["bbox"][0] for s in placed), y, max(s["bbox"][2] for s in placed), y + 10)
        return {"bbox": box, "spans": placed}

    mono = "NimbusMonL-Regu"
    box = SimpleNamespace(
        boxclass="text",
        x0=72.0,
        y0=0.0,
        x1=400.0,
        y1=80.0,
        textlines=[
            line(0, ("Possible return values:", "NimbusRomNo9L-Regu", 72)),
            line(12, ("BZ_PARAM_ERROR", mono, 90)),
            line(24, ("if", mono, 96), ("strm", mono, 114), ("is NULL", mono, 144)),
            line(36, ("Then call", "NimbusRomNo9L-Regu", 72), ("BZ2_bzCompress", mono, 130)),
            line(48, ("again", mono, 72)),
            line(60, ("with more input.", "NimbusRomNo9L-Regu", 72)),
        ],
    )
    pieces = box_pieces(box)
    assert [(p.code, p.text) for p in pieces] == [
        (False, "Possible return values:"),
        (True, "BZ_PARAM_ERROR\n if strm is NULL"),
        (False, "Then call BZ2_bzCompress again with more input."),
    ]
    assert pieces[1].bbox == (90.0, 12.0, 186.0, 34.0)
