"""From a file's arrival to its answering: a 30-page PDF copied into a watched files folder, timed until a question
is answered from it, as in the running app (the pipeline loaded, the watcher and the job runner of the process).

    .venv/bin/python -m crag.bench.arrival [--rounds 3] [--quiet 2] [--out bench/results]

Each round starts from an empty knowledge base in a temporary folder, loads the pipeline first (not timed: the app
has it loaded), starts the watcher, copies the first 30 pages of the bzip2 manual (benchmark corpus) into the files
folder and times: the quiet period until the watcher's build starts, the build until its generation is committed,
and the question's answer. The answer must cite the file. Figures are medians of the rounds; on a shared machine
they drift, so compare runs made together.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymupdf

from crag.bench.corpus import default_cache_dir, fetch_corpus
from crag.config import load_settings
from crag.jobs import Builds
from crag.pipeline import Pipeline
from crag.retriever import index_embedder
from crag.store import open_store
from crag.watch import Watcher

SOURCE = "bzip2-manual.pdf"
PAGES = 30
QUESTION = "How do I decompress a file with bzip2?"
NAME = "bzip2 manual (30 pages).pdf"


def thirty_pages(folder: Path) -> Path:
    """The first ``PAGES`` pages of the corpus's bzip2 manual, as a PDF of their own."""
    source = fetch_corpus(default_cache_dir())[SOURCE]
    out = folder / NAME
    with pymupdf.open(source) as doc, pymupdf.open() as part:
        part.insert_pdf(doc, from_page=0, to_page=PAGES - 1)
        part.save(out)
    return out


def _until(condition: Callable[[], Any], timeout: float = 900, every: float = 0.01) -> float:
    """When ``condition()`` first held (``time.perf_counter``)."""
    deadline = time.perf_counter() + timeout
    while not condition():
        if time.perf_counter() > deadline:
            raise TimeoutError(f"still waiting after {timeout} s")
        time.sleep(every)
    return time.perf_counter()


def one_round(pdf: Path, quiet: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="crag-arrival-") as tmp:
        files = Path(tmp) / "Files"
        files.mkdir()
        settings = load_settings(
            files_dir=files, chroma_dir=Path(tmp) / "chroma_db", web_search=False, watch="on", watch_quiet=quiet
        )
        pipeline = Pipeline.from_settings(settings)

        def embedder_for(rebuild: bool):  # as the app's: the loaded pipeline's embedder for an incremental build
            return pipeline.retriever.embedder if not rebuild else index_embedder(settings, rebuild)

        builds = Builds(settings, embedder_for, lambda embedder: None)
        watcher = Watcher(settings, builds).start()
        try:
            _until(lambda: watcher.state.watching, 60)
            arrived = time.perf_counter()
            shutil.copy(pdf, files / NAME)
            started = _until(lambda: builds.running is not None)
            committed = _until(lambda: any(m.file == NAME for m in open_store(settings).manifest()), every=0.05)
            answer = pipeline.ask(QUESTION, web=False)
            answered = time.perf_counter()
        finally:
            watcher.stop()
        cited = any(s.file == NAME for s in answer.cited_sources)
        return {
            "quiet": round(started - arrived, 2),
            "build": round(committed - started, 2),
            "answer": round(answered - committed, 2),
            "arrival_to_answer": round(answered - arrived, 2),
            "cited": cited,
        }


def run(rounds: int, quiet: float, out: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="crag-arrival-pdf-") as tmp:
        pdf = thirty_pages(Path(tmp))
        results = [one_round(pdf, quiet) for _ in range(rounds)]
    medians = {k: round(statistics.median(r[k] for r in results), 2) for k in ("quiet", "build", "answer")}
    medians["arrival_to_answer"] = round(statistics.median(r["arrival_to_answer"] for r in results), 2)
    report = {
        "pdf": f"{SOURCE}, pages 1-{PAGES}",
        "question": QUESTION,
        "quiet_setting": quiet,
        "rounds": results,
        "median": medians,
        "cited": all(r["cited"] for r in results),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "arrival.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quiet", type=float, default=2.0, help="CRAG_WATCH_QUIET for the rounds (default 2)")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    report = run(args.rounds, args.quiet, args.out)
    print(json.dumps(report["median"] | {"cited": report["cited"]}, indent=1))


if __name__ == "__main__":
    main()
