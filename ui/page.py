"""The pages: the chat (settings, the pipeline, the sidebar, then the conversation) and Evaluate. Nothing here
raises to Streamlit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from crag.config import Settings
from crag.errors import CragError
from ui import chat as talk
from ui import conversations, sidebar, state, watching
from ui import scope as scopes
from ui import settings as answer_settings
from ui.text import md_escape

TITLE = "Chat with your PDFs"


def main() -> None:
    # 400 px: the Files table's status and names and the settings' choices show whole (the default cuts them).
    st.set_page_config(page_title="CRAG knowledge base", page_icon="📚", layout="wide", initial_sidebar_state=400)
    state.init()
    # Two pages: the chat, and the evaluation of the answers users rated. Each links to the other with the page's
    # address (the open chat, the answer settings), which Streamlit's own menu would drop.
    # Scripts, each a line that calls its page: the page tests switch to a page by its path.
    here = Path(__file__).parent
    PAGES["chat"] = st.Page(here / "chat_page.py", title="Chat", icon=":material/forum:", default=True)
    PAGES["evaluate"] = st.Page(
        here / "evaluate_page.py", title="Evaluate", icon=":material/fact_check:", url_path="evaluate"
    )
    st.navigation(list(PAGES.values()), position="hidden").run()


PAGES: dict[str, Any] = {}  # this run's pages, by name


def link(page: str, label: str, icon: str) -> None:
    """A link to another page that keeps this page's address: the open chat and the answer settings."""
    st.page_link(PAGES[page], label=label, icon=icon, query_params=st.query_params.to_dict())


def chat_page() -> None:
    st.title(f"📚 {TITLE}", anchor=False)
    st.caption(
        "Answers come from the PDFs in your knowledge base, checked with Corrective RAG: retrieved passages are "
        "graded, weak retrieval is corrected with a web search when that is on, and every answer shows how it was made."
    )
    try:
        base = state.load_base_settings()
    except CragError as exc:
        st.error(str(exc))  # nothing can work without settings; the message names the variable to fix
        return
    try:
        run(base, answer_settings.options(base))
    except Exception as exc:  # noqa: BLE001 - the last line of defence: the page and the history stay
        st.error(
            f"Something went wrong ({type(exc).__name__}: {md_escape(str(exc))}). Your conversation is kept; "
            "try again, and if it keeps happening, restart the app and check its log."
        )


def run(settings: Settings, options: dict[str, Any]) -> None:
    loading = state.models(settings)
    if state.reopen_if_rebuilt(loading.pipeline):  # a full rebuild moved the index to another embedder
        loading = state.models(settings)
    watching.remember(settings)  # before anything it changes is read: a sync that ends meanwhile redraws the page
    # The index is opened (and checked) by the pipeline's loading: the first page lists it without opening it.
    kb = state.index_contents(settings, verify=loading.pipeline is not None)
    with st.sidebar:
        top = st.container()  # a running build's progress: above the chats, where it is seen without scrolling
        store, chat, relist = conversations.render(settings)
        link("evaluate", "Evaluate your rated answers", ":material/fact_check:")
    watch = sidebar.render(settings, loading, kb, top)
    if loading.error:
        st.error(loading.error)
    if kb.empty and not kb.error:
        empty_state(settings, kb, options["web"])
    elif kb.generation is not None and chat is None and not st.session_state.get("question"):
        gen = kb.generation
        st.info(
            f"Ready: {gen.files:,} file{'s' if gen.files != 1 else ''}, {gen.chunks:,} passages. Ask a question below; "
            "each answer shows its CRAG action, how it was made, and the pages it comes from.",
            icon=":material/forum:",
        )
    if not kb.empty:  # where the next question is asked: above the chat
        options = {**options, "scope": list(scopes.picker(store, chat, kb.files))}
    options = {**options, **state.thresholds(store, settings, options)}  # a fit applied to the scope answers it
    try:
        talk.render(settings, loading, options, store, chat, relist)
    finally:
        watch()  # the build's status, watched only now that any answer of this run is done (or failed)


def empty_state(settings: Settings, kb: state.IndexContents, web: bool) -> None:
    with st.container(border=True):
        if state.builds(settings).running is not None:  # no "waiting" files and no build button meanwhile
            st.markdown("#### :material/hourglass_top: Your knowledge base is being built")
            st.markdown(
                "Its progress is in the sidebar. This page shows the knowledge base once the build ends; "
                "until then nothing is indexed to answer from."
            )
            return
        folder = md_escape(str(settings.files_dir.resolve()))
        st.markdown("#### :material/inventory_2: Your knowledge base is empty")
        build = (
            "2. They are indexed by themselves: the folder is watched, and the sidebar shows each file's state.\n"
            if state.watcher(settings) is not None
            else "2. Click **Rebuild knowledge base** in the sidebar and watch the progress bar.\n"
        )
        st.markdown(
            f"1. Drop PDF files into **{folder}**, or upload them in the sidebar.\n"
            + build
            + "3. Ask a question below. Answers cite the pages they come from."
        )
        if kb.pending:
            n = len(kb.pending)
            if state.watcher(settings) is not None:  # read by themselves: no button to press
                st.caption(f"{n} file{'s' if n > 1 else ''} waiting to be indexed, in a few seconds.")
                return
            names = ", ".join(md_escape(name) for name in kb.pending[:5]) + (" …" if n > 5 else "")
            st.caption(f"{n} file{'s' if n > 1 else ''} waiting to be indexed: {names}")
            if st.button(
                "Build the knowledge base now", type="primary", icon=":material/play_arrow:", key="build_now_main"
            ):
                st.session_state.build_now = True
                st.rerun()
        elif web:
            st.caption("Until then, questions are answered from the web.")
