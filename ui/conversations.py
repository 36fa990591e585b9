"""The sidebar's conversations: a new chat, the saved ones to reopen, rename or delete."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from crag.config import Settings
from crag.conversations import Conversations, HistoryUnavailable
from ui import state
from ui.text import chat_labels, md_escape

SHOWN = 30  # conversations listed; the rest stay stored


def render(settings: Settings) -> tuple[Conversations, str | None, Callable[[str], None]]:
    """The list in the sidebar; returns the store, the open conversation (None: a new, unsaved chat) and a
    function that lists again, with a given chat open: the first question of a new chat creates it after the
    sidebar was drawn, and the user should see it listed while its answer comes."""
    st.button(
        "New chat",
        icon=":material/add_comment:",
        key="new_chat",
        on_click=state.new_chat,
        width="stretch",
        help="Start a new conversation. The others are kept below; the knowledge base is not touched.",
    )
    notes, slot = st.container(), st.empty()
    try:
        store = state.conversations(settings)
        current = state.current_chat(store)
        listing(slot, store, current)  # reads the store: a locked one fails after its timeout
    except HistoryUnavailable as exc:
        # The open chat stays in the link and in its file, listed again once the history can be read.
        store, current = state.temporary_conversations(), None
        notes.warning(f"{md_escape(str(exc))} Until then conversations are kept in {md_escape(str(store.path))}.")
        listing(slot, store, current)
    if store.recovered:
        notes.warning(md_escape(store.recovered))
    return store, current, lambda chat: listing(slot, store, chat, again=True)


def listing(slot: DeltaGenerator, store: Conversations, current: str | None, again: bool = False) -> None:
    """The saved chats in ``slot``, newest first. Drawn ``again`` in the same run, their buttons take other keys
    (a key names one widget per run)."""
    chats = store.list()
    if not chats:
        return
    with (
        slot.container(),
        st.expander(f"Conversations ({len(chats)})", expanded=True, icon=":material/forum:"),
    ):
        for chat, label in zip(chats[:SHOWN], chat_labels(chats[:SHOWN]), strict=True):
            st.button(
                label,
                key=f"chat-{chat.id}" + ("-again" if again else ""),
                type="secondary" if chat.id == current else "tertiary",
                icon=":material/chat:" if chat.id == current else None,
                on_click=state.open_chat,
                args=(chat.id,),
                width="stretch",
            )
        if current is not None:
            manage(store, current)


def manage(store: Conversations, current: str) -> None:
    chat = store.get(current)
    if chat is None:
        return
    with st.popover("Rename or delete this chat", icon=":material/edit:", width="stretch"):
        title = st.text_input("Title", value=chat.title, key=f"title-{chat.id}", max_chars=200)
        if st.button("Rename", key=f"rename-{chat.id}", icon=":material/edit:"):
            if title.strip():
                store.rename(chat.id, title)
                st.rerun()
            st.warning("A title cannot be blank: the chat keeps its name.")
        sure = st.checkbox("Delete it with all its answers: this cannot be undone", key=f"sure-{chat.id}")
        if st.button("Delete this chat", key=f"delete-{chat.id}", icon=":material/delete:", disabled=not sure):
            store.delete(chat.id)
            state.new_chat()
            st.rerun()
