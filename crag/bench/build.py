"""Build speed, in one run on the benchmark corpus: the app's path vs the CLI's, and OCR.

    .venv/bin/python -m crag.bench.build [--out bench/results] [--ocr-pages 12]

- cli: the build as ``python -m crag index`` runs it (``sync`` on this thread);
- app: the same build through the background job runner the app and the API use (``jobs.Builds``);
- OCR: pages/s of the offline OCR on pages rendered to images (English and Chinese corpus pages).

Absolute times drift on shared machines, so the report gives ratios of builds measured in this one process.
Each build's retrieval figures (hybrid hit@5, MRR@10 over the question set) show the index is the same.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from crag.bench.corpus import default_cache_dir, fetch_corpus
from crag.bench.retrieval import by_kind, first_hit, load_questions
from crag.config import Settings, cpu_threads, load_settings
from crag.ingest import sync
from crag.jobs import Builds
from crag.models import Embedder, build_embedder
from crag.retriever import Retriever

OCR_FILES = ("bzip2-manual.pdf", "maint-guide.zh-cn.pdf")


def _retrieval(settings: Settings, embedder: Embedder) -> dict[str, Any]:
    asked = [q for q in load_questions() if q.in_kb]
    retriever = Retriever(settings, embedder)
    ranks = [
        first_hit([(h.chunk.file, h.chunk.pages) for h in retriever.retrieve(q.question, 10, "hybrid")], q)
        for q in asked
    ]
    return by_kind(asked, ranks)


def _timed_sync(settings: Settings, embedder: Embedder) -> dict[str, Any]:
    start = time.perf_counter()
    report = sync(settings, embedder, rebuild=True)
    seconds = time.perf_counter() - start
    pages = sum(f.pages for f in report.files if f.status == "indexed")
    return {
        "seconds": round(seconds, 1),
        "pages_per_s": round(pages / seconds, 2),
        "stage_seconds": report.stage_seconds,
        "chunks": report.total_chunks,
    }


def _timed_job(settings: Settings, embedder: Embedder) -> dict[str, Any]:
    done = threading.Event()
    builds = Builds(settings, lambda rebuild: embedder, lambda e: done.set())
    start = time.perf_counter()
    job = builds.start(rebuild=True)
    while (current := builds.get(job.id)) is not None and current.state == "running":
        time.sleep(0.05)  # the app's fragment polls every second; this only reads the job, as it does
    seconds = time.perf_counter() - start
    if current is None or current.state != "done" or current.report is None:
        raise RuntimeError(f"the app's build did not finish: {current}")
    return {"seconds": round(seconds, 1), "stage_seconds": current.report.stage_seconds}


def _ocr(pdfs: dict[str, Path], pages: int) -> dict[str, Any]:
    """OCR pages/s: the first ``pages`` pages of each file, forced through OCR (no text layer used)."""
    from crag.ingest.ocr import PageOCR
    from crag.ingest.pymupdf import PyMuPDFParser

    parser = PyMuPDFParser(ocr=PageOCR("force"))
    parser.parse(pdfs[OCR_FILES[0]], pages=[1])  # load the OCR models outside the timing
    out = {}
    for name in OCR_FILES:
        start = time.perf_counter()
        parser.parse(pdfs[name], pages=range(1, pages + 1))
        seconds = time.perf_counter() - start
        out[name] = {
            "pages": pages,
            "seconds": round(seconds, 1),
            "pages_per_s": round(pages / seconds, 2),
        }
    return out


def run(out: Path, ocr_pages: int) -> dict[str, Any]:
    pdfs = fetch_corpus(default_cache_dir())
    results: dict[str, Any] = {"files": len(pdfs), "cores": cpu_threads(), "builds": {}, "retrieval": {}}
    with tempfile.TemporaryDirectory() as tmp:
        files = Path(tmp) / "Files"
        files.mkdir()
        for name, path in pdfs.items():
            shutil.copy(path, files / name)
        base = load_settings(files_dir=files, chroma_dir=Path(tmp) / "db", parser="pymupdf", ocr="off")
        embedder = build_embedder(base)
        embedder.embed_documents(["warm up the model"])
        for mode in ("cli", "app"):
            settings = base.model_copy(update={"chroma_dir": Path(tmp) / f"db-{mode}"})
            if mode == "app":
                results["builds"][mode] = _timed_job(settings, embedder)
            else:
                results["builds"][mode] = _timed_sync(settings, embedder)
            results["retrieval"][mode] = _retrieval(settings, embedder)["same-language"]
            print(mode, json.dumps(results["builds"][mode]), flush=True)
        results["ocr"] = _ocr(pdfs, ocr_pages)
    b = results["builds"]
    results["ratios"] = {"app_over_cli": round(b["app"]["seconds"] / b["cli"]["seconds"], 2)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "build.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crag.bench.build", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--ocr-pages", type=int, default=12, help="pages of each OCR file")
    args = parser.parse_args(argv)
    results = run(args.out, args.ocr_pages)
    print(json.dumps({k: results[k] for k in ("ratios", "retrieval", "ocr")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
