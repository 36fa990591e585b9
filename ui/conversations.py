"""The sidebar's conversations: a new chat, the saved ones to reopen, rename, export or delete.

Each chat is a button; the open one is the primary button. Deleting asks once, in a dialog that names the chat and
says it cannot be undone: one click to ask, one to confirm, and nothing else to reopen.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from crag.config import Settings
from crag.conversations import Conversation, Conversations, HistoryUnavailable
from crag.types import Source
from ui import state
from ui.text import chat_labels, export_name, md_escape

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
        listing(slot, store, current, settings.files_dir)  # reads the store: a locked one fails after its timeout
    except HistoryUnavailable as exc:
        # The open chat stays in the link and in its file, listed again once the history can be read.
        store, current = state.temporary_conversations(), None
        notes.warning(f"{md_escape(str(exc))} Until then conversations are kept in {md_escape(str(store.path))}.")
        listing(slot, store, current, settings.files_dir)
    if store.recovered:
        notes.warning(md_escape(store.recovered))
    return store, current, lambda chat: listing(slot, store, chat, settings.files_dir, again=True)


def listing(
    slot: DeltaGenerator, store: Conversations, current: str | None, files_dir: Path, again: bool = False
) -> None:
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
                type="primary" if chat.id == current else "secondary",
                icon=":material/chat:",
                on_click=state.open_chat,
                args=(chat.id,),
                width="stretch",
                help="The open chat" if chat.id == current else "Open this chat",
            )
        if current is not None:
            manage(store, current, files_dir)


def manage(store: Conversations, current: str, files_dir: Path) -> None:
    chat = store.get(current)
    if chat is None:
        return
    with st.popover("Rename, export or delete this chat", icon=":material/edit:", width="stretch"):
        title = st.text_input("Title", value=chat.title, key=f"title-{chat.id}", max_chars=200)
        if st.button("Rename", key=f"rename-{chat.id}", icon=":material/edit:"):
            if title.strip():
                store.rename(chat.id, title)
                st.rerun()
            st.warning("A title cannot be blank: the chat keeps its name.")
        st.download_button(
            "Export the whole chat as Markdown",
            lambda: export(store, chat.id, files_dir),  # made when clicked: every answer, with its sources
            file_name=export_name(chat.title, chat.id, "chat"),
            mime="text/markdown",
            icon=":material/download:",
            key=f"export-chat-{chat.id}",
            on_click="ignore",
        )
        st.button(
            "Delete this chat…",
            key=f"delete-{chat.id}",
            icon=":material/delete:",
            on_click=ask_to_delete,
            args=(chat.id,),
        )
    if st.session_state.get(DELETING) == chat.id:
        confirm_delete(store, chat)


DELETING = "deleting_chat"  # the chat whose deletion the dialog asks to confirm


def ask_to_delete(chat: str) -> None:
    st.session_state[DELETING] = chat


def keep() -> None:
    st.session_state.pop(DELETING, None)


def delete(store: Conversations, chat: str) -> None:
    store.delete(chat)
    state.new_chat()
    keep()


@st.dialog("Delete this chat?", on_dismiss=keep)
def confirm_delete(store: Conversations, chat: Conversation) -> None:
    """Asked once, in a dialog: its buttons act before the page's next run, which closes it."""
    if st.session_state.get(DELETING) != chat.id:  # deleted or kept: close the dialog, redraw the whole page
        st.rerun()
    messages = store.messages(chat.id)
    answers = sum(1 for m in messages if m.role == "assistant")
    rated = sum(1 for m in messages if m.rating is not None)
    ratings = f", with your {rated} rating{'s' if rated != 1 else ''} of them," if rated else ""
    st.markdown(
        f"**{md_escape(chat.title)}** and its {answers} answer{'s' if answers != 1 else ''}{ratings} will be deleted. "
        "This cannot be undone."
    )
    with st.container(horizontal=True):
        st.button(
            "Delete",
            key=f"confirm-delete-{chat.id}",
            type="primary",
            icon=":material/delete:",
            on_click=delete,
            args=(store, chat.id),
        )
        st.button("Keep it", key=f"keep-{chat.id}", on_click=keep)


def export(store: Conversations, chat: str, files_dir: Path) -> str:
    """The conversation as one Markdown file, pages named as the sources panel names them."""
    from crag.export import conversation_markdown  # with the answers' modules: loaded on a click
    from ui.sources import printed_pages

    found = store.get(chat)

    def printed(source: Source) -> str:
        return printed_pages(files_dir, source.file, source.pages)

    return conversation_markdown(found.title if found else "Chat", store.messages(chat), printed)
