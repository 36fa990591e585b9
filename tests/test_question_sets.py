"""The benchmark's question sets and documents: the holdout set stays apart from the dev and test splits."""

from __future__ import annotations

from pathlib import Path

from crag.bench.check_questions import check
from crag.bench.corpus import CORPUS, fetch_corpus
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
