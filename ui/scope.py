"""The scope picker above the chat: where the next question is asked.

"All documents", each knowledge base (a folder of the files folder, ``crag.scope``) with its file count, or
"Choose documents…", a searchable list of the indexed documents. An open chat keeps its scope in the conversation
store, so a reload or another tab asks where it did; a scope changed mid-chat applies from the next question (each
answer keeps the scope it was asked in). A new chat, not saved yet, keeps it in the page's URL (``?scope=``) until
its first question creates it with that scope; "New chat" starts at "All documents".

A chat whose folder is no longer in the knowledge base (renamed, or removed and rebuilt) shows it as missing and
offers "All documents"; the pipeline refuses to ask there (``UnknownScope``), and the answer offers the same.
"""

from __future__ import annotations

import streamlit as st

from crag.conversations import Conversations
from crag.scope import HELD, TOP_LEVEL, KnowledgeBase, Scope, knowledge_bases, missing
from crag.types import FileResult
from ui.text import md_escape

ALL = "All documents"
CHOOSE = "Choose documents…"
PARAM = "scope"  # the URL's query parameter of a new chat's scope, one value per path


def current(store: Conversations, chat: str | None) -> tuple[str, ...]:
    """The scope the next question is asked in: the open chat's, or the new chat's from the URL."""
    if chat is not None:
        found = store.get(chat)
        return found.scope if found else ()
    return tuple(st.query_params.get_all(PARAM))


def chat_now() -> str | None:
    """The chat open when a widget's callback runs: a new chat's first question creates it after the picker was
    drawn, and a choice made then is that chat's."""
    return st.query_params.get("chat") or None


def choose(store: Conversations, paths: list[str] | tuple[str, ...], choosing: bool = False) -> None:
    """Ask the next questions in ``paths`` (none: every document), kept with the open chat or in the URL.
    ``choosing``: the picker shows "Choose documents…" even before a document is chosen."""
    chat = chat_now()
    st.session_state[f"scope-{chat or 'new'}-choosing"] = choosing
    if chat is not None:
        store.set_scope(chat, list(paths))
    elif paths:
        st.query_params[PARAM] = list(paths)
    elif PARAM in st.query_params:
        del st.query_params[PARAM]


def forget_new() -> None:
    """The new chat's scope is the chat's own once it is created (or a New chat starts at All documents)."""
    st.session_state.pop("scope-new-choosing", None)
    if PARAM in st.query_params:
        del st.query_params[PARAM]


def label(kb: KnowledgeBase) -> str:
    """A knowledge base as the picker names it: "projects — 3 files, 1 could not be indexed"."""
    name = f"Files folder {TOP_LEVEL}" if kb.name == TOP_LEVEL else kb.name
    count = f"{kb.files} file{'s' if kb.files != 1 else ''}"
    failed = f", {kb.other} could not be indexed" if kb.other else ""  # failed or skipped by the build: not "yet"
    return f"{name} — {count}{failed}"


def documents_of(files: list[FileResult]) -> list[str]:
    """The documents a question can be asked of: those the index holds passages of."""
    return [f.file for f in files if f.status in HELD and f.chunks > 0]


def picker(store: Conversations, chat: str | None, files: list[FileResult]) -> tuple[str, ...]:
    """The picker, drawn above the chat; returns the scope of the next question."""
    scope = current(store, chat)
    kbs = knowledge_bases(files)
    gone = missing(Scope(scope), files) if scope else []
    labels = {ALL: ALL} | {kb.name: label(kb) for kb in kbs} | {p: f"{p} — missing" for p in gone} | {CHOOSE: CHOOSE}
    key = f"scope-{chat or 'new'}"
    ss = st.session_state
    if ss.get(f"{key}-choosing") or (scope and (len(scope) > 1 or scope[0] not in labels)):
        ss[key] = CHOOSE
    else:
        ss[key] = scope[0] if scope else ALL
    # The widgets show the stored scope each run (set above, not by an index), and their callbacks store a choice
    # before the run that draws it: a scope changed elsewhere (another tab, "All documents" below) shows as it is.
    with st.container(horizontal=True, vertical_alignment="bottom"):
        st.selectbox(
            "Ask in",
            list(labels),
            format_func=labels.__getitem__,
            key=key,
            on_change=pick,
            args=(store, key),
            help="Where the next question is asked: every document, one knowledge base (a folder of the files "
            "folder, its subfolders included), or documents you choose. The chat keeps it.",
        )
        if ss[key] == CHOOSE:
            documents(store, key, scope, files)
    if gone:
        offer_all(store, gone)
    return scope


def pick(store: Conversations, key: str) -> None:
    picked = st.session_state[key]
    if picked == CHOOSE:
        choose(store, current(store, chat_now()), choosing=True)
    else:
        choose(store, [] if picked == ALL else [picked])


def documents(store: Conversations, key: str, scope: tuple[str, ...], files: list[FileResult]) -> None:
    """The searchable list of documents; the scope is what is selected (nothing selected: every document)."""
    options = list(dict.fromkeys([*documents_of(files), *scope]))  # a chat's folders stay shown, and removable
    st.session_state[f"{key}-documents"] = list(scope)

    def changed() -> None:
        choose(store, st.session_state[f"{key}-documents"], choosing=True)

    st.multiselect(
        "Documents",
        options,
        key=f"{key}-documents",
        on_change=changed,
        placeholder="Type to search your documents",
        help="Only these documents are asked. With none chosen, every document is.",
    )


def offer_all(store: Conversations, gone: list[str]) -> None:
    names = ", ".join(f"`{md_escape(p)}`" for p in gone)
    st.warning(
        f"This chat asks {names}, which is no longer in the knowledge base (renamed, or removed and rebuilt). "
        "Choose another knowledge base above, or ask every document.",
        icon=":material/folder_off:",
    )
    st.button(ALL, key="scope-all", icon=":material/select_all:", on_click=choose, args=(store, []))
