"""The sources panel under an answer: each source it cites, with its file and pages (and the page numbers the
document prints, where they differ), its headings, its snippet, and the page image with the passage highlighted;
a web source with its title and link.

Document and web text is shown with ``st.text`` and captions, never as Markdown or HTML.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote, urlsplit

import streamlit as st

from crag.errors import CragError
from crag.parts import Code, Quoted, Table, quoted, quoted_texts
from crag.text import pages_label
from crag.types import Answer, AnswerKind, Source, Trace
from ui.text import md_escape, table_markdown

CLOSE_UP_MARGIN = 54.0  # points of page shown above and below the passage (about four lines)


def sources_panel(answer: Answer, files_dir: Path, key: int) -> None:
    """The sources the answer cites. A written answer that cites none shows what the model was given, as such:
    a citation is never shown that the answer did not make."""
    if not answer.sources:
        return
    shown = list(answer.cited_sources) or list(answer.sources)
    title = f"Sources ({len(shown)})" if answer.cited_sources else f"Given to the model, not cited ({len(shown)})"
    with st.expander(title, icon=":material/menu_book:"):
        if not answer.cited_sources:
            st.caption("The answer cites none of these passages: check it against them before you rely on it.")
        for source in shown:
            with st.container(border=True):
                quotes = shown_quotes(source, answer)
                if source.kind == "local":
                    boxes = passage_boxes(source, answer.trace)
                    local_source(source, boxes, quoted_from(source, answer), files_dir, quotes)
                else:
                    web_source(source, quotes)
        others = [f"[{s.n}]" for s in answer.sources if s not in shown]
        if others:
            kept = "kept by refinement but not quoted" if answer.kind is AnswerKind.EVIDENCE else "given to the model"
            st.caption(f"Also {kept}, not cited: {', '.join(others)}")


def squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def passage_boxes(source: Source, trace: Trace | None) -> tuple:
    """The regions of the chunks whose strips made this source.

    ``Source.bboxes`` comes from one chunk with the source's file and pages, which need not be the
    one that was used when several retrieved chunks share a page; the trace says which were.
    """
    if trace is None:
        return source.bboxes
    kept = [
        squash(s.text)
        for s in trace.strips
        if s.kept and s.kind == "local" and s.file == source.file and tuple(s.pages) == tuple(source.pages)
    ]
    boxes: list = []
    for hit in trace.retrieved:
        chunk = hit.chunk
        if chunk.file == source.file and tuple(chunk.pages) == tuple(source.pages):
            text = squash(chunk.text)
            if any(k and k in text for k in kept):
                boxes += [tuple(b) for b in chunk.bboxes]
    return tuple(dict.fromkeys(boxes)) or source.bboxes


def quoted_from(source: Source, answer: Answer) -> tuple[str, ...]:
    """What the answer took from this source, to highlight: its quotes, or the strips a model was given."""
    if answer.kind is AnswerKind.EVIDENCE:
        return tuple(text for q in quoted(answer.parts) if q.n == source.n for text in quoted_texts(q))
    strips = answer.trace.strips if answer.trace is not None else ()
    return tuple(s.text for s in strips if s.kept and s.kind == "local" and s.chunk_id in source.chunk_ids)


def shown_quotes(source: Source, answer: Answer) -> list[Quoted]:
    """What the answer quotes from this source, as the answer shows it: its sentences, its code, its tables (an
    evidence answer, or the quotes under a written one)."""
    return [q for q in quoted(answer.parts) if q.n == source.n]


def passage_text(source: Source, shown: Sequence[Quoted]) -> None:
    """The quotes the answer took from the source, set as the answer sets them (prose as text, code as code, a table
    as a table); the start of its text when the answer quotes none of it."""
    if not shown:
        st.text(source.snippet)
    for said in shown:
        if isinstance(said, Code):
            st.code(said.text, language=said.language or None)
        elif isinstance(said, Table):
            st.markdown(table_markdown(said.rows))
        else:
            st.text(f"{said.faq}\n{said.text}" if said.faq else said.text)


def local_source(
    source: Source, boxes: tuple, quoted: tuple[str, ...], files_dir: Path, shown: Sequence[Quoted] = ()
) -> None:
    text, image = st.columns([2, 3], gap="medium")
    with text:
        where = f"{md_escape(source.file)} · {pages_label(source.pages)}"
        if source.pages and (printed := printed_pages(files_dir, source.file, source.pages)):
            where += " " + md_escape(f"(printed {printed})")  # what the manual's own page numbers and references say
        st.markdown(f"**\\[{source.n}\\]** :material/description: {where}")
        if source.section:  # what the quote is about: "sudo tlmgr remove --all" under "Uninstalling TeX Live"
            st.caption(f":material/subdirectory_arrow_right: {md_escape(source.section)}")
        passage_text(source, shown)
    with image:
        for page in source.pages[:2]:
            close_up, problem = page_image(files_dir, source.file, page, boxes, quoted, around=CLOSE_UP_MARGIN)
            if close_up is None:
                st.caption(md_escape(problem))
                continue
            st.image(close_up, caption=f"{pages_label([page])}, the passage highlighted", width="stretch")
            with st.popover(f"Whole {pages_label([page])}", icon=":material/fullscreen:"):
                whole, problem = page_image(files_dir, source.file, page, boxes, quoted)
                if whole is not None:
                    st.image(whole, width=620)
                else:
                    st.caption(md_escape(problem))


def web_source(source: Source, shown: Sequence[Quoted] = ()) -> None:
    st.markdown(f"**\\[{source.n}\\]** :material/language: {md_escape(source.title or source.url)}")
    parts = urlsplit(source.url)
    if parts.scheme in ("http", "https") and parts.netloc:
        # Percent-encoding keeps brackets and spaces from ending the Markdown link early.
        href = quote(source.url, safe=":/?#=&%+@,;~")
        st.caption(f"[{md_escape(source.url)}]({href})")
    else:
        st.text(source.url)
    passage_text(source, shown)


def page_image(
    files_dir: Path, file: str, page: int, bboxes: tuple, quoted: tuple[str, ...] = (), around: float | None = None
) -> tuple[bytes | None, str]:
    """The page as PNG with the passage highlighted, or None and why not."""
    found = _source_file(files_dir, file)
    if isinstance(found, str):
        return None, f"Page image unavailable: {found}"
    try:
        return _render(*found, page, tuple(tuple(b) for b in bboxes), around, quoted), ""
    except CragError as exc:
        return None, f"Page image unavailable: {exc}"
    except Exception as exc:  # noqa: BLE001 - a page image is a nicety; the answer stands without it
        return None, f"Page image unavailable ({type(exc).__name__}: {exc})."


def printed_pages(files_dir: Path, file: str, pages: tuple[int, ...]) -> str:
    """The page numbers the document prints there, when they differ from the PDF's; "" when unknown."""
    found = _source_file(files_dir, file)
    return "" if isinstance(found, str) else _printed(*found, tuple(pages))


def _source_file(files_dir: Path, file: str) -> tuple[str, int] | str:
    """A source's PDF and its modification time (what the caches below are keyed on), or why it cannot be read."""
    path = (files_dir / file).resolve()
    if not path.is_relative_to(files_dir.resolve()):
        return f"{file} is outside the files folder."
    try:
        return str(path), path.stat().st_mtime_ns
    except OSError:
        return f"{file} is no longer in the files folder."


@st.cache_data(max_entries=256, show_spinner=False)
def _printed(path: str, mtime: int, pages: tuple[int, ...]) -> str:
    from crag.ingest.pymupdf import printed_pages as labels  # PyMuPDF loads only when a source is shown

    try:
        return labels(Path(path), pages)
    except Exception:  # noqa: BLE001 - a nicety, like the page image; "" is cached, so a bad PDF is read once
        return ""


@st.cache_data(max_entries=64, show_spinner=False)
def _render(path: str, mtime: int, page: int, bboxes: tuple, around: float | None, quoted: tuple[str, ...]) -> bytes:
    from crag.ingest.pymupdf import render_highlight  # PyMuPDF loads only when a page is shown

    return render_highlight(Path(path), page, bboxes, dpi=110, around=around, quoted=quoted)
