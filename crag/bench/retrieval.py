"""Retrieval quality on real PDFs: hit@5 and MRR@10 per mode and per kind of question, against a naive floor.

A question is found at rank r when the r-th chunk comes from the expected file and covers one of the
expected pages. The floor is what a minimal RAG does: each page's plain text cut into fixed windows
of words, ranked by BM25.

    python -m crag.bench.retrieval [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crag.bench.corpus import default_cache_dir, fetch_corpus
from crag.config import Settings, load_settings
from crag.ingest import sync
from crag.ingest.pymupdf import page_texts
from crag.models import Embedder, build_embedder
from crag.retriever import Retriever
from crag.store import Mode, bm25_rank
from crag.text import lexical_tokens

QUESTIONS = Path(__file__).with_name("questions.jsonl")
HOLDOUT = QUESTIONS.with_name("holdout.jsonl")  # the fresh held-out set: answers.py --split holdout
NEWCOMER = QUESTIONS.with_name("newcomer.jsonl")  # two long manuals nobody here had used: answers.py --split newcomer
MODES: tuple[Mode, ...] = ("dense", "lexical", "hybrid")
FLOOR_WINDOW, FLOOR_STRIDE = 200, 150  # words


@dataclass(frozen=True, kw_only=True)
class Question:
    id: str
    lang: str
    kind: str  # en | zh | cross
    question: str
    file: str | None
    pages: tuple[int, ...]
    in_kb: bool
    must_contain: tuple[str, ...] = ()
    """Short strings (any one counts) an answer must contain; copied from the listed pages' text."""
    near_miss: bool = False
    """Out of scope, but about a real corpus topic and a term no corpus PDF mentions."""
    missing_term: str | None = None
    split: str = "dev"
    """``dev`` (questions on the dev documents) or ``test`` (held out for the final measurement)."""
    gap: tuple[str, ...] = ()
    """Paraphrase questions: the question's words that its document never uses in any form."""
    gap_kind: str = ""
    """derived | number | abbreviation | compound | everyday | segmentation"""
    category: str = ""
    """Newcomer questions: howto | document | two-part | cross | out-of-scope."""
    parts: tuple[dict[str, Any], ...] = ()
    """Two-part questions: each part's ``file``, ``pages`` and ``must_contain`` (any one string holds that part)."""


def load_questions(path: Path = QUESTIONS) -> list[Question]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            data = json.loads(line)
            lists = {k: tuple(data.get(k) or ()) for k in ("pages", "must_contain", "gap", "parts")}
            out.append(Question(**{**data, **lists}))
    return out


def first_hit(ranked: Sequence[tuple[str, Sequence[int]]], q: Question) -> int | None:
    """1-based rank of the first (file, pages) that holds the answer."""
    for rank, (file, pages) in enumerate(ranked, start=1):
        if file == q.file and set(pages) & set(q.pages):
            return rank
    return None


def score(ranks: Sequence[int | None]) -> dict[str, float]:
    n = len(ranks) or 1
    return {
        "n": len(ranks),
        "hit@5": round(sum(1 for r in ranks if r and r <= 5) / n, 3),
        "mrr@10": round(sum(1.0 / r for r in ranks if r and r <= 10) / n, 3),
    }


def by_kind(questions: Sequence[Question], ranks: Sequence[int | None]) -> dict[str, dict[str, float]]:
    """Scores per kind of question, over both splits and per split ("dev en", "test cross"): only the test
    split's figures are out of sample."""
    groups: dict[str, list[int | None]] = {}
    for q, r in zip(questions, ranks, strict=True):
        kinds = [q.kind] if q.kind == "cross" else [q.kind, "same-language"]
        for kind in kinds:
            groups.setdefault(kind, []).append(r)
            groups.setdefault(f"{q.split} {kind}", []).append(r)
    return {kind: score(rs) for kind, rs in sorted(groups.items())}


def plain_tokens(text: str) -> list[str]:
    """'Plain' BM25 tokens: lower-cased runs of word characters; a Chinese sentence is one token."""
    return re.findall(r"\w+", text.lower())


def floor_windows(pdfs: dict[str, Path]) -> list[tuple[str, int, str]]:
    """(file, page, text) windows of FLOOR_WINDOW words, FLOOR_STRIDE apart, per page."""
    windows = []
    for name, path in sorted(pdfs.items()):
        for page, text in enumerate(page_texts(path), start=1):
            words = text.split()
            for start in range(0, max(len(words) - FLOOR_WINDOW + FLOOR_STRIDE, 1), FLOOR_STRIDE):
                windows.append((name, page, " ".join(words[start : start + FLOOR_WINDOW])))
    return windows


def evaluate(settings: Settings, embedder: Embedder, pdfs: dict[str, Path], questions: Sequence[Question]) -> dict:
    """Index the PDFs into ``settings.chroma_dir`` (full build, then a one-file re-sync) and score every mode."""
    files = settings.files_dir
    files.mkdir(parents=True, exist_ok=True)
    for name, path in pdfs.items():
        shutil.copy(path, files / name)

    full = sync(settings, embedder, rebuild=True)
    pages = sum(f.pages for f in full.files if f.status == "indexed")
    touched = sorted(pdfs)[0]
    with (files / touched).open("ab") as fh:
        fh.write(b"\n% touched\n")  # new bytes, same document: only this file must be re-indexed
    incremental = sync(settings, embedder)

    asked = [q for q in questions if q.in_kb]
    retriever = Retriever(settings, embedder)
    results: dict[str, Any] = {"modes": {}, "latency_ms": {}}
    for mode in MODES:
        ranks, latencies = [], []
        for q in asked:
            start = time.perf_counter()
            hits = retriever.retrieve(q.question, 10, mode)
            latencies.append((time.perf_counter() - start) * 1000)
            ranks.append(first_hit([(h.chunk.file, h.chunk.pages) for h in hits], q))
        results["modes"][mode] = by_kind(asked, ranks)
        results["latency_ms"][mode] = {
            "p50": round(statistics.median(latencies), 1),
            "p95": round(sorted(latencies)[int(0.95 * (len(latencies) - 1))], 1),
        }
        results.setdefault("misses", {})[mode] = [q.id for q, r in zip(asked, ranks, strict=True) if not r or r > 5]

    windows = floor_windows(pdfs)
    texts = [w[2] for w in windows]
    for label, tokenize in (("floor-plain-bm25", plain_tokens), ("floor-bm25-jieba", lexical_tokens)):
        ranked = bm25_rank(texts, tokenize, [q.question for q in asked], 10)
        ranks = [
            first_hit([(windows[i][0], (windows[i][1],)) for i, _ in hits], q)
            for q, hits in zip(asked, ranked, strict=True)
        ]
        results["modes"][label] = by_kind(asked, ranks)

    results["ingest"] = {
        "files": len(pdfs),
        "pages": pages,
        "chunks": full.total_chunks,
        "full_build_s": full.seconds,
        "stage_seconds": full.stage_seconds,
        "pages_per_second_parse": full.pages_per_second,
        "incremental_touched": touched,
        "incremental_statuses": {f.file: f.status for f in incremental.files},
        "incremental_s": incremental.seconds,
        "incremental_over_full": round(incremental.seconds / full.seconds, 3) if full.seconds else None,
        "floor_windows": len(windows),
    }
    results["embedder"] = embedder.name
    results["questions"] = {"in_kb": len(asked), "by_kind": {k: v["n"] for k, v in results["modes"]["hybrid"].items()}}
    return results


def table(results: dict) -> str:
    kinds = [k for k in ("en", "zh", "same-language", "cross") if k in results["modes"]["hybrid"]]
    head = "| mode | " + " | ".join(f"{k} hit@5 | {k} MRR@10" for k in kinds) + " |"
    rule = "|---" * (1 + 2 * len(kinds)) + "|"
    rows = [
        f"| {mode} | " + " | ".join(f"{m[k]['hit@5']:.3f} | {m[k]['mrr@10']:.3f}" for k in kinds) + " |"
        for mode, m in results["modes"].items()
    ]
    return "\n".join([head, rule, *rows])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crag.bench.retrieval", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    pdfs = fetch_corpus(default_cache_dir())
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(files_dir=Path(tmp) / "Files", chroma_dir=Path(tmp) / "db", parser="pymupdf")
        embedder = build_embedder(settings)
        results = evaluate(settings, embedder, pdfs, load_questions())
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "retrieval.json").write_text(json.dumps(results, ensure_ascii=False, indent=1), encoding="utf-8")
    print(table(results))
    print(json.dumps(results["ingest"], ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
