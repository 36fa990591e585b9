"""The time of an MCP ``search`` call over stdio, as a client sees it, against the same search in-process.

    python -m crag.bench.mcp [--db DIR] [--calls 20]

The knowledge base is the corpus's dev and test documents (as in ``crag.bench.answers``), indexed with the
built-in embedder. ``python -m crag mcp`` is started over stdio with the official ``mcp`` client, and each in-KB
question of the dev and test splits is searched in turn: the first call (which loads the pipeline) is reported
apart, then the median and p95 of the next ``--calls``. Each question is also searched in this process, in turn
with the stdio call (``ToolBackend.search``, what the tool calls): the difference is the protocol, the process
boundary and the output's JSON and text.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from crag.bench.answers import build
from crag.bench.corpus import default_cache_dir, fetch_corpus
from crag.bench.retrieval import load_questions
from crag.config import Settings, load_settings
from crag.mcp import ToolBackend


def percentile(values: Sequence[float], share: float) -> float:
    ranked = sorted(values)
    return ranked[min(len(ranked) - 1, round(share * (len(ranked) - 1)))]


def figures(seconds: Sequence[float]) -> dict[str, float]:
    return {
        "median_ms": round(1000 * statistics.median(seconds), 1),
        "p95_ms": round(1000 * percentile(seconds, 0.95), 1),
    }


def timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def searches(settings: Settings, questions: Sequence[str]) -> tuple[list[float], list[float]]:
    """Seconds per ``search``: over stdio as the client times it, and in this process, question by question in
    turn, so that a machine busy with other work slows both alike. The first of each loads the pipeline."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_")} | {
        "CRAG_FILES_DIR": str(settings.files_dir),
        "CRAG_CHROMA_DIR": str(settings.chroma_dir),
        "CRAG_LLM_BACKEND": "embedded",
        "CRAG_EMBED_BACKEND": "local",
        "CRAG_WEB_SEARCH": "off",
    }
    params = StdioServerParameters(command=sys.executable, args=["-m", "crag", "mcp"], env=env)
    knowledge = ToolBackend(settings)

    async def main() -> tuple[list[float], list[float]]:
        stdio, local = [], []
        async with Client(params, read_timeout_seconds=300) as client:
            for question in questions:
                started = time.perf_counter()
                result = await client.call_tool("search", {"question": question})
                stdio.append(time.perf_counter() - started)
                if result.is_error:
                    raise SystemExit(f"search failed: {getattr(result.content[0], 'text', result.content[0])}")
                local.append(timed(partial(knowledge.search, question, None, None)))
        return stdio, local

    return anyio.run(main)


def run(root: Path, calls: int) -> dict[str, Any]:
    settings = load_settings(
        files_dir=root / "Files",
        chroma_dir=root / "db",
        parser="pymupdf",
        llm_backend="embedded",
        embed_backend="local",
        web_search=False,
    )
    build(settings, fetch_corpus(default_cache_dir(), ("dev", "test")))
    questions = [q.question for q in load_questions() if q.in_kb and q.split in ("dev", "test")][: calls + 1]
    stdio, local = searches(settings, questions)
    return {
        "calls": len(stdio) - 1,
        "first_call_s": {"stdio": round(stdio[0], 2), "in_process": round(local[0], 2)},
        "stdio": figures(stdio[1:]),
        "in_process": figures(local[1:]),
        "stdio_over_in_process": round(statistics.median(stdio[1:]) / statistics.median(local[1:]), 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crag.bench.mcp", description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, help="keep the index here between runs (default: a temporary folder)")
    parser.add_argument("--calls", type=int, default=20, help="calls timed after the first (default: 20)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(run(args.db or Path(tmp), args.calls), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
