"""``python -m crag bench``: speed and quality side by side, in one run, on this machine.

Writes ``results.json``, ``report.md`` and PNG plots to the output folder. Every figure in the
report is read from ``results.json``; the report says how each was measured.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from crag.bench import answers, cost
from crag.bench.corpus import default_cache_dir, fetch_corpus
from crag.bench.retrieval import Question, evaluate, load_questions
from crag.config import Settings, load_settings
from crag.models import Embedder, embedded_chat
from crag.pipeline import Pipeline
from crag.retriever import Retriever
from crag.store import Store
from crag.types import FileResult

SCALES_FULL = (1, 2, 5, 10)
SCALES_QUICK = (1, 5)
QUICK_ANSWER_TOKENS = 64  # a quick run's written answers are short: it counts calls, its times are no figure


def machine() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
    }


def scaling(settings: Settings, embedder: Embedder, questions: list[str], scales: tuple[int, ...]) -> list[dict]:
    """Query latency as the index grows: the corpus' chunks copied n times (vectors reused, not re-embedded)."""
    reader = Store(settings.chroma_dir).reader()
    assert reader is not None, "the benchmark builds its index first"
    got = reader.collection.get(ids=[c.id for c in reader.chunks], include=["embeddings"])
    vectors = dict(zip(got["ids"], got["embeddings"], strict=True))
    rows = []
    for n in scales:
        with tempfile.TemporaryDirectory() as tmp:
            scaled = settings.model_copy(update={"chroma_dir": Path(tmp)})
            writer = Store(Path(tmp)).writer(embedder.name, embedder.dimension, reader.generation.chunking)
            counts: dict[str, int] = {}
            for copy in range(n):
                chunks = [replace(c, id=f"{c.id}-x{copy}", file=f"{c.file}#{copy}") for c in reader.chunks]
                writer.add(chunks, [vectors[c.id] for c in reader.chunks])
                for c in chunks:
                    counts[c.file] = counts.get(c.file, 0) + 1
            writer.commit([FileResult(file=f, status="indexed", chunks=k) for f, k in counts.items()])
            retriever = Retriever(scaled, embedder)
            for q in questions[:5]:  # warm caches (jieba, the embedder, Chroma's segments) before timing
                retriever.retrieve(q, 5, "hybrid")
            latencies = []
            for q in questions:
                start = time.perf_counter()
                retriever.retrieve(q, 5, "hybrid")
                latencies.append((time.perf_counter() - start) * 1000)
            latencies.sort()
            rows.append(
                {
                    "copies": n,
                    "chunks": len(reader.chunks) * n,
                    "p50_ms": round(statistics.median(latencies), 1),
                    "p95_ms": round(latencies[int(0.95 * (len(latencies) - 1))], 1),
                }
            )
    return rows


def run(
    out: Path, quick: bool = False, pdfs: dict[str, Path] | None = None, questions: list[Question] | None = None
) -> dict[str, Any]:
    """The whole benchmark; ``pdfs`` and ``questions`` default to the Debian corpus and its question set."""
    questions = questions or load_questions()
    pdfs = pdfs or fetch_corpus(default_cache_dir())
    results: dict[str, Any] = {"machine": machine(), "quick": quick}
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            files_dir=Path(tmp) / "Files",
            chroma_dir=Path(tmp) / "db",
            parser="pymupdf",
            llm_backend="embedded",
            embed_backend="local",
            web_search=True,  # the cost comparison swaps in an offline searcher: rewrites run, nothing is fetched
            **({"max_answer_tokens": QUICK_ANSWER_TOKENS} if quick else {}),
        )
        pipeline = Pipeline.from_settings(settings)
        embedder = pipeline.retriever.embedder
        results["model"] = {"chat": pipeline.backend.model, "backend": pipeline.backend.name, "embedder": embedder.name}
        results["corpus"] = {name: str(path) for name, path in pdfs.items()}

        t = time.perf_counter()
        retrieval = evaluate(settings, embedder, pdfs, questions)
        results["retrieval"] = retrieval
        results["ingestion"] = ingestion_figures(retrieval["ingest"])
        results["timing_s"] = {"retrieval": round(time.perf_counter() - t, 1)}

        in_kb = [q.question for q in questions if q.in_kb]
        t = time.perf_counter()
        results["scaling"] = scaling(settings, embedder, in_kb[:20], SCALES_QUICK if quick else SCALES_FULL)
        results["timing_s"]["scaling"] = round(time.perf_counter() - t, 1)

        t = time.perf_counter()
        rows = answers.run_questions(pipeline, questions)
        results["answers"] = {
            split: answers.summarize(group)
            for split in ("dev", "test")
            if (group := [r for r in rows if r["split"] == split])
        }
        results["answers"]["injection_filter"] = answers.injection_filter(settings)
        results["timing_s"]["answers"] = round(time.perf_counter() - t, 1)

        t = time.perf_counter()
        chat = embedded_chat(settings)
        sample = [(q.question, True) for q in questions if q.in_kb and q.kind == "en"][: 1 if quick else 8]
        sample += [(q.question, False) for q in questions if not q.in_kb][: 0 if quick else 4]
        results["cost"] = cost.compare(cost.offline_pipeline(pipeline), chat, sample, llm_grader=not quick)
        results["timing_s"]["cost"] = round(time.perf_counter() - t, 1)
    results["peak_memory_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)

    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, ensure_ascii=False, indent=1), encoding="utf-8")
    plots(results, out)
    (out / "report.md").write_text(report(results), encoding="utf-8")
    return results


def ingestion_figures(ingest: dict[str, Any]) -> dict[str, Any]:
    """The build's figures, from the retrieval benchmark's build of the corpus."""
    return {
        "pymupdf_pages_per_s": ingest["pages_per_second_parse"],
        "embed_chunks_per_s": round(ingest["chunks"] / ingest["stage_seconds"]["embed"], 1),
        "full_build_s": ingest["full_build_s"],
        "incremental_s": ingest["incremental_s"],
        "incremental_over_full": ingest["incremental_over_full"],
        "stage_seconds": ingest["stage_seconds"],
        "mineru_pages_per_s": None,  # needs a MinerU server (CRAG_MINERU_URL); none here
    }


def plots(results: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = results["retrieval"]["modes"]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    names = list(modes)
    ax.bar(names, [modes[m]["same-language"]["hit@5"] for m in names], color="#4C78A8")
    ax.set_ylim(0, 1)
    ax.set_ylabel("hit@5 (same-language questions)")
    ax.tick_params(axis="x", labelrotation=20)
    fig.tight_layout()
    fig.savefig(out / "retrieval.png", dpi=110)
    plt.close(fig)

    summary = results["cost"]["summary"]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.bar(list(summary), [summary[v]["first_token_s"] for v in summary], color=["#54A24B", "#72B7B2", "#E45756"])
    ax.set_ylabel("mean seconds to first token")
    fig.tight_layout()
    fig.savefig(out / "cost.png", dpi=110)
    plt.close(fig)

    scale = results["scaling"]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.plot([r["chunks"] for r in scale], [r["p50_ms"] for r in scale], marker="o", label="p50")
    ax.plot([r["chunks"] for r in scale], [r["p95_ms"] for r in scale], marker="o", label="p95")
    ax.set_xlabel("chunks in the index")
    ax.set_ylabel("hybrid query latency (ms)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "scaling.png", dpi=110)
    plt.close(fig)


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def report(r: dict) -> str:
    parts = [*_heading(r), *_cost(r), *_retrieval(r), *_ingestion(r), *_scaling(r), *_answers(r)]
    return "\n".join(parts) + "\n"


def _heading(r: dict) -> list[str]:
    m = r["machine"]
    return [
        "# CRAG knowledge base: benchmark report",
        "",
        f"Machine: {m['platform']}, {m['cpus']} CPUs, Python {m['python']}; run {m['date']}"
        + (" (quick run)" if r["quick"] else "")
        + ".",
        f"Model: {r['model']['chat']} ({r['model']['backend']}, llama.cpp in-process); "
        f"embeddings {r['model']['embedder']}.",
        "Corpus: " + ", ".join(r["corpus"]) + " (Debian packages r-doc-pdf and texlive-lang-chinese), "
        f"{r['retrieval']['ingest']['pages']} pages, {r['retrieval']['ingest']['chunks']} chunks; "
        f"{r['retrieval']['questions']['in_kb']} in-KB questions from crag/bench/questions.jsonl.",
        "",
    ]


def _cost(r: dict) -> list[str]:
    cost_ = r["cost"]
    return [
        "## CRAG cost: ours against a seed-style baseline",
        "",
        "Same retriever, index and model in one run. The baseline grades each of the k=5 chunks with its own LLM "
        "call, scores every strip with its own call, rewrites, then generates. Calls and tokens are counted by "
        "llama.cpp; time to first token is from the question to the first streamed answer token. Mean per question.",
        "",
        _table(
            ["variant", "LLM calls", "prompt tokens", "completion tokens", "first token (s)", "total (s)"],
            [
                [n, s["calls"], s["prompt_tokens"], s["completion_tokens"], s["first_token_s"], s["total_s"]]
                for n, s in cost_["summary"].items()
            ],
        ),
        "",
        "Baseline / ours (higher is better for us), over all sampled questions and over the in-KB ones only "
        "(an out-of-scope question costs us no answer call when nothing relevant is found):",
        "",
        _table(
            ["variant", "questions", "calls", "prompt tokens", "first token", "total"],
            [
                [n, group, x["calls"], x["prompt_tokens"], x["first_token_s"], x["total_s"]]
                for group, key in (("all", "baseline_over_ours"), ("in-KB", "in_kb_baseline_over_ours"))
                for n, x in cost_[key].items()
            ],
        ),
        "",
        "![cost](cost.png)",
        "",
    ]


def _retrieval(r: dict) -> list[str]:
    modes = r["retrieval"]["modes"]
    kinds = ["en", "zh", "same-language", "cross"]
    return [
        "## Retrieval quality",
        "",
        "hit@5: the expected file and page is among the top 5 chunks; MRR@10: mean reciprocal rank of the first "
        "such chunk. Floors: each page's plain text in 200-word windows, ranked by BM25 with plain tokens, or with "
        "our jieba tokens.",
        "",
        _table(
            ["mode", *[f"{k} hit@5" for k in kinds], *[f"{k} MRR@10" for k in kinds]],
            [[mode, *[v[k]["hit@5"] for k in kinds], *[v[k]["mrr@10"] for k in kinds]] for mode, v in modes.items()],
        ),
        "",
        "![retrieval](retrieval.png)",
        "",
    ]


def _ingestion(r: dict) -> list[str]:
    ing = r["ingestion"]
    return [
        "## Ingestion",
        "",
        _table(
            ["PyMuPDF pages/s", "embedding chunks/s", "full build (s)", "incremental, 1 file touched (s)", "ratio"],
            [
                [
                    ing["pymupdf_pages_per_s"],
                    ing["embed_chunks_per_s"],
                    ing["full_build_s"],
                    ing["incremental_s"],
                    ing["incremental_over_full"],
                ]
            ],
        ),
        "",
        f"Stage seconds of the full build: {ing['stage_seconds']}. MinerU was not measured (no server here). "
        f"Peak memory of the benchmark process (max RSS): {r['peak_memory_mb']} MB.",
        "",
    ]


def _scaling(r: dict) -> list[str]:
    return [
        "## Query latency as the index grows",
        "",
        "The corpus' chunks copied n times (vectors reused); hybrid retrieval of k=5 including the query "
        "embedding, over 20 questions.",
        "",
        _table(
            ["copies", "chunks", "p50 (ms)", "p95 (ms)"],
            [[x["copies"], x["chunks"], x["p50_ms"], x["p95_ms"]] for x in r["scaling"]],
        ),
        "",
        "![scaling](scaling.png)",
        "",
    ]


def _answers(r: dict) -> list[str]:
    header = [
        "split",
        "in-KB",
        "key fact",
        "in-KB Incorrect",
        "out-of-scope",
        "out-of-scope Incorrect",
        "out-of-scope Correct",
        "citation problems",
        "first token, median (s)",
    ]
    rows = [
        [
            split,
            a["in_kb"]["n"],
            a["in_kb"]["key_fact"],
            a["in_kb"]["incorrect"],
            a["out_of_scope"]["n"],
            a["out_of_scope"]["incorrect"],
            a["out_of_scope"]["correct"],
            a["answers_with_citation_problems"],
            a["median_first_token_s_correct"],
        ]
        for split, a in r["answers"].items()
        if split != "injection_filter"
    ]
    injection = r["answers"]["injection_filter"]
    return [
        "## Answer quality (evidence answers, web search off)",
        "",
        "Per split of the question set: thresholds and constants were chosen on dev; test documents and "
        "questions were never used to tune anything, so the test figures are the out-of-sample ones. Key fact: "
        "a `must_contain` string of the question is in the answer. Citation problems: a cited number that is "
        "no source, or a quoted sentence not in the source it cites.",
        "",
        _table(header, rows),
        "",
        f"Prompt-injection filter on the corpus: {injection['sentences']} sentences, "
        f"{injection['dropped_with_pdf_rules']} dropped with the PDF rules, "
        f"{injection['dropped_with_web_rules']} with the web rules.",
        "",
    ]


def summary(r: dict) -> str:
    """The headline figures, as a table for the terminal."""
    ratios = r["cost"]["in_kb_baseline_over_ours"]["ours"]
    hybrid = r["retrieval"]["modes"]["hybrid"]
    rows = [
        ["time to first token, seed-style / ours (in-KB questions)", f"{ratios['first_token_s']}x"],
        ["total time, seed-style / ours (in-KB questions)", f"{ratios['total_s']}x"],
        ["LLM calls, seed-style / ours (in-KB questions)", f"{ratios['calls']}x"],
        [
            "time to first token, seed-style / ours (all)",
            f"{r['cost']['baseline_over_ours']['ours']['first_token_s']}x",
        ],
        ["hit@5 hybrid (same-language)", hybrid["same-language"]["hit@5"]],
        ["MRR@10 hybrid (same-language)", hybrid["same-language"]["mrr@10"]],
        ["PyMuPDF pages/s", r["ingestion"]["pymupdf_pages_per_s"]],
        ["embedding chunks/s", r["ingestion"]["embed_chunks_per_s"]],
        ["incremental / full build", r["ingestion"]["incremental_over_full"]],
        *[
            [
                f"{split}: key fact / in-KB Incorrect / out-of-scope Incorrect",
                "{} / {} / {}".format(a["in_kb"]["key_fact"], a["in_kb"]["incorrect"], a["out_of_scope"]["incorrect"]),
            ]
            for split, a in r["answers"].items()
            if split != "injection_filter"
        ],
        ["peak memory (MB)", r["peak_memory_mb"]],
    ]
    return _table(["figure", "value"], rows)
