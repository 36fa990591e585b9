"""The question sets and their documents: the holdout and newcomer sets stay apart from the dev and test splits."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from crag.bench.check_questions import (
    CATEGORIES,
    NEWCOMER,
    NEWCOMER_SPLITS,
    check,
    check_loader,
    check_newcomer,
    newcomer_counts,
    page_texts,
)
from crag.bench.corpus import CORPUS, default_cache_dir, fetch_corpus
from crag.bench.retrieval import HOLDOUT, load_questions


def _cache(tmp_path: Path) -> Path:
    """A cache that already holds every corpus PDF, so fetch_corpus never calls apt."""
    (tmp_path / "pdfs").mkdir()
    for name in CORPUS:
        (tmp_path / "pdfs" / name).write_bytes(b"%PDF-1.4\n")
    return tmp_path


def test_the_holdout_documents_come_only_when_asked_for(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    main = set(fetch_corpus(cache))
    everything = set(fetch_corpus(cache, ("dev", "test", "holdout")))
    assert main == {name for name, doc in CORPUS.items() if doc.split in ("dev", "test")}
    assert everything - main == {"R-lang.pdf", "texlive-zh-cn.pdf"}
    assert {CORPUS[name].lang for name in everything - main} == {"en", "zh"}


def test_the_holdout_set_asks_about_its_own_documents_only() -> None:
    holdout, main = load_questions(HOLDOUT), load_questions()
    assert {q.split for q in holdout} == {"holdout"}
    assert not {q.id for q in holdout} & {q.id for q in main}
    assert {q.file for q in holdout if q.in_kb} == {"R-lang.pdf", "texlive-zh-cn.pdf"}
    assert not {q.file for q in main} & {"R-lang.pdf", "texlive-zh-cn.pdf"}
    kinds = {(q.kind, q.in_kb, q.near_miss) for q in holdout}
    assert {("en", True, False), ("zh", True, False), ("cross", True, False)} <= kinds
    assert {("en", False, True), ("zh", False, True), ("en", False, False), ("zh", False, False)} <= kinds


def test_a_holdout_question_is_checked_against_its_own_document() -> None:
    row = {
        "id": "h-1", "lang": "en", "kind": "en", "question": "How is a promise evaluated?",
        "file": "R-lang.pdf", "pages": [2], "in_kb": True, "must_contain": ["lazy evaluation"],
        "near_miss": False, "missing_term": None, "split": "holdout",
    }  # fmt: skip
    texts = {"R-lang.pdf": ["Contents", "R uses lazy evaluation of arguments."]}
    assert check([row], texts, counts=False) == []
    assert check([{**row, "pages": [1]}], texts, counts=False) == [
        "h-1: must_contain 'lazy evaluation' is not on page(s) [1] of R-lang.pdf"
    ]
    assert check([{**row, "split": "test"}], texts, counts=False) == [
        "h-1: split is 'test', but R-lang.pdf is a holdout document"
    ]


NEWCOMER_ROWS = [json.loads(line) for line in NEWCOMER.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_the_newcomer_manuals_come_only_when_asked_for(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    others = set(fetch_corpus(cache, ("dev", "test", "holdout", "first")))
    newcomer = set(fetch_corpus(cache, NEWCOMER_SPLITS)) - set(fetch_corpus(cache))
    assert newcomer == {"gnuplot.pdf", "ctex.pdf"} and not newcomer & others
    assert {CORPUS[name].lang for name in newcomer} == {"en", "zh"}
    assert all(CORPUS[name].pages >= 100 for name in newcomer)


def test_the_newcomer_set_keeps_its_promises_and_its_own_manuals() -> None:
    assert newcomer_counts(NEWCOMER_ROWS) == []
    questions = load_questions(NEWCOMER)
    assert {q.split for q in questions} == {"newcomer"}
    in_kb_files = {q.file for q in questions if q.in_kb} | {p["file"] for q in questions for p in q.parts}
    assert in_kb_files == {"gnuplot.pdf", "ctex.pdf"}
    others = [*load_questions(), *load_questions(HOLDOUT)]
    assert not {q.id for q in questions} & {q.id for q in others}
    assert not {q.file for q in others} & in_kb_files
    two = [q for q in questions if q.category == "two-part"]
    assert all(len(q.parts) >= 2 for q in two) and any(len({p["file"] for p in q.parts}) == 2 for q in two)


def test_a_newcomer_line_is_checked_part_by_part() -> None:
    texts = {"gnuplot.pdf": ["gnuplot 5.4 An Interactive Plotting Program", "set logscale y; unset logscale"]}
    row = {
        "id": "nc-en-99", "lang": "en", "kind": "en", "question": "How do I log the y axis, and undo it?",
        "file": "gnuplot.pdf", "pages": [2], "in_kb": True, "must_contain": ["set logscale"], "near_miss": False,
        "missing_term": None, "split": "newcomer", "category": "two-part",
        "parts": [
            {"file": "gnuplot.pdf", "pages": [2], "must_contain": ["set logscale"]},
            {"file": "gnuplot.pdf", "pages": [2], "must_contain": ["unset logscale"]},
        ],
    }  # fmt: skip
    assert check_newcomer([row], texts, counts=False) == []
    wrong_page = {**row, "parts": [row["parts"][0], {**row["parts"][1], "pages": [1]}]}
    assert check_newcomer([wrong_page], texts, counts=False) == [
        "nc-en-99: part 2: must_contain 'unset logscale' is not on page(s) [1] of gnuplot.pdf"
    ]
    assert check_newcomer([{**row, "parts": row["parts"][:1]}], texts, counts=False) == [
        f"nc-en-99: a two-part question lists two parts or more, not {row['parts'][:1]!r}"
    ]
    document = {**row, "category": "document", "pages": [1], "must_contain": ["Interactive Plotting Program"]}
    del document["parts"]
    assert check_newcomer([document], texts, counts=False) == []
    assert check_newcomer([{**document, "pages": [2], "must_contain": ["set logscale"]}], texts, counts=False) == [
        "nc-en-99: a whole-document question lists the document's first page, which says what it is"
    ]
    assert check_newcomer([{**document, "category": "guess"}], texts, counts=False) == [
        f"nc-en-99: category must be one of {CATEGORIES}, not 'guess'"
    ]


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("apt-get") is None, reason="the corpus comes from Debian packages (apt-get)")
def test_the_newcomer_set_is_sound_against_its_pdfs() -> None:
    """Every string on its page of the real manuals, every near-miss term absent from the whole knowledge base."""
    texts = page_texts(fetch_corpus(default_cache_dir(), NEWCOMER_SPLITS))
    assert check_newcomer(NEWCOMER_ROWS, texts) == []
    assert check_loader(NEWCOMER) == []
