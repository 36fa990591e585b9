"""``python -m crag``: the command line over the same core as the app.

Errors meant for the user (``CragError``) become one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crag.config import Settings, is_loopback, load_settings
from crag.errors import CragError, Remedy, said

# A remedy in the command line's words: the command that does it.
REMEDIES = {
    Remedy.BUILD: "Build the knowledge base: `python -m crag index`.",
    Remedy.FULL_REBUILD: "Run a full rebuild: `python -m crag index --rebuild`.",
}
SCOPE_HELP = (
    "a folder or file to ask, relative to the files folder ('(top level)': the PDFs directly in it); repeat it for "
    "several (default: every document)"
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m crag", description="Corrective-RAG knowledge-base chat.")
    commands = parser.add_subparsers(dest="command", required=True)

    index = commands.add_parser("index", help="sync the knowledge base with the files folder")
    index.add_argument("--files", type=Path, help="folder of PDFs (default: CRAG_FILES_DIR)")
    index.add_argument("--db", type=Path, help="index folder (default: CRAG_CHROMA_DIR)")
    index.add_argument("--rebuild", action="store_true", help="re-parse and re-embed every file")
    index.add_argument("--parser", choices=["auto", "pymupdf", "mineru"], help="default: CRAG_PARSER")
    index.add_argument("--json", action="store_true", help="print one JSON object")

    retrieve = commands.add_parser("retrieve", help="show the chunks retrieved for a question")
    retrieve.add_argument("question")
    retrieve.add_argument("-k", type=int, default=None, help="number of chunks (default: CRAG_TOP_K)")
    retrieve.add_argument("--db", type=Path, help="index folder (default: CRAG_CHROMA_DIR)")
    retrieve.add_argument("--mode", choices=["hybrid", "dense", "lexical"], help="default: CRAG_RETRIEVAL_MODE")
    retrieve.add_argument("--scope", action="append", metavar="PATH", help=SCOPE_HELP)
    retrieve.add_argument("--json", action="store_true", help="print one JSON object")

    bench = commands.add_parser("bench", help="measure speed and quality; writes JSON, a report and plots")
    bench.add_argument("--quick", action="store_true", help="a smaller run (a few minutes on 2 cores)")
    bench.add_argument("--json", action="store_true", help="print the results as JSON")
    bench.add_argument("--out", type=Path, default=Path("bench/results"), help="default: bench/results")

    ask = commands.add_parser("ask", help="answer a question")
    ask.add_argument("question")
    ask.add_argument("--db", type=Path, help="index folder (default: CRAG_CHROMA_DIR)")
    ask.add_argument("--no-web", action="store_true", help="never search the web for this question")
    ask.add_argument("--scope", action="append", metavar="PATH", help=SCOPE_HELP)
    ask.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")

    serve = commands.add_parser("serve", help="serve the HTTP API (FastAPI; docs at /docs)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine)")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on (default: 8000)")
    serve.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name the API answers to besides this machine's (the name a reverse proxy forwards); repeat it "
        "for several; added to CRAG_ALLOWED_HOSTS. Without CRAG_API_TOKEN other names get 421",
    )

    mcp = commands.add_parser("mcp", help="serve the knowledge base to MCP clients (Claude Desktop, VS Code) on stdio")
    mcp.add_argument("--files", type=Path, help="folder of PDFs (default: CRAG_FILES_DIR)")
    mcp.add_argument("--db", type=Path, help="index folder (default: CRAG_CHROMA_DIR)")
    return parser


def _settings(args: argparse.Namespace):
    overrides = {}
    if getattr(args, "files", None):
        overrides["files_dir"] = args.files
    if getattr(args, "db", None):
        overrides["chroma_dir"] = args.db
    if getattr(args, "parser", None):
        overrides["parser"] = args.parser
    return load_settings(**overrides)


def _scope(args: argparse.Namespace, settings: Settings):
    """The ``--scope`` paths as a ``Scope``. A path typed from the current folder into the files folder
    (``Files/projects``, as a shell completes it) is taken relative to the files folder."""
    from crag.scope import Scope

    root = settings.files_dir.resolve()
    paths = []
    for given in args.scope or ():
        here = Path(given).resolve()
        inside = given.strip() and Path(given).exists() and here.is_relative_to(root) and here != root
        paths.append(here.relative_to(root).as_posix() if inside else given)
    return Scope.of(paths)


def _index(args: argparse.Namespace) -> int:
    from crag.ingest import sync
    from crag.retriever import index_embedder
    from crag.types import Progress

    settings = _settings(args)
    embedder = index_embedder(settings, args.rebuild)
    last = [""]

    def show(p: Progress) -> None:
        line = f"{p.stage} {p.file} ({p.file_index}/{p.file_count})" if p.file else p.stage
        if p.page_count:
            line += f" OCR page {p.page}/{p.page_count}" if p.stage == "ocr" else f" {p.page}/{p.page_count}"
        if not args.json and line != last[0]:
            print(f"\r{line[:100]:<100}", end="", file=sys.stderr, flush=True)
            last[0] = line

    report = sync(settings, embedder, rebuild=args.rebuild, on_progress=show)
    if args.json:
        print(json.dumps(report.to_json(), ensure_ascii=False))
    else:
        print(file=sys.stderr)
        for f in report.files:
            detail = f.error or (f"{f.pages} pages, {f.chunks} chunks" if f.status == "indexed" else "")
            print(f"{f.status:>9}  {f.file}  {detail}")
            for warning in f.warnings:
                print(f"{'':>9}  warning: {warning}")
        print(f"{report.total_chunks} chunks; {report.pages_per_second} pages/s; {report.seconds} s")
        for note in report.notes:
            print(f"note: {note}", file=sys.stderr)
    return 0


def _retrieve(args: argparse.Namespace) -> int:
    from crag.retriever import open_retriever

    settings = _settings(args)
    retriever = open_retriever(settings)
    scope = _scope(args, settings)
    retriever.check_scope(scope)
    hits = retriever.retrieve(args.question, args.k or settings.top_k, args.mode or settings.retrieval_mode, scope)
    results: list[dict[str, Any]] = [
        {
            "file": h.chunk.file,
            "pages": list(h.chunk.pages),
            "section": h.chunk.section,
            "text": h.chunk.text,
            "score": round(h.score, 6),
        }
        for h in hits
    ]
    if args.json:
        print(json.dumps({"scope": list(scope.paths), "results": results}, ensure_ascii=False))
    else:
        for n, r in enumerate(results, start=1):
            print(f"[{n}] {r['file']} p.{','.join(map(str, r['pages']))}  {r['score']:.4f}  {r['section']}")
            print(f"    {r['text'][:300]}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from crag.bench.run import run, summary

    results = run(args.out, quick=args.quick)
    print(json.dumps(results, ensure_ascii=False) if args.json else summary(results))
    print(f"report: {args.out / 'report.md'}", file=sys.stderr)
    return 0


def _ask(args: argparse.Namespace) -> int:
    from crag.contract import AnswerOut
    from crag.messages import unsupported_message
    from crag.pipeline import Pipeline

    settings = _settings(args)
    pipeline = Pipeline.from_settings(settings)
    stages: list[str] = []
    web = False if args.no_web else None
    with pipeline.stream(args.question, on_step=stages.append, web=web, scope=_scope(args, settings)) as stream:
        if args.json:
            for _ in stream:
                pass
            print(AnswerOut.of(stream.finished, pipeline.backend, REMEDIES).model_dump_json())
            return 0
        print(f"[{pipeline.backend.name}: {pipeline.backend.model} — {pipeline.backend.reason}]", file=sys.stderr)
        if missing := pipeline.retriever.missing:
            print(f"note: {said(str(missing), missing.remedy, REMEDIES)}", file=sys.stderr)
        for delta in stream:
            print(delta, end="", flush=True)
        print()
    answer = stream.finished
    where = f" in {', '.join(answer.trace.scope)}" if answer.trace and answer.trace.scope else ""
    action = answer.action.value if answer.action else ""  # the pipeline's answers have one
    print(f"\n[{action}{where}] " + "  ".join(_source_line(s) for s in answer.sources), file=sys.stderr)
    if answer.trace and answer.trace.unsupported:
        print(unsupported_message(args.question, answer.trace.unsupported), file=sys.stderr)
    if answer.trace and answer.trace.remedy:
        print(REMEDIES[answer.trace.remedy], file=sys.stderr)
    if answer.trace and answer.trace.hint:
        print(answer.trace.hint, file=sys.stderr)
    return 0


def _source_line(source) -> str:
    where = f"{source.file} p.{','.join(map(str, source.pages))}" if source.kind == "local" else source.url
    return f"[{source.n}] {where}"


def _serve(args: argparse.Namespace) -> int:
    """The HTTP API under uvicorn. Started by name: the CLI and the API are both edges over the core."""
    import uvicorn

    settings = _settings(args)  # read now, so a bad setting is one line here rather than a traceback there
    if args.allowed_host:
        settings = load_settings(allowed_hosts=[*(settings.allowed_hosts or ()), *args.allowed_host])
        # The app reads its settings from the environment when uvicorn builds it, in this process.
        os.environ["CRAG_ALLOWED_HOSTS"] = ",".join(settings.allowed_hosts or ())
    host, port = args.host, args.port
    shown = f"[{host}]" if ":" in host else host
    print(f"CRAG API on http://{shown}:{port} (docs: http://{shown}:{port}/docs)", file=sys.stderr, flush=True)
    if not is_loopback(host):
        protection = "CRAG_API_TOKEN is set" if settings.api_token else "CRAG_API_TOKEN is NOT set"
        print(
            f"warning: {host} is not a loopback address: anyone who reaches it can read your documents through "
            f"the API ({protection}). Bind to 127.0.0.1, or put it behind a proxy with TLS.",
            file=sys.stderr,
            flush=True,
        )
    if not settings.api_token:
        names = ", ".join(["this machine's addresses", *(settings.allowed_hosts or ())])
        print(f"Answers requests addressed to {names} (--allowed-host adds a name).", file=sys.stderr, flush=True)
    uvicorn.run("crag.api:app_from_environment", factory=True, host=host, port=port, log_level="info")
    return 0


def _mcp(args: argparse.Namespace) -> int:
    """The MCP server on stdin and stdout, until the client closes them. Its module serves it; this reads the
    settings."""
    from crag.mcp import ToolBackend, serve_stdio

    settings = _settings(args)  # read now, so a bad setting is one line on stderr before the protocol starts
    print(f"CRAG MCP server on stdio: {settings.files_dir.resolve()}", file=sys.stderr, flush=True)
    serve_stdio(ToolBackend(settings))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        commands = {"index": _index, "retrieve": _retrieve, "ask": _ask, "bench": _bench, "serve": _serve, "mcp": _mcp}
        return commands[args.command](args)
    except CragError as exc:
        print(f"error: {said(str(exc), exc.remedy, REMEDIES)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        if "pydantic_ai" in sys.modules:  # a model was used: what it left open on its loop ends, and so can we
            from crag.models import close_event_loop

            close_event_loop()
