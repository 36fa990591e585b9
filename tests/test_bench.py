"""A smoke run of `crag bench --quick` on a tiny corpus: the output's shape, not its speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crag.bench.retrieval import Question
from crag.bench.run import run, summary
from tests.pdfs import manual_pdf

pytestmark = pytest.mark.integration


@pytest.mark.slow
def test_quick_bench_writes_results_report_and_plots(tmp_path: Path, real_models) -> None:
    pdfs = {
        "widget.pdf": manual_pdf(tmp_path / "widget.pdf", topic="widget"),
        "zh.pdf": manual_pdf(tmp_path / "zh.pdf", topic="小部件", chinese=True),
    }
    questions = [
        Question(
            id="en-1",
            lang="en",
            kind="en",
            question="How much memory does the widget need?",
            file="widget.pdf",
            pages=(1,),
            in_kb=True,
        ),
        Question(
            id="zh-1", lang="zh", kind="zh", question="小部件需要多少内存？", file="zh.pdf", pages=(1,), in_kb=True
        ),
        Question(
            id="x-1",
            lang="en",
            kind="cross",
            question="How much memory does the 小部件 need?",
            file="zh.pdf",
            pages=(1,),
            in_kb=True,
        ),
        Question(
            id="oos-1",
            lang="en",
            kind="en",
            question="Who won the 1998 football world cup?",
            file=None,
            pages=(),
            in_kb=False,
        ),
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
        Question(id="en-1", lang="en", kind="en", question="?", file="a.pdf", pages=(1,), in_kb=True, split="dev"),
        Question(id="en-2", lang="en", kind="en", question="?", file="a.pdf", pages=(1,), in_kb=True, split="test"),
        Question(id="x-1", lang="zh", kind="cross", question="?", file="a.pdf", pages=(1,), in_kb=True, split="test"),
    ]
    scores = by_kind(questions, [1, None, 2])
    assert scores["en"] == {"n": 2, "hit@5": 0.5, "mrr@10": 0.5}
    assert scores["dev en"]["hit@5"] == 1.0 and scores["test en"]["hit@5"] == 0.0
    assert scores["test cross"] == {"n": 1, "hit@5": 1.0, "mrr@10": 0.5} and "dev cross" not in scores
    assert scores["test same-language"]["n"] == 1 and scores["same-language"]["n"] == 2


def _row(id: str, kind: str, action: str, key_fact: bool | None, **extra: object) -> dict:
    """A row of crag.bench.answers as an old run stored it (no category), plus whatever a newer one adds."""
    in_kb = key_fact is not None
    return {
        "id": id, "split": "newcomer", "kind": kind, "lang": "zh" if id.startswith("zh") else "en", "in_kb": in_kb,
        "near_miss": False, "action": action, "scores": [0.5], "graded_by": ["similarity"], "missing_terms": [],
        "answer_kind": "evidence", "gap_kind": "", "key_fact": key_fact, "hit@5": in_kb, "citation_problems": [],
        "unsupported": [], "first_token_s": 0.1, "total_s": 0.2, "cites": [1], "grounding": {}, **extra,
    }  # fmt: skip


def test_correct_without_the_key_fact_is_counted_per_kind_from_any_run() -> None:
    from crag.bench.answers import correct_without_key_fact

    rows = [
        _row("en-1", "en", "correct", False),  # a green badge on an answer without the fact
        _row("en-2", "en", "correct", True),
        _row("en-3", "en", "incorrect", False),  # refused: wrong, but not this failure
        _row("zh-1", "zh", "ambiguous", False),
        _row("x-1", "cross", "correct", False),
        _row("oos-1", "en", "correct", None),  # out of scope: not counted here
    ]
    assert correct_without_key_fact(rows) == {
        "en": {"n": 3, "count": 1, "rate": 0.333},
        "zh": {"n": 1, "count": 0, "rate": 0.0},
        "cross": {"n": 1, "count": 1, "rate": 1.0},
        "all": {"n": 5, "count": 2, "rate": 0.4},
    }


def test_newcomer_categories_are_scored_by_their_own_rules(tmp_path: Path) -> None:
    from crag.bench.answers import by_category, stored_figures, summarize

    document = {"category": "document", "file": "gnuplot.pdf"}
    rows = [
        _row("en-1", "en", "correct", True, category="howto", file="gnuplot.pdf"),
        _row("zh-1", "zh", "correct", False, category="howto", file="ctex.pdf"),
        # Names the document and quotes it; names it but quotes another file; quotes it without naming it.
        _row("en-2", "en", "correct", True, **document, names_document=True, cited_files=["gnuplot.pdf"]),
        _row("en-3", "en", "correct", True, **document, names_document=True, cited_files=["R-FAQ.pdf"]),
        _row("zh-2", "cross", "ambiguous", False, **document, names_document=False, cited_files=["gnuplot.pdf"]),
        _row("en-4", "en", "correct", True, category="two-part", parts_found=[True, True]),
        _row("zh-3", "zh", "correct", True, category="two-part", parts_found=[True, False]),
        _row("oos-1", "en", "incorrect", None, category="out-of-scope"),
        _row("oos-2", "en", "correct", None, category="out-of-scope"),
        _row("zh-oos", "zh", "incorrect", None, category="out-of-scope"),
    ]
    figures = by_category(rows)
    assert list(figures) == ["howto", "document", "two-part", "out-of-scope"]
    assert figures["howto"]["key_fact"] == 0.5 and figures["howto"]["correct_without_key_fact"] == 0.5
    assert figures["howto"]["en"]["key_fact"] == 1.0 and figures["howto"]["zh"]["key_fact"] == 0.0
    assert figures["document"]["document_pass"] == 0.333 and figures["document"]["en"]["document_pass"] == 0.5
    assert figures["document"]["names_document"] == 0.667 and figures["document"]["cites_document"] == 0.667
    assert figures["two-part"]["both_parts"] == 0.5 and figures["two-part"]["one_part_or_more"] == 1.0
    assert figures["out-of-scope"] == {
        "n": 3,
        "incorrect": 0.667,
        "en": {"n": 2, "incorrect": 0.5},
        "zh": {"n": 1, "incorrect": 1.0},
    }
    summary = summarize(rows)
    assert summary["by_category"] == figures
    assert summary["correct_without_key_fact"]["all"] == {"n": 7, "count": 1, "rate": 0.143}
    # The keys other tools read are all still there.
    assert {"questions", "in_kb", "out_of_scope", "answers_with_citation_problems", "grade_spread"} <= set(summary)
    assert summary["in_kb"]["key_fact"] == 0.714 and summary["out_of_scope"]["incorrect"] == 0.667

    old = [{k: v for k, v in r.items() if k not in ("category", "file", "names_document", "cited_files")} for r in rows]
    stored = tmp_path / "answers-test-old.json"
    stored.write_text(json.dumps({"split": "test", "run": "old", "summary": {}, "rows": old}))
    again = stored_figures(stored)
    assert again["correct_without_key_fact"] == summary["correct_without_key_fact"] and "by_category" not in again
