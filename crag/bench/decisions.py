"""Decision quality: does the action trigger say Correct/Ambiguous for questions the documents answer,
and Incorrect for the ones they do not? Per evaluator, on the question set and the real corpus.

    python -m crag.bench.decisions [--out DIR] [--evaluators similarity,llm]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from crag.bench.corpus import default_cache_dir, fetch_corpus
from crag.bench.retrieval import Question, load_questions
from crag.config import Settings, load_settings
from crag.evaluator import Evaluator, LLMEvaluator, SimilarityEvaluator, Usage
from crag.ingest import sync
from crag.models import Embedder, build_chat_model, build_embedder, resolve_backend
from crag.pipeline import Retriever, decide_action
from crag.types import Action


def collect(
    settings: Settings, embedder: Embedder, questions: Sequence[Question], evaluators: dict[str, Evaluator], k: int
) -> list[dict]:
    """The evaluator scores of the top-k chunks for every question, with the time and calls each took."""
    retriever = Retriever(settings, embedder)
    rows = []
    for q in questions:
        hits = retriever.retrieve(q.question, k, settings.retrieval_mode)
        row = {"id": q.id, "kind": q.kind, "in_kb": q.in_kb, "scores": {}, "methods": {}, "seconds": {}, "calls": {}}
        for name, evaluator in evaluators.items():
            usage = Usage()
            start = time.perf_counter()
            grading = evaluator.grade(q.question, [h.chunk.text for h in hits], usage)
            row["seconds"][name] = round(time.perf_counter() - start, 3)
            row["scores"][name] = [g.score for g in grading.grades]
            row["methods"][name] = sorted({g.method for g in grading.grades})
            row["calls"][name] = usage.requests
        rows.append(row)
    return rows


def confusion(rows: Sequence[dict], name: str, upper: float, lower: float) -> dict:
    table = {group: {a.value: 0 for a in Action} for group in ("in_kb", "out_of_scope")}
    for row in rows:
        action = decide_action(row["scores"][name], upper, lower)
        table["in_kb" if row["in_kb"] else "out_of_scope"][action.value] += 1
    inside, outside = table["in_kb"], table["out_of_scope"]
    right = inside["correct"] + inside["ambiguous"] + outside["incorrect"]
    return {
        "matrix": table,
        "accuracy": round(right / max(len(rows), 1), 3),
        "in_kb_correct_rate": round(inside["correct"] / max(sum(inside.values()), 1), 3),
    }


def calibrate(rows: Sequence[dict], name: str) -> tuple[float, float]:
    """Thresholds on a 0.05 grid. An out-of-scope question called Correct is the costly error (it is
    answered from the wrong documents, with no web search), so none may be; then the best accuracy
    (an in-KB question called Incorrect loses its documents, which weighs like the out-of-scope
    errors); then the most in-KB Correct (fewest web searches); then the highest thresholds."""
    grid = [round(-1 + 0.05 * i, 2) for i in range(41)]

    def key(t: tuple[float, float]) -> tuple[int, float, float, float, float]:
        c = confusion(rows, name, *t)
        return (-c["matrix"]["out_of_scope"]["correct"], c["accuracy"], c["in_kb_correct_rate"], t[0], t[1])

    return max(((up, lo) for up in grid for lo in grid if lo <= up), key=key)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crag.bench.decisions", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--evaluators", default="similarity,llm")
    parser.add_argument("-k", type=int, default=5)
    args = parser.parse_args(argv)
    pdfs = fetch_corpus(default_cache_dir())
    with tempfile.TemporaryDirectory() as tmp:
        files = Path(tmp) / "Files"
        files.mkdir()
        for name, path in pdfs.items():
            (files / name).write_bytes(path.read_bytes())
        settings = load_settings(files_dir=files, chroma_dir=Path(tmp) / "db", parser="pymupdf")
        embedder = build_embedder(settings)
        sync(settings, embedder)
        scorer = SimilarityEvaluator(embedder)
        evaluators: dict[str, Evaluator] = {"similarity": scorer}
        backend = resolve_backend(settings)
        if "llm" in args.evaluators:
            model = build_chat_model(settings, backend)
            evaluators["llm"] = LLMEvaluator(model, scorer, timeout=settings.request_timeout)
        rows = collect(settings, embedder, load_questions(), evaluators, args.k)
    results = {"backend": f"{backend.name}: {backend.model}", "embedder": embedder.name, "k": args.k, "evaluators": {}}
    for name in evaluators:
        upper, lower = calibrate(rows, name)
        seconds = sorted(r["seconds"][name] for r in rows)
        results["evaluators"][name] = {
            "defaults": confusion(rows, name, settings.upper_threshold, settings.lower_threshold)
            | {"upper": settings.upper_threshold, "lower": settings.lower_threshold},
            "calibrated": confusion(rows, name, upper, lower) | {"upper": upper, "lower": lower},
            "median_seconds": seconds[len(seconds) // 2],
            "calls_per_question": sum(r["calls"][name] for r in rows) / len(rows),
            "fallbacks": sum(1 for r in rows if any(m.startswith("similarity (fallback") for m in r["methods"][name])),
        }
    results["rows"] = rows
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "decisions.json").write_text(json.dumps(results, ensure_ascii=False, indent=1), encoding="utf-8")
    print(json.dumps({k: v for k, v in results.items() if k != "rows"}, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
