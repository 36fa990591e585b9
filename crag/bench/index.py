"""``python -m crag index`` on the benchmark corpus, this checkout against others, alternated in one run.

    .venv/bin/python -m crag.bench.index --checkout ../base [--rounds 2] [--out bench/results]

Each round runs a full rebuild (``--rebuild``) in every checkout in turn (A B A B: absolute times drift on a shared
machine), as a user runs it: a fresh process, so start-up and model loading count. It records the wall time, the
peak memory of the process and its workers together (their resident sets summed, sampled every 0.1 s), the chunks,
and the index's retrieval figures (hybrid hit@5 and MRR@10 per language), scored by that checkout's own code.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from crag.bench.corpus import default_cache_dir, fetch_corpus

ROOT = Path(__file__).resolve().parents[2]
# Run by each checkout's own Python in its own folder, with functions that older checkouts have too.
SCORE = """
import json, sys
from crag.bench.retrieval import by_kind, first_hit, load_questions
from crag.config import load_settings
from crag.retriever import Retriever, index_embedder
settings = load_settings(chroma_dir=sys.argv[1])
retriever = Retriever(settings, index_embedder(settings))
asked = [q for q in load_questions() if q.in_kb]
ranks = [first_hit([(h.chunk.file, h.chunk.pages) for h in retriever.retrieve(q.question, 10, "hybrid")], q)
         for q in asked]
print(json.dumps(by_kind(asked, ranks)))
"""


def _peak_rss(proc: subprocess.Popen) -> int:
    """The largest sum of the resident sets of the process and its children seen while it runs, in bytes."""
    import psutil  # PyMuPDF's dependency

    root, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in tree))
        except psutil.Error:
            pass
        time.sleep(0.1)
    return peak


def _build(checkout: Path, files: Path, db: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_")}
    env |= {"CRAG_OLLAMA_URL": "http://127.0.0.1:9", "CRAG_EMBED_BACKEND": "local", "CRAG_WEB_SEARCH": "off"}
    python = str(checkout / ".venv/bin/python")
    cmd = [python, "-m", "crag", "index", "--files", str(files), "--db", str(db), "--rebuild", "--json"]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=checkout, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    peak = _peak_rss(proc)
    seconds = time.perf_counter() - start
    report = json.loads(proc.stdout.read()) if proc.stdout else {}
    scored = subprocess.run(
        [python, "-c", SCORE, str(db)], cwd=checkout, env=env, capture_output=True, text=True, check=True
    )
    kinds = json.loads(scored.stdout.strip().splitlines()[-1])
    return {
        "seconds": round(seconds, 1),
        "peak_mb": round(peak / 2**20),
        "chunks": report.get("total_chunks"),
        "retrieval": {k: kinds[k] for k in ("en", "zh") if k in kinds},
    }


def run(checkouts: dict[str, Path], rounds: int, out: Path) -> dict[str, Any]:
    pdfs = fetch_corpus(default_cache_dir())
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in checkouts}
    with tempfile.TemporaryDirectory() as tmp:
        files = Path(tmp) / "Files"
        files.mkdir()
        for name, path in pdfs.items():
            (files / name).write_bytes(path.read_bytes())
        for n in range(rounds):
            for name, checkout in checkouts.items():
                runs[name].append(_build(checkout, files, Path(tmp) / f"db-{n}-{len(runs[name])}-{id(checkout)}"))
                print(name, json.dumps(runs[name][-1]), flush=True)
    this = "this checkout"
    best = {name: min(r["seconds"] for r in rs) for name, rs in runs.items()}
    pairs = {  # each round's other build over this checkout's in the same round
        name: [round(o["seconds"] / t["seconds"], 2) for o, t in zip(rs, runs[this], strict=True)]
        for name, rs in runs.items()
        if name != this
    }
    results = {"files": len(pdfs), "runs": runs, "best_seconds": best}
    results["slower_than_this_checkout_per_round"] = pairs
    out.mkdir(parents=True, exist_ok=True)
    (out / "index.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crag.bench.index", description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, action="append", default=[], help="another checkout to time")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    checkouts = {str(c.resolve()): c.resolve() for c in args.checkout}
    results = run(checkouts | {"this checkout": ROOT}, args.rounds, args.out)
    print(json.dumps({k: results[k] for k in ("best_seconds", "slower_than_this_checkout_per_round")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
