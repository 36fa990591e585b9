"""Chunking along the layout, with a word counter so sizes are easy to reason about."""

from __future__ import annotations

import shutil

import pytest

from crag.ingest.chunking import LEADER_LINE, chunk_blocks, is_navigation, split_sentences
from crag.types import Block, ParsedPDF


def words(text: str) -> int:
    """One token per word, one per CJK character."""
    return sum(len(w) if "\u4e00" <= w[:1] <= "\u9fff" else 1 for w in text.split())


def parsed(*blocks: Block) -> ParsedPDF:
    return ParsedPDF(blocks=tuple(blocks), pages=max(b.page for b in blocks), parser="test", parser_version="1")


def block(type_: str, text: str, page: int = 1, order: int = 0, level: int = 0) -> Block:
    return Block(
        type=type_, text=text, page=page, bbox=(10.0, 10.0 * order, 100.0, 10.0 * order + 9), order=order, level=level
    )


def sentence(n: int, size: int = 10) -> str:
    return " ".join([f"s{n}w{i}" for i in range(size - 1)] + ["end."])


def test_sections_carry_the_heading_path_and_close_chunks() -> None:
    chunks = chunk_blocks(
        parsed(
            block("title", "1 Install", order=0, level=1),
            block("text", sentence(1), order=1),
            block("title", "1.1 Linux", order=2, level=2),
            block("text", sentence(2), order=3),
            block("title", "2 Use", order=4, level=1),
            block("text", sentence(3), order=5),
        ),
        "a.pdf",
        "abc",
        words,
        chunk_tokens=100,
    )
    assert [c.section for c in chunks] == ["1 Install", "1 Install > 1.1 Linux", "2 Use"]
    assert [c.text for c in chunks] == [sentence(1), sentence(2), sentence(3)]


def test_headers_and_footers_are_dropped() -> None:
    chunks = chunk_blocks(
        parsed(block("header", "ACME manual"), block("text", "Body.", order=1), block("footer", "Page 1", order=2)),
        "a.pdf",
        "abc",
        words,
    )
    assert [c.text for c in chunks] == ["Body."]
    assert chunks[0].block_types == ("text",)


def test_tables_of_contents_and_indexes_are_dropped() -> None:
    """Dot leaders to a page number say where, not what; text that merely has dots stays."""
    contents = (
        "|**1**<br>**Introduction**_. . . . . . . . . . ._ **1**|\n|---|---|\n"
        "|1.1|Legalese_. . . . . . . . . . . . . ._ 1|\n|1.2|What is Debian?<br>. . . . . . . .|12|"
    )
    chunks = chunk_blocks(
        parsed(
            block("title", "Contents", order=0, level=1),
            block("table", contents, order=1),
            block("text", "|17|CTEX套装的Basic和Full版本都有什么区别？. . . . . . . .|. . . . .<br>9|", order=2),
            block("text", "Quoting strings . . . . . . . . . . . . . 5, 8", order=3),
            block("title", "1 Introduction", order=4, level=1),
            block("text", "Wait.... the values are 1. 2. 3. 4 and ... ...\\footnotemark[1] here.", order=5),
        ),
        "a.pdf",
        "abc",
        words,
    )
    assert [(c.section, c.text) for c in chunks] == [
        ("1 Introduction", "Wait.... the values are 1. 2. 3. 4 and ... ...\\footnotemark[1] here.")
    ]


def test_size_limit_and_sentence_overlap() -> None:
    text = " ".join(sentence(n) for n in range(10))  # 100 words in one paragraph
    chunks = chunk_blocks(parsed(block("text", text)), "a.pdf", "abc", words, chunk_tokens=30, overlap=10)
    assert all(words(c.text) <= 30 for c in chunks)
    assert len(chunks) >= 4
    for previous, current in zip(chunks, chunks[1:], strict=False):
        last_sentence = split_sentences(previous.text)[-1]
        assert current.text.startswith(last_sentence), "neighbours share whole sentences"
    assert " ".join(dict.fromkeys(s for c in chunks for s in split_sentences(c.text))) == text


def test_table_stays_whole_with_its_caption() -> None:
    table = "| a | b |\n|---|---|\n" + "\n".join(f"| {i} | {i * i} |" for i in range(40))
    chunks = chunk_blocks(
        parsed(
            block("text", sentence(1), order=0),
            block("caption", "Table 3: squares", order=1),
            block("table", table, order=2),
            block("text", sentence(2), order=3),
        ),
        "a.pdf",
        "abc",
        words,
        chunk_tokens=20,
    )
    holding = [c for c in chunks if "| 39 | 1521 |" in c.text]
    assert len(holding) == 1 and "| 0 | 0 |" in holding[0].text, "the table is never split"
    assert holding[0].text.startswith("Table 3: squares\n\n| a | b |")
    assert holding[0].block_types == ("caption", "table")


def test_caption_after_a_table_joins_it() -> None:
    chunks = chunk_blocks(
        parsed(block("table", "| x |\n|---|\n| 1 |"), block("caption", "Table 1: one", order=1)),
        "a.pdf",
        "abc",
        words,
    )
    assert chunks[0].text == "| x |\n|---|\n| 1 |\n\nTable 1: one"


def test_equation_is_never_split() -> None:
    equation = r"E = m c^2 + \sum_{i=1}^{n} x_i " * 10
    chunks = chunk_blocks(
        parsed(block("text", sentence(1)), block("equation", equation, order=1)), "a.pdf", "abc", words, chunk_tokens=15
    )
    assert any(c.text == equation for c in chunks)


def test_chinese_is_split_on_chinese_punctuation() -> None:
    text = "第一句话在这里结束。" * 6 + "第二种说法也结束了！" * 6
    chunks = chunk_blocks(parsed(block("text", text)), "zh.pdf", "abc", words, chunk_tokens=30, overlap=0)
    assert len(chunks) >= 3
    assert all(c.text.endswith(("。", "！")) for c in chunks)
    assert "".join(c.text for c in chunks) == text


def test_chunk_spans_two_pages_with_both_bboxes() -> None:
    chunks = chunk_blocks(
        parsed(block("text", "End of page one.", page=1), block("text", "Start of page two.", page=2)),
        "a.pdf",
        "abc",
        words,
    )
    assert len(chunks) == 1
    assert chunks[0].pages == (1, 2)
    assert [b[0] for b in chunks[0].bboxes] == [1, 2]


def test_a_paragraph_that_goes_on_over_a_page_break_is_one_paragraph() -> None:
    """The CTeX FAQ breaks a page inside a word ("这个命" / "令会开始在新的一页上排版"): the layout gives two blocks,
    and chunks were cut between them, so a quote began with half a word. Without a full stop before the break
    and with a lower-case (or Chinese) start after it, the two blocks are one paragraph, fed page by page or not."""
    from crag.ingest.chunking import Chunker

    cut = " ".join(f"w{i}" for i in range(14))  # the page ends before its full stop
    blocks = [
        block("text", f"{sentence(1, 12)} {cut}", page=1),
        block("text", f"and goes on here to its end. {sentence(2, 12)}", page=2),
    ]
    chunks = chunk_blocks(parsed(*blocks), "a.pdf", "abc", words, chunk_tokens=30, overlap=8)
    whole = f"{cut} and goes on here to its end."
    assert any(whole in c.text for c in chunks), "the sentence cut by the page break is whole in a chunk"
    assert not any(c.text.startswith("and goes on") for c in chunks)
    assert {p for c in chunks if whole in c.text for p in c.pages} == {1, 2}
    chunker = Chunker("a.pdf", "abc", words, 30, 8, None)
    paged = chunker.add(blocks[:1]) + chunker.add(blocks[1:]) + chunker.finish()
    assert [c.text for c in paged] == [c.text for c in chunks]
    halves = block("text", "注意，不能用 \\clearpage 命令，这个命", page=1), block("text", "令会开始新的一页。", page=2)
    zh = chunk_blocks(parsed(*halves), "a.pdf", "abc", words)
    assert [c.text for c in zh] == ["注意，不能用 \\clearpage 命令，这个命令会开始新的一页。"]
    # A paragraph that ended, or a page that opens with a capital, is a new paragraph as before.
    for left, right in (("It ends here.", "and a new one"), ("No full stop", "Capital start")):
        apart = chunk_blocks(parsed(block("text", left, page=1), block("text", right, page=2)), "a.pdf", "abc", words)
        assert apart[0].text == f"{left}\n\n{right}"


def test_footnotes_wait_for_the_paragraph_they_interrupt() -> None:
    """A Chinese install guide ends a page on "接下来在 Terminal 中执行", sets three footnotes below it, and shows the
    command on the next page: the footnotes stood between the sentence and its command, and were quoted with it.
    They now follow once that paragraph has ended, fed page by page or not; a page that ended at a full stop keeps
    its footnotes where they were. A footnote's own mark is raised, as on the page ("⁴这里…")."""
    from crag.ingest.chunking import Chunker

    blocks = [
        block("text", "添加在 secure_path 中4。然后保存退出。接下来在 Terminal 中执行", page=1, order=1),
        block("footnote", "4这里只讨论默认安装的情况", page=1, order=2),
        block("code", "sudo tlmgr option repository ctan", page=2, order=1),
        block("text", "让系统自动选择源。", page=2, order=2),
        block("text", "可查看目前源上可升级的宏包。", page=2, order=3),
    ]
    chunks = chunk_blocks(parsed(*blocks), "a.pdf", "abc", words)
    assert [c.text for c in chunks] == [
        "添加在 secure_path 中4。然后保存退出。接下来在 Terminal 中执行\n\nsudo tlmgr option repository ctan\n\n"
        "让系统自动选择源。\n\n⁴这里只讨论默认安装的情况\n\n可查看目前源上可升级的宏包。"
    ]
    chunker = Chunker("a.pdf", "abc", words, 256, 32, None)
    paged = chunker.add(blocks[:2]) + chunker.add(blocks[2:]) + chunker.finish()
    assert [c.text for c in paged] == [c.text for c in chunks]
    # A paragraph cut by the page break is one paragraph, the footnotes between its halves notwithstanding.
    halves = [
        block("text", "这个命", page=1),
        block("footnote", "1 脚注", page=1),
        block("text", "令会开始新的一页。", page=2),
    ]
    assert [c.text for c in chunk_blocks(parsed(*halves), "a.pdf", "abc", words)] == [
        "这个命令会开始新的一页。\n\n¹ 脚注"
    ]
    ended = [
        block("text", "这一页结束了。", page=1),
        block("footnote", "1 脚注", page=1),
        block("text", "新的一页", page=2),
    ]
    assert chunk_blocks(parsed(*ended), "a.pdf", "abc", words)[0].text == "这一页结束了。\n\n¹ 脚注\n\n新的一页"
    # Only the note's mark is raised, not a number that opens its text.
    notes = [block("text", "完。", page=1)] + [block("footnote", t, page=1) for t in ("15原文是:", "2.4 节", "† Died")]
    assert chunk_blocks(parsed(*notes), "a.pdf", "abc", words)[0].text.split("\n\n")[1:] == [
        "¹⁵原文是:",
        "2.4 节",
        "† Died",
    ]


def test_ids_are_stable_and_carry_metadata() -> None:
    doc = parsed(block("title", "Intro", level=1), block("text", sentence(1), order=1))
    first = chunk_blocks(doc, "dir/a.pdf", "f00d" * 16, words)
    assert first == chunk_blocks(doc, "dir/a.pdf", "f00d" * 16, words)
    chunk = first[0]
    assert chunk.id.startswith("f00d") and chunk.file == "dir/a.pdf" and chunk.parser == "test"
    assert chunk.file_hash == "f00d" * 16 and chunk.section == "Intro"
    assert chunk.parser_version == "1"


# The embedder's window: heading path + text never exceed ``max_tokens`` -----------------------------


def fits(chunks, limit: int) -> bool:
    return all(words(c.section) + words(c.text) <= limit for c in chunks)


def test_heading_and_text_fit_the_window() -> None:
    heading = " ".join(f"h{i}" for i in range(12))  # a 12-word heading, 24 words as a path of two
    text = " ".join(sentence(n) for n in range(8))
    doc = parsed(
        block("title", heading, order=0, level=1),
        block("title", heading.upper(), order=1, level=2),
        block("text", text, order=2),
    )
    chunks = chunk_blocks(doc, "a.pdf", "abc", words, chunk_tokens=40, overlap=10, max_tokens=60)
    assert fits(chunks, 60) and chunks[0].section == f"{heading} > {heading.upper()}"
    assert max(words(c.text) for c in chunks) <= 60 - 24, "the heading's tokens come out of the text's share"
    assert " ".join(dict.fromkeys(s for c in chunks for s in split_sentences(c.text))) == text
    # Without a window the text alone fills chunk_tokens, as before.
    assert max(words(c.text) for c in chunk_blocks(doc, "a.pdf", "abc", words, chunk_tokens=40, overlap=10)) == 40


def test_a_heading_path_longer_than_half_the_window_keeps_its_innermost_headings() -> None:
    doc = parsed(
        block("title", " ".join(["outer"] * 30), order=0, level=1),
        block("title", "Inner", order=1, level=2),
        block("text", sentence(1), order=2),
    )
    (chunk,) = chunk_blocks(doc, "a.pdf", "abc", words, chunk_tokens=30, max_tokens=40)
    assert chunk.section == "Inner" and chunk.text == sentence(1)


def test_overlap_shrinks_rather_than_push_a_chunk_past_the_window() -> None:
    text = " ".join([sentence(0, 4), sentence(1, 4), sentence(2, 27), sentence(3, 4)])
    chunks = chunk_blocks(
        parsed(block("text", text)), "a.pdf", "abc", words, chunk_tokens=30, overlap=10, max_tokens=30
    )
    assert fits(chunks, 30)
    assert [words(c.text) for c in chunks] == [8, 27, 4], "no chunk of overlap alone, none over 30"


def test_a_table_larger_than_the_window_is_cut_between_rows() -> None:
    rows = [f"| {i} | {i * i} |" for i in range(40)]
    table = "| n | square |\n|---|---|\n" + "\n".join(rows)
    doc = parsed(
        block("title", "Squares", order=0, level=1),
        block("caption", "Table 3: squares", order=1),
        block("table", table, order=2),
    )
    chunks = chunk_blocks(doc, "a.pdf", "abc", words, chunk_tokens=20, max_tokens=60)
    assert len(chunks) > 1 and fits(chunks, 60)
    assert chunks[0].text.startswith("Table 3: squares\n\n| n | square |\n|---|---|\n| 0 | 0 |")
    assert all(c.text.startswith("| n | square |\n|---|---|\n") for c in chunks[1:]), "the header row on every piece"
    assert [r for c in chunks for r in c.text.split("\n") if r in rows] == rows, "every row once, in order"
    assert {c.block_types for c in chunks} == {("caption", "table")}
    # A table that fits the window stays whole, however small chunk_tokens is.
    assert len(chunk_blocks(doc, "a.pdf", "abc", words, chunk_tokens=20, max_tokens=400)) == 1


def test_an_html_table_and_an_equation_larger_than_the_window() -> None:
    html = "<table>" + "".join(f"<tr><td>row {i}</td><td>value {i}</td></tr>" for i in range(30)) + "</table>"
    equation = " + ".join(f"x_{i}" for i in range(60))
    doc = parsed(block("table", html), block("equation", equation, order=1))
    chunks = chunk_blocks(doc, "a.pdf", "abc", words, chunk_tokens=20, max_tokens=25)
    assert fits(chunks, 25)
    assert "".join(c.text for c in chunks if "table" in c.block_types) == html
    assert " ".join(c.text for c in chunks if "equation" in c.block_types) == equation


def test_chunks_fed_page_by_page_equal_those_of_the_whole_file() -> None:
    from crag.ingest.chunking import Chunker

    blocks = [
        block("title", "1 Intro", page=1, order=0, level=1),
        block("text", " ".join(sentence(n) for n in range(5)), page=1, order=1),
        block("caption", "Table 1: squares", page=1, order=2),
        block("table", "| a |\n|---|\n| 1 |", page=2, order=0),
        block("text", sentence(9), page=2, order=1),
        block("title", "2 Use", page=2, order=2, level=1),
        block("text", sentence(10), page=3, order=0),
    ]
    whole = chunk_blocks(parsed(*blocks), "a.pdf", "abc", words, chunk_tokens=30, overlap=10, max_tokens=45)
    chunker = Chunker("a.pdf", "abc", words, 30, 10, 45)
    paged = [c for page in (1, 2, 3) for c in chunker.add([b for b in blocks if b.page == page])] + chunker.finish()
    assert [(c.id, c.text, c.section, c.pages) for c in paged] == [(c.id, c.text, c.section, c.pages) for c in whole]
    assert any(c.text.startswith("Table 1: squares\n\n| a |") for c in whole), "a caption on the page before"


# Real text: the benchmark corpus, the built-in embedder's own tokenizer ------------------------------

# Pages whose text can overflow the chunk window: a table of contents read as a table (bzip2's page 3, left out of
# the chunks), a listing longer than the window (bzip2's page 18), and paragraphs under long Chinese and English
# heading paths.
REAL_PAGES = {
    "bzip2-manual.pdf": [3, 5, 11, 18],
    "ctex-faq.pdf": [1, 2, 9, 41],
    "asymptote-faq-zh-cn.pdf": [6],
    "debian-faq.en.pdf": [19, 20, 50, 51],
}


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("apt-get") is None, reason="the corpus comes from Debian packages (apt-get)")
def test_real_chunks_fit_the_window_with_their_heading() -> None:
    from crag.bench.corpus import default_cache_dir, fetch_corpus
    from crag.ingest.chunking import Chunker
    from crag.ingest.pymupdf import PyMuPDFParser
    from crag.models import USEEmbedder, count_tokens
    from crag.store import index_text

    pdfs = fetch_corpus(default_cache_dir())
    parser, window = PyMuPDFParser(), USEEmbedder.max_tokens
    assert window is not None
    for name, pages in REAL_PAGES.items():
        doc = parser.parse(pdfs[name], pages)
        chunks = chunk_blocks(doc, name, "f" * 64, count_tokens, 220, 32, max_tokens=window)
        sizes = [count_tokens(index_text(c)) for c in chunks]
        assert max(sizes) <= window, (name, max(sizes))
        everything = "\n".join(c.text for c in chunks)
        contents = [b for b in doc.blocks if b.type != "title" and is_navigation(b.text)]
        assert bool(contents) == (name in ("bzip2-manual.pdf", "ctex-faq.pdf")), name  # their pages 3 and 1
        assert not any(LEADER_LINE.search(line) for line in everything.split("\n"))
        for b in doc.blocks:
            if b.type in ("text", "list", "caption", "table") and b.text.strip() and b not in contents:
                for line in b.text.split("\n")[2:] if b.type == "table" else split_sentences(b.text):
                    assert line.strip() in everything, (name, b.page, line)  # nothing is lost on the way
        chunker = Chunker(name, "f" * 64, count_tokens, 220, 32, window)
        paged = [c for p in pages for c in chunker.add([b for b in doc.blocks if b.page == p])] + chunker.finish()
        assert [(c.text, c.section) for c in paged] == [(c.text, c.section) for c in chunks]
    # Without the window, the same pages overflow: the test would catch a regression.
    doc = parser.parse(pdfs["bzip2-manual.pdf"], [18])
    assert max(count_tokens(index_text(c)) for c in chunk_blocks(doc, "b", "f" * 64, count_tokens, 220, 32)) > window


def test_code_keeps_its_lines_and_glyphs_that_are_not_text_are_dropped_whatever_the_parser() -> None:
    """A listing cut into two boxes is one code block, its lines one below the other in the chunk, also when it is too
    long for one chunk; a symbol font's private-use glyphs and U+FFFD leave every parser's text (MinerU, OCR too)."""
    listing = [f"x{i} <- read.table(file{i}, header = TRUE)" for i in range(6)]
    chunks = chunk_blocks(
        parsed(
            block("text", "To read the files, type: \ufffd \ue000\ue001"),
            block("code", "\n".join(listing[:3]), order=1),
            block("code", "\n".join(listing[3:]), order=2),
            block("text", "不过 FAQ 随版本变动不大\ufffd。R2 = 1 − \U000f0001i Ri2", order=3),
        ),
        "f.pdf",
        "0" * 16,
        words,
    )
    text = "\n\n".join(c.text for c in chunks)
    assert "\n".join(listing) in text
    assert "To read the files, type:\n\n" in text and "不过 FAQ 随版本变动不大。R2 = 1 − i Ri2" in text
    small = chunk_blocks(parsed(block("code", "\n".join(listing))), "f.pdf", "0" * 16, words, 64, 8, max_tokens=16)
    assert len(small) > 1 and all(set(c.text.split("\n")) <= set(listing) for c in small)
    assert any(len(c.text.split("\n")) > 1 for c in small), "a piece carried over as overlap goes below, not beside"
