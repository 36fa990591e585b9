"""Thresholds fitted to a user's ratings, measured out of sample, through the HTTP API.

    python -m crag.bench.ratings [--db DIR] [--out DIR]

The knowledge base is the dev and test documents in one folder, ``manuals`` (a scope), the default offline answers
(embedded backend, evidence answers, similarity grader, web search off). The test split's questions (in and out of
scope, English, Chinese and cross-lingual) are dealt by the SHA-256 of their id, before any is asked: the first
``FIT`` are asked through ``POST /ask`` and rated through ``POST /feedback`` as a user who knows the key fact would
rate them (``rate``), the next ``HELD_OUT`` are the held-out set. Then:

1. the fit (``crag.calibration.fit``) on the rated answers, as the Evaluate page and ``crag evaluate`` make it;
2. the held-out questions asked with the settings' thresholds, and again with the fitted thresholds applied to the
   scope (applied whether or not the ratings support them, to report both figures), each answer judged by the same
   rule (``crag.feedback.targets``): the verdict accuracy of each, out of sample;
3. a document removed and the knowledge base rebuilt: the rated questions asked again (``crag.feedback.rerun``),
   those whose answer cited it should change, the others stay the same.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crag.bench.answers import build, has_key_fact
from crag.bench.corpus import default_cache_dir, fetch_corpus
from crag.bench.retrieval import Question, load_questions
from crag.calibration import Thresholds, best_fit, fit
from crag.config import Settings, load_settings
from crag.feedback import Rating, Wrong, rerun, targets
from crag.parts import row_line
from crag.types import Action

FIT = 40  # questions asked and rated to fit on
HELD_OUT = 40  # questions of the same documents, kept to measure on
SCOPE = "manuals"
REMOVED = "bzip2-manual.pdf"  # the document taken away before the re-run


def deal(questions: Sequence[Question]) -> tuple[list[Question], list[Question]]:
    """The fit set and the held-out set: the test split in the order of the SHA-256 of each id, chosen before any
    question is asked."""
    ordered = sorted((q for q in questions if q.split == "test"), key=lambda q: hashlib.sha256(q.id.encode()).digest())
    return ordered[:FIT], ordered[FIT : FIT + HELD_OUT]


def rate(question: Question, out: dict[str, Any]) -> tuple[Rating, tuple[Wrong, ...]]:
    """How a user who knows the key fact rates an answer: 👍 when it quotes the key fact under a badge that does not
    say the documents have nothing (or, out of scope, when it says so); otherwise 👎, with what was wrong."""
    action = out["action"]
    if not question.in_kb:
        return (Rating.UP, ()) if action == "incorrect" else (Rating.DOWN, (Wrong.BADGE, Wrong.ANSWER))
    said = quoted_text(out["parts"]) if out["kind"] == "evidence" else out["answer"]
    if has_key_fact(said, question.must_contain):
        return (Rating.UP, ()) if action != "incorrect" else (Rating.DOWN, (Wrong.BADGE,))
    return Rating.DOWN, (Wrong.ANSWER, Wrong.BADGE) if action == "correct" else (Wrong.ANSWER,)


def quoted_text(parts: Sequence[dict[str, Any]]) -> str:
    """What an answer's parts (the contract's) quote: each quote's sentences, each code block, each table's rows."""
    said: list[str] = []
    for part in parts:
        if part["kind"] in ("quote", "code"):
            said.append(part["text"])
        elif part["kind"] == "table":
            said += [row_line(row) for row in [part["header"], *part["rows"]]]
    return "\n".join(said)


def right(question: Question, out: dict[str, Any]) -> bool:
    """Whether the answer's verdict was right, by the rating ``rate`` gives it."""
    rating, wrong = rate(question, out)
    return Action(out["action"]) in targets(rating, wrong, Action(out["action"]))


def ask_all(client: Any, questions: Sequence[Question]) -> list[dict[str, Any]]:
    outs = []
    for q in questions:
        r = client.post("/ask", json={"question": q.question, "scope": [SCOPE]})
        assert r.status_code == 200, r.text
        outs.append(r.json())
    return outs


def composition(questions: Sequence[Question]) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for q in questions:
        key = f"{q.kind}-{'in' if q.in_kb else 'out'}"
        kinds[key] = kinds.get(key, 0) + 1
    return dict(sorted(kinds.items()))


def held_out_figures(client: Any, store: Any, held: Sequence[Question], fitted: Thresholds) -> dict[str, Any]:
    """The held-out questions' verdict accuracy with the settings' thresholds and with ``fitted`` applied."""
    default = ask_all(client, held)
    store.apply_thresholds([SCOPE], fitted, Thresholds(-0.8, 0.55), 0, 0.0, 0.0)
    try:
        with_fit = ask_all(client, held)
    finally:
        store.revert_thresholds([SCOPE])

    def accuracy(outs: list[dict[str, Any]]) -> float:
        return round(sum(right(q, o) for q, o in zip(held, outs, strict=True)) / len(held), 4)

    return {
        "default_accuracy": accuracy(default),
        "fitted_accuracy": accuracy(with_fit),
        "actions_default": [o["action"] for o in default],
        "actions_fitted": [o["action"] for o in with_fit],
        "changed": sum(a["action"] != b["action"] for a, b in zip(default, with_fit, strict=True)),
    }


def after_removal(settings: Settings, store: Any) -> dict[str, Any]:
    """``REMOVED`` deleted and the knowledge base rebuilt; every rated question asked again."""
    from crag.ingest import sync
    from crag.pipeline import Pipeline
    from crag.retriever import index_embedder

    (settings.files_dir / SCOPE / REMOVED).unlink()
    sync(settings, index_embedder(settings))
    pipeline = Pipeline.from_settings(settings)
    rows = []
    for label in store.labels([SCOPE]):
        again = rerun(pipeline, label)
        cited = {file for file, _ in label.answered.pages}
        rows.append(
            {
                "question": label.answered.question,
                "cited_removed": f"{SCOPE}/{REMOVED}" in cited,
                "status": "same" if again.same else "changed",
                "changes": [c.value for c in again.changes],
            }
        )
    removed = [r for r in rows if r["cited_removed"]]
    others = [r for r in rows if not r["cited_removed"]]
    return {
        "cited_removed": len(removed),
        "cited_removed_changed": sum(r["status"] == "changed" for r in removed),
        "others": len(others),
        "others_same": sum(r["status"] == "same" for r in others),
        "rows": rows,
    }


def run(root: Path) -> dict[str, Any]:
    from fastapi.testclient import TestClient

    from crag.api import create_app
    from crag.conversations import Conversations, chats_file

    settings = load_settings(
        files_dir=root / "Files",
        chroma_dir=root / "db",
        parser="pymupdf",
        embed_backend="local",
        llm_backend="embedded",
        web_search=False,
        answer_mode="evidence",
        evaluator="similarity",
    )
    pdfs = fetch_corpus(default_cache_dir(), ("dev", "test"))
    (settings.files_dir / SCOPE).mkdir(parents=True, exist_ok=True)
    build(settings, {f"{SCOPE}/{name}": path for name, path in pdfs.items()})
    fit_set, held = deal(load_questions())
    store = Conversations(chats_file(settings))
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        return measure(client, store, settings, fit_set, held)


def measure(
    client: Any, store: Any, settings: Settings, fit_set: Sequence[Question], held: Sequence[Question]
) -> dict[str, Any]:
    ratings = []
    for q, out in zip(fit_set, ask_all(client, fit_set), strict=True):
        rating, wrong = rate(q, out)
        body = {"answer_id": out["answer_id"], "rating": rating.value, "wrong": [w.value for w in wrong]}
        assert client.post("/feedback", json=body).status_code == 200
        ratings.append({"id": q.id, "action": out["action"], "rating": rating.value, "wrong": body["wrong"]})
    current = Thresholds(settings.lower_threshold, settings.upper_threshold)
    labels = store.labels([SCOPE])
    found = fit(labels, current, (SCOPE,))
    measured = found.proposed or best_fit(labels, current)
    return {
        "fit_questions": [q.id for q in fit_set],
        "held_out_questions": [q.id for q in held],
        "composition": {"fit": composition(fit_set), "held_out": composition(held)},
        "ratings": ratings,
        "fit": {
            "verdict": found.verdict.value,
            "decided": found.decided,
            "current_accuracy": round(found.current_accuracy, 4),
            "cross_validated_accuracy": round(found.held_out_accuracy, 4),
            "proposed": vars(found.proposed) if found.proposed else None,
            "measured_thresholds": vars(measured),
        },
        "held_out": held_out_figures(client, store, held, measured),
        "rerun_after_removal": after_removal(settings, store),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crag.bench.ratings", description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, help="work in this folder (default: a temporary one)")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        results = run(args.db or Path(tmp))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ratings.json").write_text(json.dumps(results, ensure_ascii=False, indent=1), encoding="utf-8")
    print(json.dumps({k: v for k, v in results.items() if k not in ("ratings",)}, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
