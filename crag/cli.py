"""``python -m crag``: the command line over the same core as the app: index, watch, export and import the knowledge
base, retrieve, ask, serve it over HTTP and MCP, benchmark it.

Errors meant for the user (``CragError``) become one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
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

    watch = commands.add_parser(
        "watch", help="watch the files folder and sync the knowledge base after every change, until stopped"
    )
    watch.add_argument("--files", type=Path, help="folder of PDFs (default: CRAG_FILES_DIR)")
    watch.add_argument("--db", type=Path, help="index folder (default: CRAG_CHROMA_DIR)")
    watch.add_argument("--parser", choices=["auto", "pymupdf", "mineru"], help="default: CRAG_PARSER")
    watch.add_argument("--poll", action="store_true", help="look for changes every few seconds (network folders)")

    export = commands.add_parser("export", help="write the knowledge base into one archive file, to move it")
    export.add_argument("archive", type=Path, help="the file to write, e.g. kb.crag")
    export.add_argument("--with-files", action="store_true", help="put the PDFs in too")
    export.add_argument(
        "--with-ratings",
        action="store_true",
        help="put in the ratings of its answers too, with the questions and conversations they were asked in",
    )
    export.add_argument("--force", action="store_true", help="replace the file if it exists")
    export.add_argument("--files", type=Path, help="folder of PDFs (default: CRAG_FILES_DIR)")
    export.add_argument("--db", type=Path, help="index folder (default: CRAG_CHROMA_DIR)")

    load = commands.add_parser("import", help="check an archive and make its knowledge base the one that answers")
    load.add_argument("archive", type=Path, help="a file written by `python -m crag export`")
    load.add_argument("--sync", action="store_true", help="then sync it with the files folder, if they differ")
    load.add_argument("--files", type=Path, help="folder of PDFs (default: CRAG_FILES_DIR)")
    load.add_argument("--db", type=Path, help="index folder (default: CRAG_CHROMA_DIR)")
    _evaluate_parser(commands)
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
    return _sync(_settings(args), args.rebuild, args.json)


def _sync(settings: Settings, rebuild: bool, as_json: bool = False) -> int:
    from crag.ingest import sync
    from crag.retriever import index_embedder
    from crag.types import Progress

    embedder = index_embedder(settings, rebuild)
    last = [""]

    def show(p: Progress) -> None:
        line = f"{p.stage} {p.file} ({p.file_index}/{p.file_count})" if p.file else p.stage
        if p.page_count:
            line += f" OCR page {p.page}/{p.page_count}" if p.stage == "ocr" else f" {p.page}/{p.page_count}"
        if not as_json and line != last[0]:
            print(f"\r{line[:100]:<100}", end="", file=sys.stderr, flush=True)
            last[0] = line

    report = sync(settings, embedder, rebuild=rebuild, on_progress=show)
    if as_json:
        print(json.dumps(report.to_json(), ensure_ascii=False))
    else:
        print(file=sys.stderr)
        _print_report(report)
    return 0


def _print_report(report, changes_only: bool = False) -> None:
    """A build's files, a line each (``changes_only``: those it read, failed or removed), its figures and notes."""
    for f in report.files:
        if changes_only and f.status in ("unchanged", "skipped"):
            continue
        detail = f.error or (f"{f.pages} pages, {f.chunks} chunks" if f.status == "indexed" else "")
        print(f"{f.status:>9}  {f.file}  {detail}", flush=True)
        for warning in f.warnings:
            print(f"{'':>9}  warning: {warning}")
    print(f"{report.total_chunks} chunks; {report.pages_per_second} pages/s; {report.seconds} s", flush=True)
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr, flush=True)


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
    from crag.conversations import thresholds_for
    from crag.messages import unsupported_message
    from crag.parts import plain
    from crag.pipeline import Pipeline

    settings = _settings(args)
    pipeline = Pipeline.from_settings(settings)
    stages: list[str] = []
    web = False if args.no_web else None
    scope = _scope(args, settings)
    fitted = thresholds_for(settings, scope.paths)
    with pipeline.stream(args.question, on_step=stages.append, web=web, scope=scope, **fitted) as stream:
        if args.json:
            for _ in stream:
                pass
            print(AnswerOut.of(stream.finished, pipeline.backend, REMEDIES).model_dump_json())
            return 0
        print(f"[{pipeline.backend.name}: {pipeline.backend.model} — {pipeline.backend.reason}]", file=sys.stderr)
        if missing := pipeline.retriever.missing:
            print(f"note: {said(str(missing), missing.remedy, REMEDIES)}", file=sys.stderr)
        for part in stream:  # each part as the answer's text writes it, as it is made
            print(plain([part] if part is not None else []), end="", flush=True)
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
    if answer.suggestions:
        print("Your documents may word it otherwise. The sections closest to your question:", file=sys.stderr)
        for s in answer.suggestions:
            print(f"  “{s.title}” ({s.file}, p. {s.page})", file=sys.stderr)
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
    if settings.watch != "off":
        how = "polled" if settings.watch == "poll" else "watched"
        print(
            f"{settings.files_dir.resolve()} is {how}: changes are synced by themselves (CRAG_WATCH=off stops it).",
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


def _watch(args: argparse.Namespace) -> int:
    """Watch until Ctrl+C or SIGTERM (a service's stop), printing each sync as it ends. The command asks for watching:
    it watches whatever CRAG_WATCH says (``poll`` and ``--poll`` poll)."""
    import signal
    import time

    from crag.jobs import Builds
    from crag.retriever import index_embedder
    from crag.watch import Watcher

    settings = _settings(args)
    settings = settings.model_copy(update={"watch": "poll" if args.poll or settings.watch == "poll" else "on"})
    builds = Builds(settings, lambda rebuild: index_embedder(settings, rebuild), lambda embedder: None)
    watcher = Watcher(settings, builds, on_synced=_synced).start()

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    print(f"Watching {settings.files_dir.resolve()} (Ctrl+C stops)", file=sys.stderr, flush=True)
    said: set[str] = set()
    try:
        while True:
            state = watcher.state
            for line in (state.error, *(f"{name}: {why}" for name, why in state.problems.items())):
                if line and line not in said:
                    said.add(line)
                    print(f"note: {line}", file=sys.stderr, flush=True)
            time.sleep(0.5)
    except KeyboardInterrupt:
        if builds.running is not None:  # the index that answered stays: a cancelled build commits nothing
            builds.cancel(builds.running)
        watcher.stop()
        print("Stopped watching.", file=sys.stderr, flush=True)
    return 0


def _synced(job) -> None:
    """One sync of ``crag watch``, as it ended."""
    stamp = (job.finished_at or "")[11:19]
    if job.state != "done" or job.report is None:
        print(f"[{stamp}] sync {job.state}: {job.error}", file=sys.stderr, flush=True)
        return
    print(f"[{stamp}] synced", flush=True)
    _print_report(job.report, changes_only=True)


def _export(args: argparse.Namespace) -> int:
    from crag.archive import export_archive

    settings = _settings(args)
    if args.archive.exists() and not args.force:
        raise CragError(f"{args.archive} exists already: choose another name, or add --force to replace it.")
    out = export_archive(settings, args.archive, with_files=args.with_files, with_ratings=args.with_ratings)
    pdfs = f", {out.pdfs} PDFs" if args.with_files else " (without the PDFs: --with-files adds them)"
    ratings = f", {out.ratings} rated answers" if args.with_ratings else ""
    print(f"Wrote {out.path}: {out.files} files, {out.chunks} passages{pdfs}{ratings}; {out.size / 1e6:.1f} MB.")
    for line in out.left_out:
        print(f"note: left out {line}", file=sys.stderr)
    return 0


def _import(args: argparse.Namespace) -> int:
    from crag.archive import import_archive

    settings = _settings(args)
    got = import_archive(settings, args.archive)
    print(
        f"Imported {got.archive}: {got.files} files, {got.chunks} passages ({got.embedder} embeddings). It answers now."
    )
    folder = settings.files_dir
    lines = [
        (got.placed, f"PDFs put into {folder}"),
        (got.absent, "files without their PDF here: answers cite their file and page, without page images"),
        (got.differs, f"PDFs of {folder} that differ from the archive's (the folder's copies were kept)"),
        (got.extra, f"PDFs of {folder} the archive does not hold"),
    ]
    for names, what in lines:
        if names:
            shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
            print(f"{len(names)} {what}: {shown}")
    for note in got.notes:
        print(f"note: {note}", file=sys.stderr)
    if got.in_step:
        return 0
    if args.sync:
        return _sync(settings, rebuild=False)
    print("Sync the index with the folder: `python -m crag index` (or run the import again with --sync).")
    return 0


# ---------------------------------------------------------------------------------------------
# evaluate: the rated answers of each knowledge base as its test set


def _evaluate_parser(commands: Any) -> None:
    evaluate = commands.add_parser(
        "evaluate",
        help="judge the verdicts by the ratings of the answers (the page's Evaluate page), and fit the thresholds",
    )
    evaluate.add_argument("--db", type=Path, help="index folder, with the chats and ratings (default: CRAG_CHROMA_DIR)")
    evaluate.add_argument("--scope", action="append", metavar="PATH", help=SCOPE_HELP.replace("ask", "evaluate", 1))
    evaluate.add_argument("--rerun", action="store_true", help="ask every rated question again and say what changed")
    evaluate.add_argument(
        "--apply", action="store_true", help="apply the fitted thresholds to the scope, when the ratings support them"
    )
    evaluate.add_argument("--revert", action="store_true", help="take back the fit applied to the scope last")
    evaluate.add_argument("--json", action="store_true", help="print one JSON object")


def _evaluate(args: argparse.Namespace) -> int:
    from crag.conversations import Conversations, chats_file
    from crag.feedback import scope_key

    settings = _settings(args)
    store = Conversations(chats_file(settings))
    asked = [scope_key(_scope(args, settings).paths)] if args.scope else None
    scopes = asked or [scope for scope, _ in store.rated_scopes()]
    if not scopes:
        print(
            "No answer is rated yet: rate answers with the thumbs under them (or POST /feedback), then evaluate.",
            file=sys.stderr,
        )
        return 0
    pipeline = _evaluation_pipeline(settings, args.rerun)
    reports = [_scope_report(store, settings, scope, pipeline, args) for scope in scopes]
    if args.json:
        print(json.dumps({"scopes": reports}, ensure_ascii=False))
    else:
        print("\n\n".join(_report_text(report) for report in reports))
    return 0


def _evaluation_pipeline(settings: Settings, rerun: bool) -> Any:
    """The pipeline to ask again with (``rerun``), else the retriever alone, to look for lost passages; None when
    nothing is indexed."""
    from crag.pipeline import Pipeline
    from crag.retriever import open_retriever

    if rerun:
        return Pipeline.from_settings(settings)
    retriever = open_retriever(settings)
    return retriever if retriever.current() is not None else None


def _scope_report(store: Any, settings: Settings, scope: tuple[str, ...], found: Any, args: argparse.Namespace) -> dict:
    from crag.calibration import Thresholds, Verdict, answering, fit, overrides
    from crag.feedback import lost, rerun, verdicts
    from crag.pipeline import Pipeline

    labels = store.labels(scope)
    base = Thresholds(settings.lower_threshold, settings.upper_threshold)
    reverted = store.revert_thresholds(scope) if args.revert else None
    thresholds, source = answering(base, store.applied(scope))
    fitted = fit(labels, thresholds, scope)
    applied = None
    if args.apply and fitted.verdict is Verdict.PROPOSED and fitted.proposed is not None:
        applied = store.apply_thresholds(
            scope, fitted.proposed, thresholds, fitted.decided, fitted.held_out_accuracy, fitted.current_accuracy
        )
        thresholds, source = answering(base, applied)
    retriever = found.retriever if isinstance(found, Pipeline) else found
    report: dict[str, Any] = {
        "scope": list(scope),
        "ratings": len(labels),
        "up": sum(1 for label in labels if label.rating == "up"),
        "verdicts": [
            {"action": v.action.value, "right": v.right, "rated": v.total, "up": v.up, "down": v.down}
            for v in verdicts(labels)
        ],
        "thresholds": {"lower": thresholds.lower, "upper": thresholds.upper, "from": source.value},
        "applied": applied is not None,  # --apply: whether the fit was applied (only when the ratings support it)
        "reverted": reverted is not None,  # --revert: whether a fit was taken back
        "fit": _fit_json(fitted),
        "lost": None
        if retriever is None
        else [_question_json(label) for label in lost(retriever, labels, settings.top_k, settings.retrieval_mode)],
    }
    if isinstance(found, Pipeline):
        report["rerun"] = [_rerun_json(rerun(found, label, **overrides(thresholds, source))) for label in labels]
    return report


def _question_json(label: Any) -> dict[str, Any]:
    was = label.answered
    return {
        "answer_id": label.answer_id,
        "question": was.question,
        "rating": label.rating.value,
        "action": was.action.value if was.action else None,
        "pages": sorted([file, page] for file, page in was.pages),
    }


def _fit_json(fitted: Any) -> dict[str, Any]:
    proposed = fitted.proposed
    return {
        "verdict": fitted.verdict.value,
        "decided": fitted.decided,
        "needed": fitted.needed,
        "current_accuracy": round(fitted.current_accuracy, 4),
        "held_out_accuracy": round(fitted.held_out_accuracy, 4),
        "proposed": {"lower": proposed.lower, "upper": proposed.upper} if proposed else None,
        "proposed_accuracy": round(fitted.proposed_accuracy, 4) if proposed else None,
        "moved": [
            {**_question_json(m.label), "before": m.before.value, "after": m.after.value, "right": m.right_after}
            for m in fitted.moved
        ],
    }


def _rerun_json(again: Any) -> dict[str, Any]:
    now = again.now
    return {
        **_question_json(again.label),
        "status": "same" if again.same else "changed",
        "changes": [c.value for c in again.changes],
        "now": None
        if now is None
        else {
            "action": now.action.value if now.action else None,
            "pages": sorted([file, page] for file, page in now.pages),
            "sentence": now.sentence,
        },
        "error": again.error or None,
    }


def _scope_name(scope: Sequence[str]) -> str:
    return ", ".join(scope) if scope else "all documents"


def _report_text(report: dict[str, Any]) -> str:
    fit, t = report["fit"], report["thresholds"]
    lines = [f"{_scope_name(report['scope'])}: {report['ratings']} rated ({report['up']} up)"]
    lines += [f"  {v['action']:>9}  right {v['right']}/{v['rated']}" for v in report["verdicts"] if v["rated"]]
    if report["reverted"]:
        lines.append("  the fit applied last was taken back")
    lines.append(f"  thresholds: lower {t['lower']:.2f}, upper {t['upper']:.2f} ({t['from']})")
    if report["applied"]:
        lines.append("  the fit below was applied: it answers this scope from now on")
    if fit["verdict"] == "proposed":
        p = fit["proposed"]
        lines.append(
            f"  fit: lower {p['lower']:.2f}, upper {p['upper']:.2f}: held out {fit['held_out_accuracy']:.0%} of "
            f"verdicts right, {fit['current_accuracy']:.0%} now; {len(fit['moved'])} answers change verdict "
            "(--apply applies it)"
        )
    elif fit["verdict"] == "no_support":
        lines.append(
            f"  fit: the ratings do not support a change (held out {fit['held_out_accuracy']:.0%}, "
            f"{fit['current_accuracy']:.0%} now)"
        )
    else:
        lines.append(f"  fit: {fit['needed']} more rated answers needed, thumbs up and down both among them")
    for label in report["lost"] or ():
        lines.append(f"  no longer retrieved: {label['question']}")
    for again in report.get("rerun", ()):
        what = ", ".join(again["changes"])
        lines.append(f"  {again['status']:>7}  {again['question']}" + (f" ({what})" if what else ""))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except CragError as exc:
        print(f"error: {said(str(exc), exc.remedy, REMEDIES)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        if "pydantic_ai" in sys.modules:  # a model was used: what it left open on its loop ends, and so can we
            from crag.models import close_event_loop

            close_event_loop()


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "index": _index,
    "retrieve": _retrieve,
    "ask": _ask,
    "bench": _bench,
    "serve": _serve,
    "mcp": _mcp,
    "watch": _watch,
    "export": _export,
    "import": _import,
    "evaluate": _evaluate,
}
