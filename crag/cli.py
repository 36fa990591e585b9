"""``python -m crag``: the command line over the same core as the app.

Errors meant for the user (``CragError``) become one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence

from crag.config import load_settings
from crag.errors import CragError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m crag", description="Corrective-RAG knowledge-base chat.")
    commands = parser.add_subparsers(dest="command", required=True)

    ask = commands.add_parser("ask", help="answer a question")
    ask.add_argument("question")
    ask.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    return parser


def _ask(args: argparse.Namespace) -> int:
    from crag.pipeline import Pipeline

    pipeline = Pipeline.from_settings(load_settings())
    stream = pipeline.stream(args.question)
    if args.json:
        for _ in stream:
            pass
        answer = dataclasses.asdict(stream.answer)
        answer["answer"] = answer.pop("text")
        answer["backend_reason"] = pipeline.backend.reason
        print(json.dumps(answer, ensure_ascii=False))
        return 0
    print(f"[{pipeline.backend.name}: {pipeline.backend.model} — {pipeline.backend.reason}]", file=sys.stderr)
    for delta in stream:
        print(delta, end="", flush=True)
    print()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return {"ask": _ask}[args.command](args)
    except CragError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
