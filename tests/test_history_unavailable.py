"""A chat history that cannot be used now (locked, read-only, a disk error) is never set aside nor emptied: only a
file that is not a database is. The page goes on, and says why the history is not saved."""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import crag.conversations
from crag.conversations import Conversations, HistoryUnavailable
from tests.apptest import app, ask, texts, use_pipeline

READ_ONLY = Path("/proc/self")  # a folder no one can create a file in, not even root


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Another program holding the database's lock, as `sqlite3` does with an exclusive transaction open."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("UPDATE conversations SET title = title")
    try:
        yield
    finally:
        holder.execute("COMMIT")
        holder.close()


@pytest.fixture
def short_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(crag.conversations, "BUSY_TIMEOUT", 0.2, raising=False)


def history(path: Path) -> str:
    store = Conversations(path)
    chat = store.create("How many cores?")
    store.add(chat.id, "user", "How many cores?")
    return chat.id


def test_a_locked_history_is_waited_for_then_refused_with_the_fix_and_nothing_is_lost(
    tmp_path: Path, short_wait: None
) -> None:
    path = tmp_path / "conversations.sqlite3"
    chat = history(path)
    store = Conversations(path)
    with locked(path):
        with pytest.raises(HistoryUnavailable, match="locked by another program") as opening:
            Conversations(path)
        with pytest.raises(HistoryUnavailable, match="locked by another program"):
            store.list()
    assert "close that program" in str(opening.value)
    assert list(tmp_path.glob("*.damaged-*")) == [], "a locked file is not a damaged one"
    assert [c.id for c in Conversations(path).list()] == [chat] and len(store.messages(chat)) == 1


@pytest.mark.skipif(not READ_ONLY.is_dir(), reason="needs Linux's /proc")
def test_a_read_only_folder_without_a_history_yet_says_so() -> None:
    with pytest.raises(HistoryUnavailable, match="cannot be stored in /proc/self") as refused:
        Conversations(READ_ONLY / "conversations.sqlite3")
    assert "CRAG_CHROMA_DIR" in str(refused.value)


@pytest.mark.parametrize(
    ("code", "says"),
    [(sqlite3.SQLITE_IOERR, "disk is not full or failing"), (sqlite3.SQLITE_READONLY, "fix the folder's permissions")],
)
def test_a_disk_error_or_a_read_only_file_keeps_the_history_where_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, says: str
) -> None:
    path = tmp_path / "conversations.sqlite3"
    chat = history(path)
    real = sqlite3.connect

    def failing(*args, **kwargs):
        error = sqlite3.OperationalError("disk I/O error" if code == sqlite3.SQLITE_IOERR else "readonly database")
        error.sqlite_errorcode = code
        raise error

    monkeypatch.setattr(sqlite3, "connect", failing)
    with pytest.raises(HistoryUnavailable, match=says):
        Conversations(path)
    monkeypatch.setattr(sqlite3, "connect", real)
    assert list(tmp_path.glob("*.damaged-*")) == []
    assert [c.id for c in Conversations(path).list()] == [chat]


@pytest.fixture
def temporary_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the page keeps conversations meanwhile: in the test's folder, not the machine's /tmp."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_the_page_works_while_the_history_is_locked(
    monkeypatch: pytest.MonkeyPatch, files: Path, tmp_path: Path, short_wait: None, temporary_dir: Path
) -> None:
    use_pipeline(monkeypatch, [0.9])
    path = tmp_path / "chroma_db" / "conversations.sqlite3"
    path.parent.mkdir()
    history(path)
    at = app()  # the page opened the history before another program locked it
    with locked(path):
        ask(at)
        assert not at.exception and not at.main.error, texts(at.main.error)
        assert "locked by another program" in texts(at.sidebar.warning)
        assert [m.name for m in at.chat_message] == ["user", "assistant"], "the question is answered all the same"
        assert "Rebuild knowledge base" in [b.label for b in at.sidebar.button], "the sidebar is whole"
    assert list(path.parent.glob("*.damaged-*")) == []
    assert [c.title for c in Conversations(path).list()] == ["How many cores?"]


@pytest.mark.skipif(not READ_ONLY.is_dir(), reason="needs Linux's /proc")
def test_the_page_works_on_a_read_only_index_folder_without_a_history(
    monkeypatch: pytest.MonkeyPatch, files: Path, temporary_dir: Path
) -> None:
    use_pipeline(monkeypatch, [0.9])
    monkeypatch.setenv("CRAG_CHROMA_DIR", str(READ_ONLY))
    at = ask(app())
    assert not at.exception
    assert "Something went wrong" not in texts(at.error)
    assert "cannot be stored in /proc/self" in texts(at.sidebar.warning)
    assert [m.name for m in at.chat_message] == ["user", "assistant"]
