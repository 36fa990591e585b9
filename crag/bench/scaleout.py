"""Embedded index vs a Chroma server: retrieval latency, reader memory and reader open time, by index size.

    .venv/bin/python -m crag.bench.scaleout [--sizes 10000 100000] [--url http://...] [--out bench/results]

The benchmark corpus is indexed once (cached in ``<bench cache>/scaleout-base``); its chunks are then
copied, with their vectors reused, up to each size, and the copies written to a local folder and to a
Chroma server (``chroma run`` on loopback, started here unless ``--url`` names one). Each reader runs in
a fresh process, so its memory is its own: it loads the embedder, opens the index (the time to open
includes, on a server, fetching every chunk and building BM25 in memory), then answers the question set.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from crag.config import load_settings
from crag.types import FileResult

SIZES = (10_000, 100_000)
WARMUP = 5


def _rss_mb(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _percentiles(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {"p50_ms": round(statistics.median(values), 2), "p95_ms": round(values[int(0.95 * (len(values) - 1))], 2)}


# ---------------------------------------------------------------------------------------------
# The reader, in its own process


def reader(mode: str, where: str, questions: list[str]) -> dict[str, Any]:
    """Open the index as an app instance would, then time every question. Runs in a fresh process."""
    from crag.retriever import Retriever, index_embedder

    with tempfile.TemporaryDirectory() as tmp:
        if mode == "server":
            settings = load_settings(chroma_url=where, chroma_dir=Path(tmp) / "unused", embed_backend="local")
        else:
            settings = load_settings(chroma_dir=Path(where), embed_backend="local")
        embedder = index_embedder(settings)  # the one the index was built with
        vectors = embedder.embed(questions)  # the question vectors, so "search" times the index alone
        before = _rss_mb()
        retriever = Retriever(settings, embedder)
        start = time.perf_counter()
        index = retriever.store.reader()
        assert index is not None, "the benchmark builds its index first"
        open_s = time.perf_counter() - start
        retriever._reader = index
        opened = _rss_mb()
        start = time.perf_counter()
        index.search(questions[0], vectors[0], 5)
        first_ms = (time.perf_counter() - start) * 1000
        search, retrieve = [], []
        for q, v in zip(questions[:WARMUP], vectors[:WARMUP], strict=True):
            index.search(q, v, 5)
            retriever.retrieve(q, 5)
        for q, v in zip(questions, vectors, strict=True):
            start = time.perf_counter()
            index.search(q, v, 5)
            search.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            retriever.retrieve(q, 5)  # as the app asks: embeds the question, searches, fetches hit vectors
            retrieve.append((time.perf_counter() - start) * 1000)
        return {
            "chunks": index.n_docs,
            "open_s": round(open_s, 3),
            "first_query_ms": round(first_ms, 1),
            "search": _percentiles(search),
            "retrieve": _percentiles(retrieve),
            "rss_before_open_mb": round(before, 1),
            "rss_index_mb": round(_rss_mb() - before, 1),
            "rss_index_after_open_mb": round(opened - before, 1),
            "rss_total_mb": round(_rss_mb(), 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }


def _run_reader(mode: str, where: str, questions_file: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "crag.bench.scaleout", "reader", mode, where, str(questions_file)],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the {mode} reader failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# The indexes


def base_index(cache: Path) -> Path:
    """The benchmark corpus, indexed once the embedded way with the built-in embedder."""
    from crag.bench.answers import build
    from crag.bench.corpus import fetch_corpus

    settings = load_settings(
        files_dir=cache / "Files", chroma_dir=cache / "db", parser="pymupdf", embed_backend="local"
    )
    build(settings, fetch_corpus(cache.parent))
    return settings.chroma_dir


def write_copies(store: Any, base: Any, vectors: dict[str, Any], size: int) -> float:
    """``size`` chunks: the base's chunks copied as often as needed (new ids and file names), vectors reused."""
    start = time.perf_counter()
    writer = store.writer(base.generation.embedder, base.generation.dimension, base.generation.chunking)
    counts: dict[str, int] = {}
    for copy in range(math.ceil(size / len(base.chunks))):
        chunks = [replace(c, id=f"{c.id}-x{copy}", file=f"{c.file}#{copy}") for c in base.chunks]
        chunks = chunks[: size - len(writer.chunks)]
        writer.add(chunks, [vectors[c.id.rsplit("-x", 1)[0]] for c in chunks])
        for c in chunks:
            counts[c.file] = counts.get(c.file, 0) + 1
    writer.commit([FileResult(file=f, status="indexed", chunks=k) for f, k in counts.items()])
    return round(time.perf_counter() - start, 1)


@contextlib.contextmanager
def chroma_server(data: Path) -> Iterator[tuple[str, int]]:
    """``chroma run`` from this venv over ``data`` on a free loopback port: (URL, pid), once its heartbeat
    answers; stopped at the end. The tests use it too."""
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (data.parent / f"chroma-{port}.log").open("w")
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "chroma"), "run", "--path", str(data), "--host", "127.0.0.1",
         "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/api/v2/heartbeat", timeout=2).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chroma run did not start; see {log.name}")
            time.sleep(0.1)
        yield url, proc.pid
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


# ---------------------------------------------------------------------------------------------
# The run


def run(sizes: tuple[int, ...], out: Path, url: str | None = None) -> dict[str, Any]:
    from crag.bench.corpus import default_cache_dir
    from crag.bench.retrieval import load_questions
    from crag.store import ServerStore, Store

    base_db = base_index(default_cache_dir() / "scaleout-base")
    base = Store(base_db).reader()
    assert base is not None, "the benchmark builds its index first"
    vectors = dict(zip([c.id for c in base.chunks], base.vectors([c.id for c in base.chunks]), strict=True))
    questions = [q.question for q in load_questions()]
    results: dict[str, Any] = {"base_chunks": len(base.chunks), "questions": len(questions), "rows": []}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        questions_file = Path(tmp) / "questions.json"
        questions_file.write_text(json.dumps(questions, ensure_ascii=False))
        server_pid = None
        if url is None:
            (Path(tmp) / "server").mkdir()
            url, server_pid = stack.enter_context(chroma_server(Path(tmp) / "server"))
        for size in sizes:
            local = Path(tmp) / f"embedded-{size}"
            row: dict[str, Any] = {"chunks": size}
            row["write_s"] = {
                "embedded": write_copies(Store(local), base, vectors, size),
                "server": write_copies(ServerStore(Path(tmp) / "unused", url), base, vectors, size),
            }
            row["embedded"] = _run_reader("embedded", str(local), questions_file)
            row["server"] = _run_reader("server", url, questions_file)
            if server_pid:
                row["server_process_rss_mb"] = round(_rss_mb(server_pid), 1)
            row["ratios"] = ratios(row["embedded"], row["server"])
            results["rows"].append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            shutil.rmtree(local, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "scaleout.json").write_text(json.dumps(results, indent=1))
    (out / "scaleout.md").write_text(report(results))
    return results


def ratios(embedded: dict[str, Any], server: dict[str, Any]) -> dict[str, float]:
    """server / embedded: above 1 means the server mode costs more."""

    def r(a: float, b: float) -> float:
        return round(b / a, 2) if a else float("nan")

    return {
        "search_p50": r(embedded["search"]["p50_ms"], server["search"]["p50_ms"]),
        "search_p95": r(embedded["search"]["p95_ms"], server["search"]["p95_ms"]),
        "retrieve_p50": r(embedded["retrieve"]["p50_ms"], server["retrieve"]["p50_ms"]),
        "retrieve_p95": r(embedded["retrieve"]["p95_ms"], server["retrieve"]["p95_ms"]),
        "open": r(embedded["open_s"], server["open_s"]),
        "reader_index_rss": r(embedded["rss_index_mb"], server["rss_index_mb"]),
        "reader_total_rss": r(embedded["rss_total_mb"], server["rss_total_mb"]),
    }


def report(results: dict[str, Any]) -> str:
    lines = [
        "# Embedded vs Chroma server",
        "",
        f"{results['questions']} questions, hybrid top-5; copies of {results['base_chunks']} corpus chunks.",
        "search: `IndexReader.search` (dense + BM25, fused). retrieve: `Retriever.retrieve` as the app calls it,",
        "with the question's vector already memoised by the embedder, so it adds the pointer check and fetching",
        "the hits' vectors. open: the reader's first open of the index (on a server: every chunk fetched and BM25",
        "built in memory). index RSS: the reader's memory after the questions, less its memory before opening.",
        "Ratios are server / embedded (above 1: the server costs more).",
        "",
        "| chunks | mode | search p50 / p95 ms | retrieve p50 / p95 ms | open s | index RSS MB | total RSS MB |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in results["rows"]:
        for mode in ("embedded", "server"):
            m = row[mode]
            lines.append(
                f"| {row['chunks']} | {mode} | {m['search']['p50_ms']} / {m['search']['p95_ms']} | "
                f"{m['retrieve']['p50_ms']} / {m['retrieve']['p95_ms']} | {m['open_s']} | {m['rss_index_mb']} | "
                f"{m['rss_total_mb']} |"
            )
        r = row["ratios"]
        lines.append(
            f"| {row['chunks']} | **ratio** | {r['search_p50']} / {r['search_p95']} | {r['retrieve_p50']} / "
            f"{r['retrieve_p95']} | {r['open']} | {r['reader_index_rss']} | {r['reader_total_rss']} |"
        )
    lines.append("")
    for row in results["rows"]:
        w = row["write_s"]
        server = (
            f"; the Chroma server process: {row['server_process_rss_mb']} MB" if "server_process_rss_mb" in row else ""
        )
        lines.append(
            f"- {row['chunks']} chunks: written in {w['embedded']} s embedded, {w['server']} s to the server{server}."
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crag.bench.scaleout", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    one = sub.add_parser("reader", help="internal: one reader process")
    one.add_argument("mode", choices=["embedded", "server"])
    one.add_argument("where")
    one.add_argument("questions", type=Path)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--url", help="an existing Chroma server (default: start `chroma run` on loopback)")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    if args.command == "reader":
        print(json.dumps(reader(args.mode, args.where, json.loads(args.questions.read_text()))))
        return 0
    results = run(tuple(args.sizes), args.out, args.url)
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
