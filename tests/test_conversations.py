"""Conversations in SQLite: kept across restarts with their traces, atomic, and never lost to a damaged file."""

from __future__ import annotations

import os
import sqlite3
import stat
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from crag.conversations import Conversations, Stop, UnsafeFolder, private_folder, private_history, title_of
from crag.parts import Part, Quote
from crag.types import Action, Answer, AnswerKind, Method, ScoredChunk, Source, TermCheck, Trace
from tests.fakes import chunk


def answer(*parts: Part, complete: bool = True) -> Answer:
    """An evidence answer of these parts; by default, one quote of the widget's manual."""
    c = chunk("The widget needs two cores.")
    trace = Trace(
        question="How many cores?",
        standalone_question="How many cores?",
        action=Action.CORRECT,
        retrieved=(ScoredChunk(chunk=c, score=0.9, method=Method.SIMILARITY),),
        thresholds=(-0.8, 0.55),
        terms=TermCheck(("widget",)),
    )
    source = Source(n=1, kind="local", text=c.text, file="manual.pdf", pages=(1,), chunk_ids=(c.id,), bboxes=c.bboxes)
    return Answer(
        parts=parts or (Quote(text="The widget needs two cores.", n=1),),
        backend="embedded",
        model="SmolLM2",
        sources=(source,),
        trace=trace,
        complete=complete,
        error="",
        kind=AnswerKind.EVIDENCE,
    )


def test_a_conversation_and_its_answers_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "chroma_db" / "conversations.sqlite3"
    store = Conversations(path)
    conversation = store.create(title_of("How many cores does the widget need?"))
    store.add(conversation.id, "user", "How many cores does the widget need?")
    store.add(conversation.id, "assistant", answer().text, answer())

    reopened = Conversations(path)  # a new process, after a restart
    assert [c.title for c in reopened.list()] == ["How many cores does the widget need?"]
    user, assistant = reopened.messages(conversation.id)
    assert (user.role, user.content, user.answer) == ("user", "How many cores does the widget need?", None)
    assert assistant.answer == answer(), "the trace comes back whole: the expander and the sources render again"


def test_a_crash_mid_answer_leaves_the_partial_answer_marked_incomplete(tmp_path: Path) -> None:
    store = Conversations(tmp_path / "c.sqlite3")
    conversation = store.create()
    store.add(conversation.id, "user", "How many cores?")
    message = store.add(conversation.id, "assistant", "The widget needs", complete=False)
    # ... the process dies here ...
    [_, partial] = Conversations(tmp_path / "c.sqlite3").messages(conversation.id)
    assert (partial.content, partial.complete) == ("The widget needs", False)
    store.update(message, "The widget needs two cores [1].", answer(), complete=True)
    assert store.messages(conversation.id)[1].complete is True


def test_rename_delete_and_order(tmp_path: Path) -> None:
    store = Conversations(tmp_path / "c.sqlite3")
    first, second = store.create("first"), store.create("second")
    store.add(first.id, "user", "newer activity")
    assert [c.title for c in store.list()] == ["first", "second"], "the most recently active first"
    store.rename(second.id, "  renamed\n chat ")
    store.rename(second.id, "   ")  # an empty title is not a title
    assert store.get(second.id).title == "renamed chat"
    store.delete(first.id)
    assert [c.id for c in store.list()] == [second.id] and store.messages(first.id) == []


def test_a_damaged_file_is_kept_aside_and_a_new_one_started(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    path.write_bytes(b"this is not a database, it is " * 100)
    store = Conversations(path)
    assert "damaged" in store.recovered and store.list() == []
    [aside] = tmp_path.glob("c.sqlite3.damaged-*")
    assert aside.read_bytes().startswith(b"this is not a database"), "nothing is lost"


def test_writers_in_several_threads_lose_nothing(tmp_path: Path) -> None:
    store = Conversations(tmp_path / "c.sqlite3")
    conversation = store.create()

    def write(n: int) -> None:
        for i in range(20):
            store.add(conversation.id, "user", f"{n}-{i}")

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.messages(conversation.id)) == 80


def test_titles_are_short() -> None:
    assert title_of("  How   many\ncores? ") == "How many cores?"
    assert len(title_of("x" * 500)) == 60 and title_of("x" * 500).endswith("…")


# A stored answer whose strip names its heading path, and whose passage its follow-up flag, "context".
STORED = (
    '{"text":"“Use tlmgr remove to delete a package.” [1]","backend":"embedded","model":"SmolLM2","sources":[{"n":1,'
    '"kind":"local","text":"Use tlmgr remove to delete a package.","file":"tlmgr.pdf","pages":[3],"url":"","title":"",'
    '"chunk_ids":["c1"],"bboxes":[],"section":"2.2 Uninstalling"}],"trace":{"question":"And how do I delete it?",'
    '"standalone_question":"And how do I delete it?","action":"correct","retrieved":[{"chunk":{"id":"c1","text":'
    '"Use tlmgr remove to delete a package.","file":"tlmgr.pdf","pages":[3],"section":"2.2 Uninstalling","bboxes":[],'
    '"block_types":[],"parser":"","parser_version":"","file_hash":""},"score":0.7,"method":"similarity","anchor":"",'
    '"context":true}],"thresholds":[-1.0,1.0],"terms":{"terms":[],"missing":[],"unknown":[]},"strips":[{"text":'
    '"Use tlmgr remove to delete a package.","score":0.7,"kept":true,"kind":"local","file":"tlmgr.pdf","pages":[3],'
    '"url":"","title":"","order":[0,0],"chunk_id":"c1","reason":"","context":"2.2 Uninstalling"}],"web_query":"",'
    '"web_results":[],"web_error":"","notes":[],"hint":"","unsupported":[],"timings":{},"llm_calls":0,'
    '"llm_calls_before_answer":0,"input_tokens":0,"output_tokens":0},"complete":true,"error":"","kind":"evidence"}'
)


def test_a_chat_stored_with_the_field_name_context_loads_whole(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    store = Conversations(path)
    conversation = store.create()
    store.add(conversation.id, "user", "And how do I delete it?")
    message = store.add(conversation.id, "assistant", "", answer())
    with sqlite3.connect(path) as db:
        db.execute("UPDATE messages SET answer = ? WHERE id = ?", (STORED, message))
    loaded = store.messages(conversation.id)[1].answer
    assert loaded.trace.strips[0].section == "2.2 Uninstalling", "the strip keeps what it is about"
    assert loaded.trace.retrieved[0].from_history is True, "the passage is still marked as found by the question before"
    # Stored before answers were parts: its text is read back into them, and reads as it did.
    assert loaded.parts == (Quote(text="Use tlmgr remove to delete a package.", n=1),)
    assert loaded.text == "“Use tlmgr remove to delete a package.” [1]"
    store.update(message, loaded.text, loaded)
    assert store.messages(conversation.id)[1].answer == loaded, "saved again, it loads the same"


def test_an_update_can_keep_the_error_a_message_has(tmp_path: Path) -> None:
    """Why an answer stopped, written by one writer, is not overwritten by another that only saves its text."""
    store = Conversations(tmp_path / "c.sqlite3")
    conversation = store.create()
    reply = store.add(conversation.id, "assistant", "", complete=False)
    store.update(reply, "The wid", complete=False, keep_error=True)
    assert store.messages(conversation.id)[0].error == "", "nothing to keep: none is written"
    store.update(reply, "The wid", complete=False, error="You stopped this answer.")
    store.update(reply, "The widget needs", complete=False, error="Interrupted.", keep_error=True)
    [message] = store.messages(conversation.id)
    assert (message.content, message.error) == ("The widget needs", "You stopped this answer.")
    store.update(reply, "The widget needs two cores.", complete=True)  # without keep_error: rewritten whole
    assert store.messages(conversation.id)[0].error == ""


def test_an_update_keeps_what_stopped_a_message_with_its_error(tmp_path: Path) -> None:
    store = Conversations(tmp_path / "c.sqlite3")
    conversation = store.create()
    reply = store.add(conversation.id, "assistant", "", complete=False)
    assert store.messages(conversation.id)[0].stop is None
    store.update(reply, "The wid", complete=False, error="You stopped this answer.", stop=Stop.USER)
    store.update(reply, "The widget", complete=False, error="Interrupted.", keep_error=True, stop=Stop.INTERRUPTED)
    [message] = store.messages(conversation.id)
    assert (message.content, message.error, message.stop) == ("The widget", "You stopped this answer.", Stop.USER)
    store.update(reply, "The widget needs two cores.", complete=True)
    assert store.messages(conversation.id)[0].stop is None


def test_a_store_without_stops_gains_them(tmp_path: Path) -> None:
    path = tmp_path / "conversations.sqlite3"
    store = Conversations(path)
    chat = store.create()
    reply = store.add(chat.id, "assistant", "The wid", complete=False, error="You stopped this answer.")
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE messages DROP COLUMN stop")
    [message] = Conversations(path).messages(chat.id)
    assert (message.id, message.error, message.stop) == (reply, "You stopped this answer.", None)
    Conversations(path).update(reply, "The wid", complete=False, error="Stopped.", stop=Stop.USER)
    assert Conversations(path).messages(chat.id)[0].stop is Stop.USER


def test_a_conversation_keeps_its_scope_and_each_answer_where_it_was_asked(tmp_path: Path) -> None:
    path = tmp_path / "conversations.sqlite3"
    store = Conversations(path)
    chat = store.create("Widget memory", scope=["projects/alpha"])
    asked = replace(answer(), trace=replace(answer().trace, scope=("projects/alpha",)))
    store.add(chat.id, "assistant", asked.text, asked)
    store.set_scope(chat.id, ["projects", "手册/中文.pdf"])  # from the next question on

    reopened = Conversations(path)
    assert reopened.get(chat.id).scope == ("projects", "手册/中文.pdf")
    assert [c.scope for c in reopened.list()] == [("projects", "手册/中文.pdf")]
    assert reopened.messages(chat.id)[0].answer.trace.scope == ("projects/alpha",)
    assert store.create("Everything").scope == () and Conversations(path).list()[0].scope == ()


def test_a_store_without_scopes_gains_them_and_its_chats_ask_everything(tmp_path: Path) -> None:
    path = tmp_path / "conversations.sqlite3"
    with sqlite3.connect(path) as db:  # as a version before scopes wrote it
        db.execute("CREATE TABLE conversations (id TEXT PRIMARY KEY, title TEXT NOT NULL, created REAL NOT NULL, "
                   "updated REAL NOT NULL)")  # fmt: skip
        db.execute("INSERT INTO conversations VALUES ('old', 'An old chat', 1.0, 2.0)")
    db.close()
    store = Conversations(path)
    assert store.get("old").scope == () and store.get("old").title == "An old chat"
    store.set_scope("old", ["courses"])
    assert Conversations(path).get("old").scope == ("courses",)


# While the index folder cannot be written, chats go to the temporary folder, which every local user shares.


@pytest.fixture
def temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The machine's temporary folder, as the page sees it: here, in the test's folder. The page's caches empty."""
    import streamlit as st

    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    st.cache_resource.clear()
    yield folder
    st.cache_resource.clear()


def test_chats_kept_meanwhile_go_to_a_private_folder_not_to_a_link_another_user_planted(temp: Path) -> None:
    from ui import state

    uid = os.getuid()
    theirs = temp / "theirs.sqlite3"
    theirs.write_bytes(b"")
    (temp / f"crag-conversations-{uid}.sqlite3").symlink_to(theirs)  # the name chats were kept under before
    (temp / "their-folder").mkdir(mode=0o777)
    (temp / f"crag-{uid}").symlink_to(temp / "their-folder")

    store = state.temporary_conversations()
    chat = store.create("How many cores?")
    store.add(chat.id, "user", "How many cores?")
    folder = store.path.parent
    assert not folder.is_symlink() and folder.parent == temp and folder.name.startswith(f"crag-{uid}-")
    assert folder.stat().st_uid == uid and stat.S_IMODE(folder.stat().st_mode) == 0o700, "only this user enters it"
    assert theirs.read_bytes() == b"" and list((temp / "their-folder").iterdir()) == [], "nothing reached theirs"
    again = state.temporary_conversations()
    assert again.path == store.path and [c.id for c in again.list()] == [chat.id], "the same folder on every run"


def test_a_private_folder_is_made_once_and_used_again(tmp_path: Path) -> None:
    path = private_history(tmp_path)
    assert path == tmp_path / f"crag-{os.getuid()}" / "conversations.sqlite3"
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert private_history(tmp_path) == path


@pytest.mark.parametrize("taken", ["open to others", "another user's", "a file"])
def test_a_folder_another_user_could_have_made_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: str
) -> None:
    uid = os.getuid()
    fixed = tmp_path / f"crag-{uid}"
    if taken == "a file":
        fixed.write_bytes(b"")
    else:
        fixed.mkdir(mode=0o700)
        fixed.chmod(0o777 if taken == "open to others" else 0o700)
    if taken == "another user's":
        monkeypatch.setattr(os, "getuid", lambda: uid + 4242)  # the folder's owner is then someone else
        fixed = fixed.rename(tmp_path / f"crag-{uid + 4242}")
    with pytest.raises(UnsafeFolder):
        private_folder(fixed)
    path = private_history(tmp_path)
    assert path.parent != fixed and path.parent.parent == tmp_path and path.parent.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize(
    ("words", "method", "detail"),
    [
        ("similarity (fallback: x)", Method.FALLBACK, "x"),
        (
            "similarity (fallback: grader failed: HTTP 500 (json_object))",
            Method.FALLBACK,
            "grader failed: HTTP 500 (json_object)",
        ),
        ("llm (json_object)", Method.LLM, "json_object"),
        ("llm", Method.LLM, ""),
        ("similarity", Method.SIMILARITY, ""),
        ("", None, ""),
    ],
)
def test_a_trace_stored_with_its_grades_method_in_words_loads_as_the_kind(
    tmp_path: Path, words: str, method: Method | None, detail: str
) -> None:
    path = tmp_path / "c.sqlite3"
    store = Conversations(path)
    conversation = store.create()
    message = store.add(conversation.id, "assistant", "", answer())
    with sqlite3.connect(path) as db:
        db.execute(
            "UPDATE messages SET answer = ? WHERE id = ?", (STORED.replace('"similarity"', f'"{words}"'), message)
        )
    loaded = store.messages(conversation.id)[0].answer
    assert (loaded.trace.retrieved[0].method, loaded.trace.retrieved[0].detail) == (method, detail)
    assert loaded.trace.retrieved[0].graded_by == words, "shown as it was"
    assert loaded.trace.retrieved[0].trusted is (method is Method.LLM), "the model's grade, in any output mode"
    store.update(message, loaded.text, loaded)
    assert store.messages(conversation.id)[0].answer == loaded, "saved again, it loads the same"
