"""What each MCP tool returns: a pydantic model (the tool's output schema) and the same as readable text.

``ask`` returns the answer contract (``crag.contract.AnswerOut``) with the cited sources and the warnings the app
would show; ``search`` the graded passages; ``list_documents`` the manifest by folder. Each local page has a
resource URI (``page_uri``) that a client can read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import PurePosixPath
from urllib.parse import quote

from pydantic import BaseModel, Field

from crag.contract import AnswerOut, CitationOut, TermsOut, citations
from crag.errors import Remedy
from crag.markdown import literal
from crag.messages import unsupported_message
from crag.models import BackendInfo
from crag.text import pages_label
from crag.types import NOT_WRITTEN, Answer, AnswerKind, FileResult
from crag.websearch import OFF_REASON

Printed = Callable[[str, Sequence[int]], str]  # (file, pages) -> the page numbers the document prints there

UNCITED = "The answer cites none of its sources: check it against them before you rely on it."


def page_uri(file: str, page: int | None = None) -> str:
    """The resource of a document's page (of the whole document without ``page``). Stable: the file's path under
    the files folder, percent-encoded, and the page of the PDF from 1."""
    return f"crag://files/{quote(file, safe='/')}" + (f"?page={page}" if page is not None else "")


# ---------------------------------------------------------------------------------------------
# search


class PassageOut(BaseModel):
    rank: int = Field(description="Its place in retrieval, from 1.")
    file: str = Field(description="The document, relative to the files folder.")
    pages: list[int] = Field(description="Its pages in the PDF, from 1.")
    printed_pages: str = Field(description="The page numbers the document prints there, when they differ; else empty.")
    section: str = Field(description="The headings above it.")
    text: str
    grade: float = Field(description="The retrieval evaluator's grade of its relevance to the question, in [-1, 1].")
    kept: bool = Field(description="Whether refinement kept part of it as knowledge for the answer.")
    anchor: str = Field(description="The question's term it was searched for again, when the first search missed it.")
    uri: str = Field(description="The resource with the text of its first page.")


class SearchOut(BaseModel):
    """The graded evidence for a question. No model was called: the similarity evaluator grades."""

    question: str
    scope: list[str] = Field(description="The folders and files searched; empty for every document.")
    action: str | None = Field(
        description="The CRAG action for the whole set: correct (a passage answers), ambiguous (some come "
        "close), incorrect (none does)."
    )
    passages: list[PassageOut]
    terms: TermsOut = Field(description="The question's specific terms, and the near misses: those no passage has.")
    notes: list[str] = Field(description="How the action was decided, near misses included.")


def search_out(answer: Answer, printed: Printed) -> SearchOut:
    trace = answer.trace
    assert trace is not None  # a finished answer has its trace
    kept = {s.chunk_id for s in trace.strips if s.kept and s.kind == "local"}
    passages = [
        PassageOut(
            rank=rank,
            file=g.chunk.file,
            pages=list(g.chunk.pages),
            printed_pages=printed(g.chunk.file, g.chunk.pages),
            section=g.chunk.section,
            text=g.chunk.text,
            grade=round(g.score, 4),
            kept=g.chunk.id in kept,
            anchor=g.anchor,
            uri=page_uri(g.chunk.file, min(g.chunk.pages, default=1)),
        )
        for rank, g in enumerate(trace.retrieved, start=1)
    ]
    t = trace.terms
    terms = TermsOut(terms=list(t.terms), missing=list(t.missing), unknown=list(t.unknown))
    action = trace.action.value if trace.action else None
    return SearchOut(
        question=trace.question,
        scope=list(trace.scope),
        action=action,
        passages=passages,
        terms=terms,
        notes=list(trace.notes),
    )


def search_text(out: SearchOut) -> str:
    where = " in " + ", ".join(f"`{p}`" for p in out.scope) if out.scope else ""
    lines = [f"CRAG action{where}: {out.action or 'none'} (graded without a model)."]
    if out.terms.unknown:
        unknown = ", ".join(f"“{t}”" for t in out.terms.unknown)
        lines.append(f"Near miss: the documents{where} never mention {unknown}.")
    elif out.terms.missing:
        lines.append("Near miss: no passage found mentions " + ", ".join(f"“{t}”" for t in out.terms.missing) + ".")
    for p in out.passages:
        printed = f" (printed {p.printed_pages})" if p.printed_pages else ""
        section = f" — {p.section}" if p.section else ""
        state = "kept" if p.kept else "dropped"
        lines += ["", f"[{p.rank}] {p.file}, {pages_label(p.pages)}{printed}{section} — grade {p.grade:+.2f}, {state}"]
        lines += [p.text, p.uri]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# ask


class CitedOut(CitationOut):
    printed_pages: str = Field(description="The page numbers the document prints there, when they differ; else empty.")
    uri: str | None = Field(description="The resource with the text of its first page (local sources).")


class AskOut(AnswerOut):
    """The answer as ``python -m crag ask --json`` prints it, with the sources it cites and the app's warnings."""

    citations: list[CitedOut] = Field(description="The sources the answer cites, and only those.")
    warnings: list[str] = Field(description="What the app would warn of under this answer.")


def warnings(answer: Answer) -> list[str]:
    """The app's warnings: names the model may have invented, an answer that cites nothing or stopped early, a
    web search that failed, and the tip to ask in the documents' language."""
    trace = answer.trace
    found = []
    if trace is not None and trace.unsupported:
        found.append(unsupported_message(trace.question, trace.unsupported))
    if answer.uncited and answer.complete:
        found.append(UNCITED)
    if not answer.complete:
        found.append(answer.error or "The answer stopped early: ask again.")
    if trace is not None and trace.web_error and trace.web_error != OFF_REASON:
        found.append(f"Web search was not available: {trace.web_error}.")
    if trace is not None and trace.remedy:
        found.append(REMEDIES[trace.remedy])
    elif trace is not None and trace.hint:
        found.append(trace.hint)
    return found


def ask_out(answer: Answer, backend: BackendInfo, printed: Printed) -> AskOut:
    cited = [
        CitedOut(
            **c.model_dump(),
            printed_pages=printed(c.file, c.pages) if c.file else "",
            uri=page_uri(c.file, min(c.pages, default=1)) if c.file else None,
        )
        for c in citations(answer)
    ]
    out = AnswerOut.of(answer, backend, REMEDIES, markdown=True)
    return AskOut(**out.model_dump(), citations=cited, warnings=warnings(answer))


def ask_text(out: AskOut) -> str:
    """The answer as Markdown (it is written so already), with what the documents and the web say, and their names,
    as text: a client that renders it shows no image or link a document put there."""
    made = NOT_WRITTEN.get(AnswerKind(out.kind), f"written by {out.model}")
    lines = [out.answer, "", f"CRAG action: {out.action or 'none'}; {made}."]
    if out.citations:
        lines += ["", "Sources:"]
    for c in out.citations:
        if c.kind == "web":
            lines.append(f"[{c.n}] {literal(c.title or c.url or '')}: {literal(c.url or '')}")
            continue
        printed = f" (printed {literal(c.printed_pages)})" if c.printed_pages else ""
        lines.append(f"[{c.n}] {literal(c.file or '')}, {pages_label(c.pages)}{printed}: “{literal(c.quote)}” {c.uri}")
    lines += [f"Warning: {w}" for w in out.warnings]
    if out.suggestions:
        lines += ["", "Your documents may word it otherwise. The sections closest to the question (ask with a title):"]
        lines += [f"- “{literal(s.title)}” ({literal(s.file)}, p. {s.page})" for s in out.suggestions]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# list_documents


def folder_of(file: str) -> str:
    parent = PurePosixPath(file).parent.as_posix()
    return "" if parent == "." else parent


class FileOut(BaseModel):
    file: str = Field(description="Its path relative to the files folder.")
    folder: str = Field(description="The folder it is in, relative to the files folder; empty at the top.")
    status: str = Field(description="indexed | unchanged (indexed by an earlier build) | failed | skipped")
    pages: int
    chunks: int = Field(description="The passages the index holds of it.")
    error: str = Field(description="Why it failed or was skipped; empty otherwise.")
    warnings: list[str]
    uri: str | None = Field(description="The resource with its text, page by page (indexed files).")


class FolderOut(BaseModel):
    folder: str = Field(description="Relative to the files folder; empty for the files at the top.")
    files: int
    chunks: int


class DocumentsOut(BaseModel):
    """The documents of the knowledge base, by folder, as the last build left them."""

    generation: str | None = Field(description="The index generation that answers; null when nothing is built.")
    folders: list[FolderOut]
    files: list[FileOut]


def documents_out(generation: str | None, files: Sequence[FileResult], held: Sequence[str]) -> DocumentsOut:
    out = [
        FileOut(
            file=f.file,
            folder=folder_of(f.file),
            status=f.status,
            pages=f.pages,
            chunks=f.chunks,
            error=f.error,
            warnings=list(f.warnings),
            uri=page_uri(f.file) if f.status in held else None,
        )
        for f in sorted(files, key=lambda f: f.file.lower())
    ]
    folders: dict[str, FolderOut] = {}
    for f in out:
        folder = folders.setdefault(f.folder, FolderOut(folder=f.folder, files=0, chunks=0))
        folder.files += 1
        folder.chunks += f.chunks
    return DocumentsOut(generation=generation, folders=sorted(folders.values(), key=lambda f: f.folder), files=out)


# A remedy in MCP's words. No tool builds: a build is for the app or the command line beside this server.
REMEDIES = {
    Remedy.BUILD: "Build the knowledge base: Rebuild knowledge base in the app, or `python -m crag index`.",
    Remedy.FULL_REBUILD: "Run a full rebuild: Rebuild knowledge base with 'full rebuild' in the app, or "
    "`python -m crag index --rebuild`.",
}


def documents_text(out: DocumentsOut) -> str:
    if out.generation is None:
        return f"Nothing is indexed yet. {REMEDIES[Remedy.BUILD]}"
    lines = [f"{len(out.files)} files in {len(out.folders)} folders (index generation {out.generation})."]
    for f in out.files:
        detail = f.error or f"{f.pages} pages, {f.chunks} passages"
        lines.append(f"{f.status:>9}  {f.file}  {detail}" + (f"  {f.uri}" if f.uri else ""))
    return "\n".join(lines)
