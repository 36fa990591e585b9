"""The wording sets (out of sample, and their dev twins): their fields and counts, and a checker that catches a gap the
document does use."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from crag.bench.answers import WORDING_SETS
from crag.bench.check_questions import HOLDOUT, KEYS, QUESTIONS
from crag.bench.check_wording import (
    DOC_SPLITS,
    GAP_KINDS,
    PREFIX,
    PROMISES,
    SETS,
    Document,
    check_counts,
    check_rows,
    gap_hits,
    load,
)
from crag.bench.corpus import CORPUS, fetch_corpus
from crag.bench.retrieval import load_questions

SET_ROWS = {name: load(path) for name, path in SETS.items()}


def _row(**changes: object) -> dict:
    row = {
        "id": "p-en-01", "lang": "en", "kind": "en", "question": "How do I unpack a file?",
        "file": "bzip2-manual.pdf", "pages": [2], "in_kb": True, "must_contain": ["bunzip2"],
        "near_miss": False, "missing_term": None, "split": "paraphrase", "gap": ["unpack"], "gap_kind": "everyday",
    }  # fmt: skip
    return {**row, **changes}


TEXTS = {"bzip2-manual.pdf": ["Contents", "bunzip2 decompresses files compressed by bzip2."]}


@pytest.mark.parametrize("name", sorted(SETS))
def test_each_set_has_the_fields_and_ids_it_promises(name: str) -> None:
    rows = SET_ROWS[name]
    assert len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        assert set(KEYS) <= set(r) <= {*KEYS, "gap", "gap_kind"}, r["id"]
        assert re.fullmatch(rf"{PREFIX[name]}-{r['lang']}-\d\d", r["id"])
        assert (r["split"], r["kind"], r["in_kb"], r["near_miss"], r["missing_term"]) == (
            name,
            r["lang"],
            True,
            False,
            None,
        )
        assert CORPUS[r["file"]].split in DOC_SPLITS[name] and CORPUS[r["file"]].lang == r["lang"]
        assert 1 <= len(r["must_contain"]) <= 3 and r["pages"]
        if PROMISES[name].per_gap_kind or "gap" in r:
            assert r["gap_kind"] in GAP_KINDS and r["gap"], r["id"]
            assert all(g in r["question"] for g in r["gap"]), r["id"]


def test_the_sets_hold_the_counts_they_promise() -> None:
    assert check_counts(SET_ROWS) == []
    para = SET_ROWS["paraphrase"]
    assert {r["file"] for r in para} == {n for n, d in CORPUS.items() if d.split in ("test", "holdout")}
    assert {(r["lang"], r["gap_kind"]) for r in para} >= {("en", "derived"), ("zh", "segmentation")}
    assert check_counts({"paraphrase": para[:39], "first": []}) == [
        "counts: paraphrase questions is 39, at least 40 expected",
        *[f"counts: first questions in {lang} is 0, at least 10 expected" for lang in ("en", "zh")],
    ]


def test_the_dev_twins_ask_every_dev_document_and_hold_the_counts_they_promise() -> None:
    dev = {n for n, d in CORPUS.items() if d.split == "dev"}
    para, first = SET_ROWS["paraphrase-dev"], SET_ROWS["first-dev"]
    assert {r["file"] for r in para} == {r["file"] for r in first} == dev
    assert {r["gap_kind"] for r in para if r["lang"] == "en"} == set(GAP_KINDS) - {"segmentation"}
    assert {r["gap_kind"] for r in para if r["lang"] == "zh"} == set(GAP_KINDS) - {"derived"}
    assert check_counts({"paraphrase-dev": para[:29], "first-dev": []}) == [
        "counts: paraphrase-dev questions is 29, at least 30 expected",
        *[f"counts: first-dev questions in {lang} is 0, at least 8 expected" for lang in ("en", "zh")],
    ]
    one_kind = [{**r, "gap_kind": "number"} for r in para]
    assert "counts: paraphrase-dev questions with a derived gap is 0, at least 3 expected" in check_counts(
        {"paraphrase-dev": one_kind}
    )


@pytest.mark.parametrize("name", sorted(WORDING_SETS))
def test_each_set_loads_as_benchmark_questions_in_a_knowledge_base_that_holds_its_documents(name: str) -> None:
    assert set(WORDING_SETS) == set(SETS)
    questions = load_questions(SETS[name])
    assert len(questions) == len(SET_ROWS[name])
    assert {q.split for q in questions} == {name}
    assert {CORPUS[q.file].split for q in questions} <= set(DOC_SPLITS[name]) <= set(WORDING_SETS[name])


def test_the_sets_share_no_id_with_the_other_question_sets() -> None:
    ids = {r["id"] for rows in SET_ROWS.values() for r in rows}
    assert not ids & {r["id"] for path in (QUESTIONS, HOLDOUT) for r in load(path)}


def test_the_first_documents_come_only_when_asked_for(tmp_path: Path) -> None:
    (tmp_path / "pdfs").mkdir()
    for name in CORPUS:
        (tmp_path / "pdfs" / name).write_bytes(b"%PDF-1.4\n")
    first = {n for n, d in CORPUS.items() if d.split == "first"}
    assert first == {"R-intro.pdf", "lshort-zh-cn.pdf"}
    assert not first & set(fetch_corpus(tmp_path, ("dev", "test", "holdout")))
    assert first <= set(fetch_corpus(tmp_path, ("test", "holdout", "first")))


def test_a_sound_question_passes() -> None:
    assert check_rows("paraphrase", [_row()], TEXTS) == []


@pytest.mark.parametrize(
    ("gap", "text", "lang"),
    [
        ("compressing", "bzip2 compresses files.", "en"),  # same stem
        ("zip", "use gzip instead", "en"),  # inside a longer word
        ("3 by 3", "a 3-by-3 matrix", "en"),  # a phrase, other punctuation
        ("ff/fl", "the ffﬂ ligatures", "en"),  # NFKC undoes the ligature; the slash is dropped
        ("打包", "如何打 包软件", "zh"),  # PyMuPDF's spaces inside Chinese
        ("VM", "runs on a vm", "zh"),  # a Latin gap in a Chinese document is an English word
    ],
)
def test_a_gap_the_document_uses_in_some_form_is_flagged(gap: str, text: str, lang: str) -> None:
    assert gap_hits(gap, Document(text, lang))


@pytest.mark.parametrize(
    ("gap", "text", "lang"),
    [
        ("Norwegian", "Made in Norway.", "en"),
        ("3x3", "a 3 by 3 matrix", "en"),
        ("ff/fl ligatures", "the ff and fl ligatures", "en"),
        ("打包", "构建软件包", "zh"),
        ("箭头大小", "改变所有箭头的大小", "zh"),
    ],
)
def test_a_gap_the_document_never_uses_passes(gap: str, text: str, lang: str) -> None:
    assert gap_hits(gap, Document(text, lang)) is None


def test_the_checker_flags_a_used_gap_and_a_key_fact_off_its_page() -> None:
    used = _row(question="How do I decompress a file?", gap=["decompress"])
    assert check_rows("paraphrase", [used], TEXTS) == [
        "p-en-01: gap 'decompress' is used by bzip2-manual.pdf: a word with the stem 'decompress' is in the text"
    ]
    assert check_rows("paraphrase", [_row(pages=[1])], TEXTS) == [
        "p-en-01: must_contain 'bunzip2' is not on page(s) [1] of bzip2-manual.pdf"
    ]
    assert check_rows("paraphrase", [_row(gap=["extract"])], TEXTS) == [
        "p-en-01: gap 'extract' is not written in the question"
    ]


def test_the_checker_keeps_each_set_to_its_documents_and_language() -> None:
    texts = {**TEXTS, "R-intro.pdf": ["", "read.table()"], "texlive-zh-cn.pdf": ["tlmgr"]}
    first_doc = _row(file="R-intro.pdf", must_contain=["read.table()"])
    assert check_rows("paraphrase", [first_doc], texts) == [
        "p-en-01: file 'R-intro.pdf' is not a test/holdout document"
    ]
    assert check_rows("first", [{**first_doc, "id": "f-en-01", "split": "first"}], texts) == []
    cross = _row(file="texlive-zh-cn.pdf", pages=[1], must_contain=["tlmgr"], gap=["unpack"])
    assert check_rows("paraphrase", [cross], texts) == [
        "p-en-01: a en question on a zh document: these sets ask in the document's language"
    ]
    assert check_rows("paraphrase", [_row(), _row()], TEXTS) == ["p-en-01: duplicate id (2 lines)"]


def test_the_checker_keeps_the_dev_twins_to_the_dev_documents_and_their_ids() -> None:
    texts = {**TEXTS, "R-data.pdf": ["", "Function read.fwf reads fixed-width files."]}
    dev = _row(id="pd-en-01", split="paraphrase-dev", file="R-data.pdf", must_contain=["read.fwf"], gap=["unpack"])
    assert check_rows("paraphrase-dev", [dev], texts) == []
    assert check_rows("paraphrase", [{**dev, "id": "p-en-01", "split": "paraphrase"}], texts) == [
        "p-en-01: file 'R-data.pdf' is not a test/holdout document"
    ]
    assert check_rows("paraphrase-dev", [{**dev, "file": "bzip2-manual.pdf", "must_contain": ["bunzip2"]}], texts) == [
        "pd-en-01: file 'bzip2-manual.pdf' is not a dev document"
    ]
    assert check_rows("paraphrase-dev", [{**dev, "id": "p-en-01"}], texts) == [
        "p-en-01: lang must be in ('en', 'zh') and the id read pd-en-NN"
    ]
    no_gap = {k: v for k, v in dev.items() if k not in ("gap", "gap_kind")}
    assert check_rows("paraphrase-dev", [no_gap], texts) == ["pd-en-01: fields missing ['gap', 'gap_kind'], unknown []"]
    first = {**no_gap, "id": "fd-en-01", "split": "first-dev"}
    assert check_rows("first-dev", [first], texts) == []
