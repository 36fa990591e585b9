"""Chunking along the layout, with a word counter so sizes are easy to reason about."""

from __future__ import annotations

from crag.ingest.chunking import chunk_blocks, split_sentences
from crag.types import Block, ParsedPDF


def words(text: str) -> int:
    """One token per word, one per CJK character."""
    return sum(len(w) if "\u4e00" <= w[:1] <= "\u9fff" else 1 for w in text.split())


def parsed(*blocks: Block) -> ParsedPDF:
    return ParsedPDF(tuple(blocks), max(b.page for b in blocks), "test", "1")


def block(type_: str, text: str, page: int = 1, order: int = 0, level: int = 0) -> Block:
    return Block(type_, text, page, (10.0, 10.0 * order, 100.0, 10.0 * order + 9), order, level)


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


def test_ids_are_stable_and_carry_metadata() -> None:
    doc = parsed(block("title", "Intro", level=1), block("text", sentence(1), order=1))
    first = chunk_blocks(doc, "dir/a.pdf", "f00d" * 16, words)
    assert first == chunk_blocks(doc, "dir/a.pdf", "f00d" * 16, words)
    chunk = first[0]
    assert chunk.id.startswith("f00d") and chunk.file == "dir/a.pdf" and chunk.parser == "test"
    assert chunk.file_hash == "f00d" * 16 and chunk.section == "Intro"
    assert chunk.parser_version == "1"
