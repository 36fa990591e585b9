"""A smoke run of `crag bench --quick` on a tiny corpus: the output's shape, not its speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crag.bench.retrieval import Question
from crag.bench.run import run, summary
from tests.pdfs import manual_pdf

pytestmark = pytest.mark.integration


def test_quick_bench_writes_results_report_and_plots(tmp_path: Path, real_models) -> None:
    pdfs = {
        "widget.pdf": manual_pdf(tmp_path / "widget.pdf", topic="widget"),
        "zh.pdf": manual_pdf(tmp_path / "zh.pdf", topic="小部件", chinese=True),
    }
    questions = [
        Question("en-1", "en", "en", "How much memory does the widget need?", "widget.pdf", (1,), True),
        Question("zh-1", "zh", "zh", "小部件需要多少内存？", "zh.pdf", (1,), True),
        Question("x-1", "en", "cross", "How much memory does the 小部件 need?", "zh.pdf", (1,), True),
        Question("oos-1", "en", "en", "Who won the 1998 football world cup?", None, (), False),
    ]
    out = tmp_path / "results"
    results = run(out, quick=True, pdfs=pdfs, questions=questions)
    assert {p.name for p in out.iterdir()} == {"results.json", "report.md", "retrieval.png", "cost.png", "scaling.png"}
    assert json.loads((out / "results.json").read_text())["quick"] is True
    assert set(results["cost"]["summary"]) == {"ours", "ours-evidence", "seed-style"}
    ours, seed = results["cost"]["summary"]["ours"], results["cost"]["summary"]["seed-style"]
    assert seed["calls"] > ours["calls"] > 0, "the baseline spends a call per chunk and per strip"
    assert results["cost"]["summary"]["ours-evidence"]["calls"] == 0, "evidence answers call no model"
    assert set(results["retrieval"]["modes"]) >= {"dense", "lexical", "hybrid", "floor-plain-bm25"}
    assert [r["copies"] for r in results["scaling"]] == [1, 5]
    assert results["scaling"][1]["chunks"] == 5 * results["scaling"][0]["chunks"]
    assert results["answers"]["dev"]["in_kb"]["n"] == 3 and results["answers"]["dev"]["out_of_scope"]["n"] == 1
    assert results["answers"]["dev"]["answers_with_citation_problems"] == 0
    report = (out / "report.md").read_text()
    assert "seed-style" in report and "hit@5" in report and "Machine:" in report
    assert "time to first token" in summary(results)


def test_the_scope_benchmark_files_passages_in_folders_of_known_shares() -> None:
    from crag.bench.scope import DOC, SCOPES, folder

    size = 10_000
    folders = [folder(row, size) for row in range(size)]
    assert folders.count("g0/s00") == size // 100 and sum(f.startswith("g0/") for f in folders) == size // 10
    for start in range(0, size, DOC):  # a document's passages share one folder
        assert len(set(folders[start : start + DOC])) == 1
    assert SCOPES["100 %"] == sorted({f.split("/")[0] for f in folders})


def test_retrieval_scores_per_split() -> None:
    """Only the test split is out of sample: its figures are reported apart from the dev split's."""
    from crag.bench.retrieval import by_kind

    questions = [
        Question("en-1", "en", "en", "?", "a.pdf", (1,), True, split="dev"),
        Question("en-2", "en", "en", "?", "a.pdf", (1,), True, split="test"),
        Question("x-1", "zh", "cross", "?", "a.pdf", (1,), True, split="test"),
    ]
    scores = by_kind(questions, [1, None, 2])
    assert scores["en"] == {"n": 2, "hit@5": 0.5, "mrr@10": 0.5}
    assert scores["dev en"]["hit@5"] == 1.0 and scores["test en"]["hit@5"] == 0.0
    assert scores["test cross"] == {"n": 1, "hit@5": 1.0, "mrr@10": 0.5} and "dev cross" not in scores
    assert scores["test same-language"]["n"] == 1 and scores["same-language"]["n"] == 2
