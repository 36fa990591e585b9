"""The pieces of crag the app uses and nothing else does: uploads, Ollama pulls, highlighted pages, the sample."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import pymupdf
import pytest
from PIL import Image

from crag.errors import BackendUnavailable, CragError
from crag.ingest.base import PDFError
from crag.ingest.pymupdf import PyMuPDFParser, render_highlight
from crag.ingest.sync import scan
from crag.ingest.uploads import AlreadyPresent, UploadRejected, remove_file, safe_name, save_upload
from crag.models import PullProgress, ollama_health, pull_model
from tests.pdfs import manual_pdf

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "Files" / "crag-user-guide.pdf"

# ---------------------------------------------------------------------------------------------
# Uploads


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("name", "safe"),
    [
        ("report.pdf", "report.pdf"),
        ("../../etc/passwd", "passwd.pdf"),
        ("/abs/path/Manual.PDF", "Manual.pdf"),
        ("C:\\Users\\me\\报告 2024.pdf", "报告 2024.pdf"),
        ("手册（第二版）.pdf", "手册（第二版）.pdf"),
        (".hidden.pdf", "hidden.pdf"),  # sync skips hidden files
        ("-rf .pdf", "rf.pdf"),
        ('a<b>|c?*"d.pdf', "a_b_c_d.pdf"),
        ("tab\there\x00.pdf", "tab here.pdf"),
        ("report.pdf.exe", "report.pdf.exe.pdf"),
        ("   ", "document.pdf"),
        ("..", "document.pdf"),
    ],
)
def test_upload_names_are_made_safe(name: str, safe: str) -> None:
    assert safe_name(name) == safe


def test_a_long_cjk_name_fits_the_filesystem() -> None:
    name = safe_name("很" * 300 + ".pdf")
    assert len(name.encode("utf-8")) <= 255 and name.endswith(".pdf") and name.startswith("很")


@pytest.fixture
def pdf_bytes(tmp_path: Path) -> bytes:
    return manual_pdf(tmp_path / "source.pdf").read_bytes()


def test_save_upload_writes_the_file(tmp_path: Path, pdf_bytes: bytes) -> None:
    folder = tmp_path / "Files"
    path = save_upload(folder, "../My manual.pdf", pdf_bytes, max_bytes=10_000_000)
    assert path == folder / "My manual.pdf" and path.read_bytes() == pdf_bytes
    assert [p.name for p in folder.iterdir()] == ["My manual.pdf"]  # no temporary file left behind


@pytest.mark.reliability
def test_save_upload_never_overwrites_and_spots_duplicates(tmp_path: Path, pdf_bytes: bytes) -> None:
    folder = tmp_path / "Files"
    first = save_upload(folder, "manual.pdf", pdf_bytes, max_bytes=10_000_000)
    other = manual_pdf(tmp_path / "other.pdf", topic="gadget").read_bytes()
    second = save_upload(folder, "manual.pdf", other, max_bytes=10_000_000)
    third = save_upload(folder, "manual.pdf", other + b"\n%extra", max_bytes=10_000_000)
    assert (second.name, third.name) == ("manual (2).pdf", "manual (3).pdf")
    assert first.read_bytes() == pdf_bytes  # untouched
    with pytest.raises(AlreadyPresent, match="already in the knowledge base folder, as manual \\(2\\).pdf") as err:
        save_upload(folder, "renamed copy.pdf", other, max_bytes=10_000_000)
    assert err.value.path == second
    assert len(list(folder.iterdir())) == 3


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty"),
        (b"PK\x03\x04 a zip file", "not a PDF"),
        (b"<html>%PDF-</html>" + b" " * 2000, None),  # a header inside the first 1024 bytes is accepted
        (b"x" * 1100 + b"%PDF-1.7", "not a PDF"),
    ],
)
def test_save_upload_checks_the_content(tmp_path: Path, data: bytes, message: str | None) -> None:
    if message is None:
        assert save_upload(tmp_path, "odd.pdf", data, max_bytes=10_000).exists()
        return
    with pytest.raises(UploadRejected, match=message):
        save_upload(tmp_path, "odd.pdf", data, max_bytes=10_000)
    assert not list(tmp_path.iterdir())


@pytest.mark.reliability
def test_save_upload_refuses_big_files(tmp_path: Path, pdf_bytes: bytes) -> None:
    with pytest.raises(UploadRejected, match="over the .* upload limit") as err:
        save_upload(tmp_path / "Files", "big.pdf", pdf_bytes, max_bytes=len(pdf_bytes) - 1)
    assert isinstance(err.value, CragError) and "by hand" in str(err.value)


def test_a_removed_file_is_moved_aside_never_deleted_nor_overwritten(tmp_path: Path, pdf_bytes: bytes) -> None:
    files = tmp_path / "Files"
    first = save_upload(files, "guide.pdf", pdf_bytes)
    assert remove_file(files, "guide.pdf") == files / ".removed" / "guide.pdf"
    assert scan(files) == [] and (files / ".removed" / "guide.pdf").read_bytes() == pdf_bytes  # builds skip it
    assert save_upload(files, "guide.pdf", pdf_bytes) == first, "a removed file uploaded again is saved again"
    (files / "sub").mkdir()
    (files / "sub" / "guide.pdf").write_bytes(b"%PDF-1.7 another guide")
    assert remove_file(files, "sub/guide.pdf") == files / ".removed" / "sub" / "guide.pdf"  # where it was
    assert remove_file(files, "guide.pdf") == files / ".removed" / "guide (2).pdf"
    assert (files / ".removed" / "sub" / "guide.pdf").read_bytes() == b"%PDF-1.7 another guide"
    (tmp_path / "outside.pdf").write_bytes(pdf_bytes)
    for name in ("guide.pdf", "../outside.pdf", ".removed/guide.pdf"):  # gone already, outside, or removed
        with pytest.raises(CragError, match="nothing to remove"):
            remove_file(files, name)
    assert sorted(p.relative_to(files).as_posix() for p in files.rglob("*.pdf")) == [
        ".removed/guide (2).pdf",
        ".removed/guide.pdf",
        ".removed/sub/guide.pdf",
    ]


# ---------------------------------------------------------------------------------------------
# Ollama pull


def test_pull_streams_progress_and_the_model_appears(fake_ollama) -> None:
    fake_ollama.pullable = ["bge-m3"]
    steps = list(pull_model(fake_ollama.url, "bge-m3"))
    assert steps[0] == PullProgress("pulling manifest")
    assert [s.fraction for s in steps if s.total] == [0.0, 0.4, 1.0]
    assert steps[-1].status == "success"
    assert fake_ollama.requests[-1] == {
        "path": "/api/pull",
        "body": {"model": "bge-m3", "insecure": False, "stream": True},
    }
    assert ollama_health(fake_ollama.url).has("bge-m3")


def test_pull_of_an_unknown_model_says_why(fake_ollama) -> None:
    with pytest.raises(
        BackendUnavailable, match="could not pull `nope:1b` \\(pull model manifest: file does not exist\\)"
    ):
        list(pull_model(fake_ollama.url, "nope:1b"))


def test_pull_without_ollama_says_how_to_start_it(closed_port_url: str) -> None:
    with pytest.raises(BackendUnavailable, match="ollama serve") as err:
        list(pull_model(closed_port_url, "qwen3:4b"))
    assert closed_port_url in str(err.value)


def test_pull_failing_without_a_message_names_the_failure(monkeypatch) -> None:
    import ollama

    def pull(*args: object, **kwargs: object) -> None:
        raise ConnectionResetError()  # str() is "": the message names the exception's type instead

    monkeypatch.setattr(ollama.Client, "pull", pull)
    with pytest.raises(BackendUnavailable, match=r"\(ConnectionResetError\)"):
        list(pull_model("http://127.0.0.1:1", "qwen3:4b"))


# ---------------------------------------------------------------------------------------------
# Highlighted page images


def yellow_share(png: bytes, box: tuple[float, float, float, float] | None = None) -> float:
    """The share of highlighter-yellow pixels, in the whole image or in a box given as fractions."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    if box:
        w, h = image.size
        image = image.crop((int(box[0] * w), int(box[1] * h), int(box[2] * w), int(box[3] * h)))
    pixels = list(image.getdata())
    yellow = sum(1 for rgb in pixels if _is_yellow(rgb))
    return yellow / len(pixels)


def test_render_highlight_marks_the_region(tmp_path: Path) -> None:
    pdf = manual_pdf(tmp_path / "m.pdf")
    width, height = 595, 842
    box = (1, 72.0, 120.0, 520.0, 300.0)
    png = render_highlight(pdf, 1, [box, (2, 0, 0, 595, 842)], dpi=72)  # the page-2 box is ignored
    assert Image.open(io.BytesIO(png)).size == (width, height)
    inside = (box[1] / width, box[2] / height, box[3] / width, box[4] / height)
    assert yellow_share(png, inside) > 0.5
    assert yellow_share(png, (0, 0.5, 1, 1)) == 0  # the lower half is not highlighted
    assert yellow_share(render_highlight(pdf, 1, [], dpi=72)) == 0
    assert pymupdf.open(pdf)[0].get_text() == pymupdf.open(pdf)[0].get_text()  # the file is not written


def test_render_highlight_close_up_crops_to_the_passage(tmp_path: Path) -> None:
    pdf = manual_pdf(tmp_path / "m.pdf")
    png = render_highlight(pdf, 1, [(1, 72.0, 120.0, 520.0, 300.0)], dpi=72, around=20)
    # The box, padded by 2 pt, and 20 pt around it.
    assert Image.open(io.BytesIO(png)).size == (448 + 2 * 2 + 2 * 20, 180 + 2 * 2 + 2 * 20)
    assert yellow_share(png) > 0.3


def test_render_highlight_marks_only_the_paragraphs_the_answer_quotes(tmp_path: Path) -> None:
    """A passage of several paragraphs is highlighted only where the answer quotes it, not whole."""
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    page.insert_text((72, 100), "Packages may be distributed in source form.", fontsize=11)
    page.insert_text((72, 500), "Use the environment variable R_LIBS_USER for a personal library.", fontsize=11)
    doc.save(tmp_path / "p.pdf")
    boxes = [(1, 70.0, 85.0, 400.0, 105.0), (1, 70.0, 485.0, 460.0, 505.0)]
    quote = "Use the environment variable R_LIBS_USER for a personal library."
    png = render_highlight(tmp_path / "p.pdf", 1, boxes, dpi=72, quoted=[quote])
    assert yellow_share(png, (0, 0.5, 1, 1)) > 0 and yellow_share(png, (0, 0, 1, 0.4)) == 0
    unquoted = render_highlight(tmp_path / "p.pdf", 1, boxes, dpi=72, quoted=["A sentence from no page at all."])
    assert yellow_share(unquoted, (0, 0, 1, 0.4)) > 0, "no region holds the quote: every region is highlighted"


def test_render_highlight_on_a_rotated_page(tmp_path: Path) -> None:
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    page.insert_text((72, 100), "ROTATED TEXT", fontsize=20)
    page.set_rotation(90)
    doc.save(tmp_path / "r.pdf")
    words = pymupdf.open(tmp_path / "r.pdf")[0].get_text("words")
    x0, y0, x1, y1 = words[0][:4]
    png = render_highlight(tmp_path / "r.pdf", 1, [(1, x0, y0, x1, y1)], dpi=72)
    image = Image.open(io.BytesIO(png)).convert("RGB")
    assert image.width == 842  # the page as it is shown, turned
    # Turned a quarter clockwise, text near the top-left corner lands near the right edge, and the
    # highlight lies over the word's ink.
    yellow = [(x, y) for (x, y) in _pixels(image) if _is_yellow(image.getpixel((x, y)))]
    ink = [(x, y) for (x, y) in _pixels(image) if sum(image.getpixel((x, y))) < 200]
    assert min(x for x, _ in yellow) > 700 and min(x for x, _ in ink) > 700
    yx0, yx1 = min(x for x, _ in yellow), max(x for x, _ in yellow)
    yy0, yy1 = min(y for _, y in yellow), max(y for _, y in yellow)
    assert any(yx0 <= x <= yx1 and yy0 <= y <= yy1 for x, y in ink)
    close_up = render_highlight(tmp_path / "r.pdf", 1, [(1, x0, y0, x1, y1)], dpi=72, around=10)
    assert Image.open(io.BytesIO(close_up)).height > Image.open(io.BytesIO(close_up)).width  # the word runs down


def _pixels(image: Image.Image):
    return ((x, y) for y in range(image.height) for x in range(image.width))


def _is_yellow(rgb: tuple[int, int, int]) -> bool:
    r, g, b = rgb
    return r > 230 and g > 200 and b < 190


def test_render_highlight_of_a_missing_page(tmp_path: Path) -> None:
    with pytest.raises(PDFError, match="has no page 9"):
        render_highlight(manual_pdf(tmp_path / "m.pdf"), 9, [])


# ---------------------------------------------------------------------------------------------
# The sample PDF that ships in Files/


def test_the_sample_pdf_parses_in_both_languages_and_the_script_makes_it(tmp_path: Path) -> None:
    parsed = PyMuPDFParser().parse(SAMPLE)
    text = "\n".join(b.text for b in parsed.blocks)
    assert parsed.pages >= 2 and not parsed.warnings
    assert "CRAG Knowledge Base: User Guide" in text and "Rebuild knowledge base" in text
    assert "用户指南" in text and "重建知识库" in text
    assert sum(b.type == "table" for b in parsed.blocks) == 2  # the actions table, in each language
    assert SAMPLE.stat().st_size < 200_000

    spec = importlib.util.spec_from_file_location("make_sample_pdf", ROOT / "scripts" / "make_sample_pdf.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    fresh = script.make_sample_pdf(tmp_path / "guide.pdf")
    assert fresh.read_bytes() == SAMPLE.read_bytes()  # the committed file is what the script makes


def test_specific_terms_are_ticked_only_against_retrieved_passages() -> None:
    from crag.types import Chunk, ScoredChunk, TermCheck, Trace
    from ui.answer import key_terms

    terms = TermCheck(("CRAN", "bzip2"), missing=("bzip2",))
    assert key_terms(Trace(question="q", standalone_question="q", terms=terms)) == (
        "Specific terms of the question: “CRAN”, “bzip2” (not in the retrieved passages)"
    )
    hit = ScoredChunk(chunk=Chunk(id="c0", text="CRAN is the archive.", file="m.pdf", pages=(1,)), score=0.9)
    assert "“CRAN” ✓" in key_terms(Trace(question="q", standalone_question="q", retrieved=(hit,), terms=terms))
    # A passage searched for by the missing term: still missing from what the question found, and said so.
    again = ScoredChunk(
        chunk=Chunk(id="c1", text="bzip2 -k keeps the input.", file="m.pdf", pages=(2,)), score=0.3, anchor="bzip2"
    )
    assert key_terms(Trace(question="q", standalone_question="q", retrieved=(hit, again), terms=terms)).endswith(
        "“bzip2” (not in the passages found for the question; searched for again)"
    )


def test_an_evidence_answer_shows_quotes_as_block_quotes_after_their_faq_question() -> None:
    from crag.parts import Lead, Quote
    from ui.text import page_blocks

    parts = [
        Lead(text="文档中的相关内容："),
        Quote(text="使用 indentfirst 宏包：\\usepackage{indentfirst}", n=1, faq="36 如何使首段段首也缩进？"),
        Quote(text="*Plain* text.", n=2),
        Quote(text="Is it? “Yes” it is.", n=3, faq="37 如何使用“甲”命令？"),
    ]
    assert page_blocks(parts)[0].split("\n\n") == [
        "**文档中的相关内容：**",
        "> *36 如何使首段段首也缩进？* “使用 indentfirst 宏包：\\\\usepackage\\{indentfirst\\}” \\[1\\]",
        "> “\\*Plain\\* text\\.” \\[2\\]",
        "> *37 如何使用“甲”命令？* “Is it? “Yes” it is\\.” \\[3\\]",
    ], "a question that quotes words itself stays whole, and a quote holding a question stays a quote"


def test_a_web_address_in_a_quote_links_to_that_address_without_the_closing_punctuation() -> None:
    """A quoted "…from http://binaries.html-tidy.org/.”" links to the address, not to ".../.%E2%80%9D"."""
    from crag.parts import Lead, Quote
    from ui.text import page_blocks

    parts = [
        Lead(text="From your documents:"),
        Quote(text="It can be installed from http://binaries.html-tidy.org/.", n=1),
    ]
    assert page_blocks(parts)[0].split("\n\n")[1] == (
        "> “It can be installed from <http://binaries.html-tidy.org/>\\.” \\[1\\]"
    )


def test_a_web_address_a_pdf_split_in_two_is_no_link_to_its_first_half() -> None:
    """A line break inside an address leaves its halves apart in the quote (R Data Import/Export has "https://CRAN.
    R-project.org/" and "https://www.oracle. com"): no link to "https://CRAN" or "https://www.oracle", which lead
    nowhere or elsewhere; whole addresses, IP addresses included, are still links."""
    from ui.text import md_linked

    assert md_linked("see http://www. r-project.org/") == "see http\\://www\\. r\\-project\\.org/"
    assert "<" not in md_linked("from https://CRAN. R-project.org/ or https://www.oracle. com, and")
    assert "<" not in md_linked("at https://cran.r-project.org/web/ packages/foreign/ there")
    assert md_linked("at https://192.168.1.2:8000/doc.") == "at <https://192.168.1.2:8000/doc>\\."
    assert md_linked("see https://r-project.org/ for more. And") == "see <https://r-project.org/> for more\\. And"


def test_a_command_in_our_message_is_code_and_the_rest_stays_literal() -> None:
    """The empty knowledge base's answer shows its command as code, never the backticks around it."""
    from ui.text import md_coded

    message = "Build it (`python -m crag index`); your documents never mention “*CSV*”."
    assert md_coded(message) == "Build it \\(`python -m crag index`\\); your documents never mention “\\*CSV\\*”\\."
    assert md_coded("an odd ` backtick") == "an odd \\` backtick"
    # What a message quotes is the user's or a model's: its backticks are no code, nor pair with ours.
    quoted = "A web search for “`rm -rf` tips” found nothing; check `ollama serve`."
    assert md_coded(quoted) == "A web search for “\\`rm \\-rf\\` tips” found nothing; check `ollama serve`\\."


def test_a_failed_file_is_named_once() -> None:
    from ui.text import file_reason

    assert file_reason("broken.pdf", "broken.pdf: corrupt or truncated PDF.") == "corrupt or truncated PDF."
    assert file_reason("a.pdf", "") == "failed"


def test_an_answer_cut_off_by_a_reload_says_so_in_the_question_language() -> None:
    """A Chinese question reloaded mid-answer is told so in Chinese, in one wording."""
    from ui.text import stopped

    assert stopped("tlmgr 如何安装单个宏包？").startswith("这个回答没有完成")
    assert stopped("How do I install a package?").endswith("ask again.")


def test_a_stop_is_told_by_its_kind_not_by_its_words() -> None:
    from crag.conversations import Message, Stop
    from ui.text import stop_of, user_stopped

    assert (
        stop_of(Message(id=1, role="assistant", content="", complete=False, error="Halted.", stop=Stop.USER))
        is Stop.USER
    )
    reloaded = Message(
        id=1, role="assistant", content="", complete=False, error=user_stopped("q"), stop=Stop.INTERRUPTED
    )
    assert stop_of(reloaded) is Stop.INTERRUPTED
    # A message stored before messages kept their stop says it in the Stop button's words only.
    for said in (True, False):
        old = Message(id=1, role="assistant", content="", complete=False, error=user_stopped("如何安装？", said=said))
        assert stop_of(old) is Stop.USER
    assert stop_of(Message(id=1, role="assistant", content="", complete=False, error="The model failed.")) is None


def test_chats_with_the_same_title_are_told_apart() -> None:
    """Two conversations opened with the same question are two buttons that differ."""
    from datetime import datetime

    from crag.conversations import Conversation
    from ui.text import chat_labels

    at = datetime(2026, 11, 24, 9, 5).timestamp()
    chats = [
        Conversation(id="a", title="How do I run R in batch mode?", created=at, updated=at),
        Conversation(id="b", title="Widget cores", created=at, updated=at),
        Conversation(id="c", title="How do I run R in batch mode?", created=at, updated=at + 3600),
        Conversation(id="d", title="How do I run R in batch mode?", created=at, updated=at),
    ]
    assert chat_labels(chats) == [
        "How do I run R in batch mode? · 2026\\-11\\-24 09\\:05",
        "Widget cores",
        "How do I run R in batch mode? · 2026\\-11\\-24 10\\:05",
        "How do I run R in batch mode? · 2026\\-11\\-24 09\\:05 \\(2\\)",
    ]


def test_each_retrieved_passage_is_labelled_with_its_number_in_the_answer() -> None:
    """The answer's [3] need not be the Retrieved table's #3: the table says which source each passage is, and
    whether the answer cites it."""
    from crag.parts import Lead, Quote
    from crag.types import Answer, AnswerKind, Source
    from ui.answer import source_labels

    sources = (
        Source(n=1, kind="local", text="a", file="a.pdf", pages=(1,), chunk_ids=("c7",)),
        Source(n=2, kind="local", text="b", file="b.pdf", pages=(2,), chunk_ids=("c2",)),
    )
    said = (Lead(text="From your documents:"), Quote(text="a", n=1, gap="\n"))
    answer = Answer(parts=said, backend="embedded", model="", sources=sources, kind=AnswerKind.EVIDENCE)
    assert source_labels(answer) == {"c7": "[1]", "c2": "[2] (not cited)"}


def test_an_exported_answer_is_named_after_its_question() -> None:
    from ui.text import export_name

    assert export_name("How do I run R in batch mode?", 30) == "answer-how-do-i-run-r-in-batch-mode.md"
    assert export_name("怎么用 tlmgr 更新所有宏包？", 31) == "answer-怎么用-tlmgr-更新所有宏包.md"
    assert export_name("？", 32) == "answer-32.md"
    assert export_name("Widget cores", "0a1b", "chat") == "chat-widget-cores.md"


def test_an_answer_about_a_document_shows_its_title_in_bold_and_its_outline_as_a_list() -> None:
    """The lines the core sets itself: an ask's heading and a document's title open in bold, an outline is a list;
    the PDF's own words in them are escaped like a quote's."""
    from crag.parts import Heading, Outline, Quote
    from ui.text import page_blocks

    entries = ((0, "1 Introduction (p. 5)"), (1, "1.1 Legalese (p. 5)"), (0, "2 R Basics (p. 7)"))
    parts = [
        Heading(text="How do I *plot*?", ask=1),
        Heading(text="R_FAQ", detail=" (R-FAQ.pdf, 52 pages). What it says it is:"),
        Quote(text="R is a system.", n=1),
        Outline(heading="Its outline (its bookmarks):", entries=entries),
    ]
    assert page_blocks(parts)[0].split("\n\n") == [
        "**1\\. How do I \\*plot\\*?**",
        "**R\\_FAQ** \\(R\\-FAQ\\.pdf, 52 pages\\)\\. What it says it is\\:",
        "> “R is a system\\.” \\[1\\]",
        "**Its outline \\(its bookmarks\\)\\:**",
        "- 1 Introduction \\(p\\. 5\\)\n  - 1\\.1 Legalese \\(p\\. 5\\)\n- 2 R Basics \\(p\\. 7\\)",
    ]
