"""The sidebar: knowledge base status and files, upload, rebuild, model status and pull, answer settings."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import streamlit as st

import crag.models
import crag.pipeline
from crag.config import Settings
from crag.errors import CragError
from crag.ingest.uploads import REMOVED, AlreadyPresent, remove_file, save_upload
from crag.types import AnswerKind
from ui import builds, state
from ui.text import (
    FILE_STATUS,
    built_at,
    file_reason,
    human_bytes,
    md_escape,
)

ANSWER_MODES = {
    "auto": "auto: quote the documents on the built-in model, a written answer on Ollama/OpenAI",
    "evidence": "quote the documents (no model writes the answer)",
    "generated": "a model writes the answer (the built-in 135M model is weak and may invent facts)",
}
EVALUATORS = {
    "auto": "auto: an LLM grader on Ollama/OpenAI, similarity on the embedded model",
    "llm": "LLM grader (schema-constrained)",
    "similarity": "similarity (embeddings and word overlap, no LLM call)",
}


def render(
    settings: Settings, pipeline: crag.pipeline.Pipeline | None, pipeline_error: str, kb: state.KnowledgeBase
) -> Callable[[], None]:
    """The sidebar below the chats. Returns what to call once the page is drawn (``builds.rebuild``)."""
    with st.sidebar:
        st.divider()
        watch = knowledge_base(settings, pipeline, kb)
        st.divider()
        model_status(settings, pipeline, pipeline_error)
        st.divider()
        answer_settings(settings)
    return watch


# ---------------------------------------------------------------------------------------------
# Knowledge base


def knowledge_base(
    settings: Settings, pipeline: crag.pipeline.Pipeline | None, kb: state.KnowledgeBase
) -> Callable[[], None]:
    st.subheader("Knowledge base", anchor=False)
    if kb.error:
        st.error(kb.error)
    gen = kb.generation
    if gen is not None:
        with st.container(horizontal=True):
            st.metric("Files", f"{gen.files:,}")
            st.metric("Passages", f"{gen.chunks:,}")
        parsers = ", ".join(kb.parsers) or settings.parser
        st.caption(
            f"Built {built_at(gen.built_at)} · parser {md_escape(parsers)} · embeddings {md_escape(gen.embedder)}"
        )
    else:
        st.caption(f"Not built yet. Parser: {settings.parser}.")
    if pipeline is not None and pipeline.retriever.lexical_only:  # the index's embedder is missing: say the way out
        st.warning(pipeline.retriever.lexical_only, icon=":material/manage_search:")
    files_list(settings, kb)
    if state.builds(settings).running is None:  # a running build reads the folder already
        if n := len(kb.pending):
            st.info(f"{n} new file{'s' if n > 1 else ''} in the folder: rebuild to index {'them' if n > 1 else 'it'}.")
        if n := len(kb.missing):
            st.warning(
                f"{n} indexed file{'s are' if n > 1 else ' is'} no longer in the folder: answers may still quote "
                f"{'them' if n > 1 else 'it'} until you rebuild."
            )
    upload(settings)
    return builds.rebuild(settings)


def files_list(settings: Settings, kb: state.KnowledgeBase) -> None:
    if not kb.files:
        return
    trouble = any(f.status in ("failed", "new", "missing") for f in kb.files)
    with st.expander(f"Files ({len(kb.files)})", expanded=trouble or len(kb.files) <= 5, icon=":material/folder:"):
        rows = [
            {
                "status": FILE_STATUS.get(f.status, f.status),  # first: the sidebar may be too narrow for all
                "file": f.file,
                "pages": f.pages or None,
                "passages": f.chunks or None,
                "problem": f.error or "; ".join(f.warnings),
            }
            for f in kb.files
        ]
        st.dataframe(
            pd.DataFrame(rows),
            hide_index=True,
            key="files",
            column_config={
                "pages": st.column_config.NumberColumn(width="small"),
                "passages": st.column_config.NumberColumn(width="small"),
            },
        )
        for f in kb.files:
            if f.status == "failed":
                st.error(f"**{md_escape(f.file)}**: {file_reason(f.file, f.error or '')}")
        remove(settings, {f.file: f.chunks for f in kb.files if f.status not in ("missing", "removed")})


def remove(settings: Settings, present: dict[str, int]) -> None:
    """Take a file out of the knowledge base: it is moved aside, not deleted, and the next build drops it."""
    if not present:
        return
    running = state.builds(settings).running is not None  # the build may be reading it
    with st.popover(
        "Remove a file",
        icon=":material/delete:",
        disabled=running,
        help="Wait for the build to end." if running else None,
    ):
        st.caption(
            f"The file is moved into {md_escape(str(settings.files_dir / REMOVED))}, not deleted. "
            "The next build drops its passages; move it back to index it again."
        )
        file = st.selectbox(
            "File", list(present), index=None, placeholder="Choose a file", key="remove_file", disabled=running
        )
        st.button("Remove", key="remove", disabled=running or file is None, on_click=removing, args=(settings, present))


def removing(settings: Settings, present: dict[str, int]) -> None:
    ss = st.session_state
    file = ss.get("remove_file")  # the choice when the button was clicked, not when it was drawn
    if file not in present:
        return
    if state.builds(settings).running is not None:  # it began after the popover was opened
        ss.file_notes = [("warning", "A build is running: remove the file when it ends.")]
        return
    try:
        moved = remove_file(settings.files_dir, file)
    except CragError as exc:
        ss.file_notes = [("error", md_escape(str(exc)))]
        return
    then = " Click **Rebuild knowledge base** to drop its passages." if present[file] else ""
    ss.file_notes = [
        ("success", f"Moved **{md_escape(file)}** into {md_escape(str(moved.parent))} (not deleted).{then}")
    ]


def upload(settings: Settings) -> None:
    ss = st.session_state
    files = st.file_uploader(
        "Add PDFs",
        type=["pdf"],
        accept_multiple_files=True,
        key=f"uploader-{ss.uploader}",
        max_upload_size=settings.max_upload_mb,
        help=f"Saved into {settings.files_dir} (PDF only, up to {settings.max_upload_mb} MB each). "
        "Files copied into that folder by hand are picked up the same way by the next rebuild.",
    )
    if files:
        notes = []
        for file in files:
            try:
                path = save_upload(settings.files_dir, file.name, file.getvalue(), settings.max_upload_mb * 1024 * 1024)
            except AlreadyPresent as exc:
                notes.append(("info", md_escape(str(exc))))
            except CragError as exc:
                notes.append(("error", md_escape(str(exc))))
            except Exception as exc:  # noqa: BLE001 - one bad upload must not stop the others
                notes.append(("error", md_escape(f"{file.name}: could not be saved ({type(exc).__name__}: {exc}).")))
            else:
                notes.append(("success", f"Added **{md_escape(path.name)}**."))
        if any(kind == "success" for kind, _ in notes):
            notes.append(("info", "Click **Rebuild knowledge base** to index the new files."))
        ss.file_notes = notes
        ss.uploader += 1  # a new key gives an empty uploader, so a rerun does not save the files again
        st.rerun()
    for kind, note in ss.file_notes:
        getattr(st, kind)(note)


# ---------------------------------------------------------------------------------------------
# Model


def model_status(settings: Settings, pipeline: crag.pipeline.Pipeline | None, pipeline_error: str) -> None:
    ss = st.session_state
    st.subheader("Model", anchor=False)
    if pipeline is not None:
        backend = pipeline.backend
        st.markdown(f"**{md_escape(backend.name)}** · `{backend.model}`")
        st.caption(backend.reason)
        if pipeline.answer_kind(ss.get(state.ANSWER_MODE)) is AnswerKind.EVIDENCE:
            st.markdown(":blue[:material/format_quote:] Answers quote your documents: no model writes them.")
        elif backend.name == "embedded":
            st.warning(
                "The built-in 135M model writes the answers: it is weak and may invent facts. "
                "Check every answer against its sources, or choose quoted answers in Answer settings.",
                icon=":material/warning:",
            )
    else:
        st.markdown(":red[:material/error:] **No chat model**: see the message on the page.")

    health = state.ollama_health(settings.ollama_url)
    needs_ollama = settings.llm_backend == "ollama" or settings.embed_backend == "ollama"
    may_use_ollama = needs_ollama or settings.llm_backend == "auto" or settings.embed_backend == "auto"
    if health.reachable:
        st.markdown(f":green[:material/check_circle:] Ollama answers at `{health.url}`")
        models = [("chat", settings.chat_model), ("embeddings", settings.embed_model)]
        for role, name in models:
            if health.has(name):
                st.markdown(f":green[:material/check:] `{name}` ({role})")
                continue
            needed = (role == "chat" and settings.llm_backend == "ollama") or (
                role == "embeddings" and settings.embed_backend == "ollama"
            )
            fix = f"`{name}` ({role}) is not in Ollama: pull it here, or run `ollama pull {name}`."
            (st.error if needed else st.warning)(fix if needed else fix + " Until then the built-in model is used.")
            if st.button(f"Pull {name}", key=f"pull-{role}", icon=":material/download:", width="stretch"):
                pull(settings, name, role)
    elif needs_ollama:
        st.error(f"Ollama is not reachable at `{health.url}`: start it with `ollama serve`, or set CRAG_OLLAMA_URL.")
    elif not may_use_ollama:
        st.caption("Ollama is not used with these settings.")
    elif pipeline is None or health.url not in pipeline.backend.reason:
        # When the backend's reason above names the URL, it has said this already, with the fix.
        st.markdown(f":orange[:material/cloud_off:] Ollama is not reachable at `{health.url}`")
    if not health.reachable and may_use_ollama:
        st.caption(
            f"Configured models: `{settings.chat_model}` (chat), `{settings.embed_model}` (embeddings); "
            "whether Ollama has them is checked when it answers."
        )
    if st.button(
        "Check again", key="check_models", icon=":material/sync:", help="Ask Ollama again and reload the model."
    ):
        state.forget_health()
        state.forget_pipeline()
        ss.pull_note = None
        st.rerun()
    note = ss.get("pull_note")
    if note:
        getattr(st, note[0])(note[1])


def pull(settings: Settings, name: str, role: str) -> None:
    ss = st.session_state
    bar = st.progress(0.0, text=f"Pulling `{name}`…")
    fraction = 0.0
    try:
        for p in crag.models.pull_model(settings.ollama_url, name):
            fraction = p.fraction if p.fraction is not None else fraction
            sizes = f" · {human_bytes(p.completed)} of {human_bytes(p.total)}" if p.total else ""
            bar.progress(fraction, text=f"`{name}`: {md_escape(p.status)}{sizes}")
    except CragError as exc:
        ss.pull_note = ("error", str(exc))
    else:
        then = " Run a full rebuild to index your files with it." if role == "embeddings" else ""
        ss.pull_note = ("success", f"Pulled `{name}`.{then}")
        state.forget_pipeline()  # auto mode may now choose Ollama
    state.forget_health()
    st.rerun()


# ---------------------------------------------------------------------------------------------
# Answer settings


def answer_settings(settings: Settings) -> None:
    with st.expander("Answer settings", icon=":material/tune:"):
        st.slider("Passages retrieved (top-k)", 1, max(20, settings.top_k), key=state.TOP_K)
        st.slider(
            "Thresholds (lower, upper)",
            -1.0,
            1.0,
            step=0.05,
            key=state.THRESHOLDS,
            help="A passage scoring at or above the upper threshold makes the action Correct; "
            "when all score below the lower one it is Incorrect; otherwise Ambiguous.",
        )
        st.toggle(
            "Search the web when the documents fall short",
            key=state.WEB,
            disabled=not settings.web_search,
            help=None
            if settings.web_search
            else "Off for this app (CRAG_WEB_SEARCH=off): set CRAG_WEB_SEARCH=on and restart the app to allow it.",
        )
        st.selectbox("Answers", list(ANSWER_MODES), key=state.ANSWER_MODE, format_func=ANSWER_MODES.__getitem__)
        st.selectbox("Retrieval evaluator", list(EVALUATORS), key=state.EVALUATOR, format_func=EVALUATORS.__getitem__)
        st.caption("Changes apply to the next question. Defaults come from the CRAG_* settings.")
