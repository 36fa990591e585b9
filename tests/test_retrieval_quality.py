"""Retrieval quality on real public PDFs (R FAQ, R Data Import/Export, CTeX FAQ) with the question set in
crag/bench/questions.jsonl. The PDFs come from Debian packages (apt-get download + dpkg -x), cached."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from crag.bench.corpus import default_cache_dir, fetch_corpus
from crag.bench.retrieval import evaluate, load_questions, table
from crag.config import load_settings
from crag.models import USEEmbedder

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("apt-get") is None, reason="the corpus comes from Debian packages (apt-get)"),
]
OUTPUT = Path(__file__).resolve().parent.parent / "test-output"


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    pdfs = fetch_corpus(default_cache_dir())
    root = tmp_path_factory.mktemp("quality")
    settings = load_settings(files_dir=root / "Files", chroma_dir=root / "db", parser="pymupdf")
    out = evaluate(settings, USEEmbedder(), pdfs, load_questions())  # the built-in embedder
    OUTPUT.mkdir(exist_ok=True)
    (OUTPUT / "retrieval.json").write_text(json.dumps(out, ensure_ascii=False, indent=1), encoding="utf-8")
    (OUTPUT / "retrieval.md").write_text(table(out) + "\n", encoding="utf-8")
    return out


def test_question_set_is_well_formed() -> None:
    questions = load_questions()
    assert len({q.id for q in questions}) == len(questions)
    kinds = {(q.kind, q.in_kb) for q in questions}
    assert {("en", True), ("zh", True), ("cross", True), ("en", False), ("zh", False)} <= kinds
    assert all(q.pages and q.file for q in questions if q.in_kb)


def test_hybrid_finds_the_page_for_85_percent(results: dict) -> None:
    hybrid = results["modes"]["hybrid"]
    assert hybrid["same-language"]["hit@5"] >= 0.85, table(results)
    assert hybrid["en"]["hit@5"] >= 0.85 and hybrid["zh"]["hit@5"] >= 0.85, table(results)


def test_hybrid_beats_the_naive_floors(results: dict) -> None:
    ours = results["modes"]["hybrid"]["same-language"]
    for floor in ("floor-plain-bm25", "floor-bm25-jieba"):
        theirs = results["modes"][floor]["same-language"]
        assert ours["hit@5"] >= theirs["hit@5"], table(results)
        assert ours["mrr@10"] > theirs["mrr@10"], table(results)


def test_incremental_sync_reindexes_only_the_touched_file(results: dict) -> None:
    ingest = results["ingest"]
    statuses = ingest["incremental_statuses"]
    assert statuses.pop(ingest["incremental_touched"]) == "indexed"
    assert set(statuses.values()) == {"unchanged"}
