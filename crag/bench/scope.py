"""Scoped retrieval at scale: p50 and p95 of a question asked in scopes of 1 %, 10 %, 90 % and 100 % of an index,
against the same question with no scope, at 10,000 and 100,000 passages.

    .venv/bin/python -m crag.bench.scope [--sizes 10000 100000] [--alternatives] [--out bench/results]

The index: the benchmark corpus's passages (real text, their real vectors from the built-in embedder) copied up to
each size, as ``crag.bench.scaleout`` does, and filed as documents of 50 passages in folders of known shares:
``g0/s00`` to ``g9/s99`` hold 1 % each, ``g0`` to ``g9`` 10 % each. It is written once, embedded, and kept in the
bench cache (``<cache>/scope-<size>``). The questions: the question set. A time is one ``Retriever.retrieve`` as the
app calls it (the pointer check, the question's vector, memoised beforehand, both halves of the index, fusion, the
hits' vectors fetched), top 5, in one process; the scopes take turns question by question, after a warm-up. A
scope's first question is timed apart: it resolves the scope and fetches the vectors of its passages from Chroma.

``--alternatives`` also times what ``crag.store.scoped`` chose against: the dense half with Chroma's own metadata
filter (``where``), and the lexical half with a BM25 index of the scope's passages alone.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from crag.config import load_settings
from crag.types import FileResult

SIZES = (10_000, 100_000)
DOC = 50  # passages per synthetic document
WARMUP = 5
SCOPES = {  # share of the index -> its folders
    "1 %": ["g0/s00"],
    "10 %": ["g0"],
    "90 %": [f"g{n}" for n in range(9)],
    "100 %": [f"g{n}" for n in range(10)],
}


def _percentiles(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {"p50_ms": round(statistics.median(values), 2), "p95_ms": round(values[int(0.95 * (len(values) - 1))], 2)}


def folder(row: int, size: int) -> str:
    """The folder of the passage at ``row``: its share of the index, by the hundredth."""
    share = row * 100 // size
    return f"g{share // 10}/s{share:02d}"


def scaled_index(cache: Path, size: int) -> Path:
    """The index of ``size`` passages, written once into the bench cache."""
    from crag.bench.scaleout import base_index
    from crag.store import Store

    if size % (100 * DOC):
        raise SystemExit(f"--sizes: a multiple of {100 * DOC}, so that no document straddles two folders")
    folder_path = cache / f"scope-{size}"
    done = Store(folder_path).active()
    if done is not None and done.chunks == size:
        return folder_path
    base = Store(base_index(cache / "scaleout-base")).reader()
    assert base is not None, "the benchmark builds its index first"
    vectors = dict(zip([c.id for c in base.chunks], base.vectors([c.id for c in base.chunks]), strict=True))
    writer = Store(folder_path).writer(base.generation.embedder, base.generation.dimension, base.generation.chunking)
    counts: dict[str, int] = {}
    for copy in range(math.ceil(size / len(base.chunks))):
        first = len(writer.chunks)
        chunks = [
            replace(c, id=f"{c.id}-x{copy}", file=f"{folder(first + n, size)}/doc{(first + n) // DOC:05d}.pdf")
            for n, c in enumerate(base.chunks[: size - first])
        ]
        writer.add(chunks, [vectors[c.id.rsplit("-x", 1)[0]] for c in chunks])
        for c in chunks:
            counts[c.file] = counts.get(c.file, 0) + 1
    writer.commit([FileResult(file=f, status="indexed", chunks=k) for f, k in sorted(counts.items())])
    return folder_path


def _time(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


def measure(db: Path, questions: list[str], alternatives: bool) -> dict[str, Any]:
    """Every question in every scope, in turn; then, if asked, the alternatives."""
    from crag.retriever import Retriever, index_embedder
    from crag.scope import EVERYTHING, Scope

    settings = load_settings(chroma_dir=db, embed_backend="local")
    embedder = index_embedder(settings)  # the one the index was built with
    embedder.embed(questions)  # memoised: the times are the index's
    retriever = Retriever(settings, embedder)
    scopes = {"none": EVERYTHING} | {name: Scope.of(paths) for name, paths in SCOPES.items()}
    retriever.retrieve(questions[0], 5)  # opens the index
    first = {name: round(_time(partial(retriever.retrieve, questions[0], 5, scope=s)), 1) for name, s in scopes.items()}
    times: dict[str, list[float]] = {name: [] for name in scopes}
    for n, question in enumerate(questions):
        for name, scope in scopes.items():
            took = _time(partial(retriever.retrieve, question, 5, scope=scope))
            if n >= WARMUP:
                times[name].append(took)
    reader = retriever.current()
    assert reader is not None, "the benchmark builds its index first"
    views = {name: reader.scoped(scope) for name, scope in scopes.items()}
    out: dict[str, Any] = {
        "chunks": reader.n_docs,
        "scope_chunks": {name: view.n_docs if view else reader.n_docs for name, view in views.items()},
        "first_ms": first,
        "retrieve": {name: _percentiles(values) for name, values in times.items()},
    }
    if alternatives:
        out["alternatives"] = compare(reader, embedder, questions[WARMUP : WARMUP + 40], scopes)
    return out


def compare(reader: Any, embedder: Any, questions: list[str], scopes: dict[str, Any]) -> dict[str, Any]:
    """The dense half with Chroma's ``where`` against the exact cosine, and the lexical half with a BM25 index of the
    scope alone against the mask, for the 1 % and 10 % scopes; question by question, in turn."""
    vectors = embedder.embed(questions)
    return {name: _alternatives(reader, scopes[name], questions, vectors) for name in ("1 %", "10 %")}


def _alternatives(reader: Any, scope: Any, questions: list[str], vectors: list[Any]) -> dict[str, Any]:
    from crag.store.generation import build_lexical
    from crag.text import lexical_tokens

    view = reader.scoped(scope)
    where = {"file": {"$in": sorted(view.files)}}
    start = time.perf_counter()
    own = build_lexical([reader.chunks[row] for row in view.rows])
    assert own is not None, "the scope holds passages"
    built = round(time.perf_counter() - start, 1)
    ways: dict[str, Callable[[str, Any], Any]] = {
        "dense_unscoped_hnsw": lambda q, v: reader.collection.query(query_embeddings=[v], n_results=20),
        "dense_chroma_where": lambda q, v: reader.collection.query(query_embeddings=[v], n_results=20, where=where),
        "dense_exact": lambda q, v: view.dense(v, 20),
        "lexical_unscoped": lambda q, v: reader.lexical(q, 20),
        "lexical_mask": lambda q, v: reader.lexical(q, 20, scope),
        "lexical_own_index": lambda q, v: own.retrieve(lexical_tokens(q), 20),
    }
    times: dict[str, list[float]] = {way: [] for way in ways}
    for question, vector in zip(questions, vectors, strict=True):
        for way, call in ways.items():
            times[way].append(_time(partial(call, question, vector)))
    return {way: _percentiles(values) for way, values in times.items()} | {"own_index_build_s": built}


def report(results: dict[str, Any]) -> str:
    names = ["none", *SCOPES]
    lines = [
        "# Scoped retrieval",
        "",
        f"{results['questions']} questions, hybrid top-5, `Retriever.retrieve` as the app calls it; p50 / p95 in ms.",
        "A scope's first question (it resolves the scope and fetches its vectors) is apart, in the last column.",
        "",
        "| passages | scope | passages in it | p50 / p95 ms | ratio to no scope (p50 / p95) | first question ms |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in results["rows"]:
        base = row["retrieve"]["none"]
        for name in names:
            got = row["retrieve"][name]
            ratio = f"{got['p50_ms'] / base['p50_ms']:.2f} / {got['p95_ms'] / base['p95_ms']:.2f}"
            lines.append(
                f"| {row['chunks']} | {name} | {row['scope_chunks'][name]} | {got['p50_ms']} / {got['p95_ms']} | "
                f"{ratio} | {row['first_ms'][name]} |"
            )
    for row in results["rows"]:
        for name, alt in row.get("alternatives", {}).items():
            shown = "; ".join(f"{way} {t['p50_ms']} / {t['p95_ms']}" for way, t in alt.items() if isinstance(t, dict))
            lines += ["", f"- {row['chunks']} passages, {name} scope (p50 / p95 ms, in turn): {shown}; an index of the "
                      f"scope alone built in {alt['own_index_build_s']} s."]  # fmt: skip
    return "\n".join(lines) + "\n"


def run(sizes: tuple[int, ...], out: Path, alternatives: bool) -> dict[str, Any]:
    from crag.bench.corpus import default_cache_dir
    from crag.bench.retrieval import load_questions

    questions = [q.question for q in load_questions()]
    results: dict[str, Any] = {"questions": len(questions) - WARMUP, "rows": []}
    for size in sizes:
        db = scaled_index(default_cache_dir(), size)
        row = measure(db, questions, alternatives)
        results["rows"].append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "scope.json").write_text(json.dumps(results, indent=1))
    (out / "scope.md").write_text(report(results))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crag.bench.scope", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--alternatives", action="store_true", help="also time Chroma's where and a BM25 per scope")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    print(report(run(tuple(args.sizes), args.out, args.alternatives)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
