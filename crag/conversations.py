"""Conversations, kept across reloads and restarts: SQLite beside the index.

Every answer is stored with its trace, so the action, how it was made and its sources show again after a
restart. Each write is one transaction. An answer is written when it starts (marked incomplete) and
again when it ends, so a crash mid-answer leaves the partial answer, marked incomplete, not a question
without a reply. Each conversation keeps its scope (the folders and files it asks; none: every document), and
each answer the scope it was asked in (``Trace.scope``).
"""

from __future__ import annotations

import builtins
import json
import logging
import os
import sqlite3
import stat
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from pydantic import TypeAdapter

from crag.errors import CragError
from crag.types import Answer, method_of

SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    scope TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    content TEXT NOT NULL,
    answer TEXT,
    complete INTEGER NOT NULL DEFAULT 1,
    error TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    stop TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages (conversation, id);
"""
TITLE_CHARS = 60
log = logging.getLogger(__name__)
_ANSWER = TypeAdapter(Answer)
# A store written before conversations kept a scope gains the column; its chats ask every document, as they did.
ADD_SCOPE = "ALTER TABLE conversations ADD COLUMN scope TEXT NOT NULL DEFAULT '[]'"
COLUMNS = "id, title, created, updated, scope"
# A store written before messages kept why they stopped gains the column; the words in ``error`` still say it.
ADD_STOP = "ALTER TABLE messages ADD COLUMN stop TEXT NOT NULL DEFAULT ''"


class Stop(StrEnum):
    """What stopped an answer before its end, when it did not fail."""

    INTERRUPTED = "interrupted"  # a reload or another click ended the run that wrote it
    USER = "user"  # the user's Stop button


@dataclass(frozen=True, kw_only=True)
class Conversation:
    id: str
    title: str
    created: float
    updated: float
    scope: tuple[str, ...] = ()  # folders and files under the files folder it asks; empty for every document

    @classmethod
    def from_row(cls, row: tuple) -> Conversation:
        id_, title, created, updated, scope = row
        return cls(id=id_, title=title, created=created, updated=updated, scope=tuple(json.loads(scope or "[]")))


@dataclass(frozen=True, kw_only=True)
class Message:
    id: int
    role: str  # "user" | "assistant"
    content: str
    answer: Answer | None = None  # with its trace, for the expander and the sources
    complete: bool = True
    error: str = ""  # why it is not complete, in words
    stop: Stop | None = None  # what stopped it, when something did


class HistoryUnavailable(CragError):
    """The conversation store cannot be used now. Its file is left as it is: nothing in it is lost."""


BUSY_TIMEOUT = 5.0  # seconds SQLite retries a locked database before a call gives up
# Only these mean the file itself is damaged. Locked, read-only, a full or failing disk (OperationalError) say
# nothing about what the file holds: it is kept where it is, and the call fails with what to do.
CORRUPT = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})


def title_of(question: str) -> str:
    """A conversation's first title: its first question, shortened."""
    text = " ".join(question.split())
    return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1].rstrip() + "…"


class Conversations:
    """The conversation store in ``path`` (a SQLite file), shared by every session of the app.

    Every call raises ``HistoryUnavailable`` when the file cannot be used now (locked for ``timeout`` seconds,
    read-only, a disk error); only a file that is not a database, or a damaged one, is set aside at start."""

    def __init__(self, path: Path, timeout: float | None = None) -> None:
        self.path = path
        self.timeout = BUSY_TIMEOUT if timeout is None else timeout
        self.recovered = ""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise HistoryUnavailable(_not_writable(path, exc.strerror or type(exc).__name__)) from None
        try:
            self._create()
        except sqlite3.DatabaseError as exc:  # corrupt: _connect turns every other failure into HistoryUnavailable
            # A damaged file is kept aside, never deleted: what it holds may still be recovered.
            aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
            path.replace(aside)
            self._create()
            self.recovered = f"The chat history in {path} was damaged ({exc}); it was kept as {aside.name}."

    def _create(self) -> None:
        with self._connect() as db:
            db.executescript(SCHEMA)
            if "scope" not in {row[1] for row in db.execute("PRAGMA table_info(conversations)")}:
                db.execute(ADD_SCOPE)
            if "stop" not in {row[1] for row in db.execute("PRAGMA table_info(messages)")}:
                db.execute(ADD_STOP)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """One transaction: committed whole, or rolled back whole. A locked file is retried for ``timeout``
        seconds (SQLite's busy timeout)."""
        try:
            db = sqlite3.connect(self.path, timeout=self.timeout)
            try:
                db.execute("PRAGMA foreign_keys = ON")
                db.execute("PRAGMA journal_mode = WAL")  # readers never wait for the writer
                with db:
                    yield db
            finally:
                db.close()
        except sqlite3.DatabaseError as exc:
            if getattr(exc, "sqlite_errorcode", None) in CORRUPT:
                raise
            raise HistoryUnavailable(self._unavailable(exc)) from None

    def _unavailable(self, exc: sqlite3.DatabaseError) -> str:
        """What to do about a history that cannot be used now; its file stays as it is."""
        code = getattr(exc, "sqlite_errorcode", None)
        if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return (
                f"The chat history in {self.path} is locked by another program (a second copy of the app, or a "
                f"tool that has the file open) and stayed locked for {self.timeout:g} s: close that program, then "
                "reload the page. No chat was lost."
            )
        if code in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM, sqlite3.SQLITE_AUTH):
            return _not_writable(self.path, str(exc))
        return (
            f"The chat history in {self.path} cannot be used now ({exc}): check that the disk is not full or "
            "failing, then reload the page. The file was left as it is."
        )

    def create(self, title: str = "New chat", scope: Sequence[str] = ()) -> Conversation:
        now = time.time()
        conversation = Conversation(id=uuid.uuid4().hex, title=title, created=now, updated=now, scope=tuple(scope))
        with self._connect() as db:
            db.execute(
                f"INSERT INTO conversations ({COLUMNS}) VALUES (?, ?, ?, ?, ?)",
                (conversation.id, title, now, now, json.dumps(list(scope), ensure_ascii=False)),
            )
        return conversation

    def list(self) -> list[Conversation]:
        """Most recently active first."""
        with self._connect() as db:
            rows = db.execute(f"SELECT {COLUMNS} FROM conversations ORDER BY updated DESC").fetchall()
        return [Conversation.from_row(row) for row in rows]

    def get(self, conversation: str) -> Conversation | None:
        with self._connect() as db:
            found = db.execute(f"SELECT {COLUMNS} FROM conversations WHERE id = ?", (conversation,)).fetchone()
        return Conversation.from_row(found) if found else None

    def set_scope(self, conversation: str, scope: Sequence[str]) -> None:
        """The folders and files the conversation asks from its next question on (empty: every document)."""
        with self._connect() as db:
            db.execute(
                "UPDATE conversations SET scope = ? WHERE id = ?",
                (json.dumps(list(scope), ensure_ascii=False), conversation),
            )

    def rename(self, conversation: str, title: str) -> None:
        title = " ".join(title.split())[:200]
        if title:
            with self._connect() as db:
                db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation))

    def delete(self, conversation: str) -> None:
        with self._connect() as db:
            db.execute("DELETE FROM conversations WHERE id = ?", (conversation,))

    def messages(self, conversation: str) -> builtins.list[Message]:  # ``list`` here is the method above
        with self._connect() as db:
            rows = db.execute(
                "SELECT id, role, content, answer, complete, error, stop FROM messages WHERE conversation = ? "
                "ORDER BY id",
                (conversation,),
            ).fetchall()
        return [
            Message(
                id=id_,
                role=role,
                content=content,
                answer=_load(answer) if answer else None,
                complete=bool(complete),
                error=error,
                stop=Stop(stop) if stop else None,
            )
            for id_, role, content, answer, complete, error, stop in rows
        ]

    def add(
        self,
        conversation: str,
        role: str,
        content: str,
        answer: Answer | None = None,
        complete: bool = True,
        error: str = "",
        stop: Stop | None = None,
    ) -> int:
        """A message at the end of the conversation; its id."""
        now = time.time()
        with self._connect() as db:
            cursor = db.execute(
                "INSERT INTO messages (conversation, role, content, answer, complete, error, created, stop) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (conversation, role, content, _dump(answer), int(complete), error, now, stop or ""),
            )
            db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (now, conversation))
            assert cursor.lastrowid is not None  # set by an INSERT
            return cursor.lastrowid

    def update(
        self,
        message: int,
        content: str,
        answer: Answer | None = None,
        complete: bool = True,
        error: str = "",
        keep_error: bool = False,
        stop: Stop | None = None,
    ) -> None:
        """Rewrite a message. ``keep_error``: an error it has already (why it stopped, written by someone else, such
        as the user's Stop in the app's next run) stays, with its ``stop``, in the same transaction; ``error`` and
        ``stop`` apply only without one."""
        with self._connect() as db:
            db.execute(
                "UPDATE messages SET content = ?, answer = ?, complete = ?, "
                "error = CASE WHEN ? AND error != '' THEN error ELSE ? END, "
                "stop = CASE WHEN ? AND error != '' THEN stop ELSE ? END WHERE id = ?",
                (content, _dump(answer), int(complete), int(keep_error), error, int(keep_error), stop or "", message),
            )


def _load(stored: str) -> Answer:
    """A stored answer. A trace stored before a grade's method was a kind names it in words ("similarity (fallback:
    <why>)"): read back into the kind and its detail."""
    data = json.loads(stored)
    for scored in (data.get("trace") or {}).get("retrieved", ()):
        if "detail" not in scored:
            scored["method"], scored["detail"] = method_of(scored.get("method") or "")
    return _ANSWER.validate_python(data)


def _dump(answer: Answer | None) -> str | None:
    return _ANSWER.dump_json(answer).decode() if answer is not None else None


def _not_writable(path: Path, why: str) -> str:
    return (
        f"The chat history cannot be stored in {path.parent} ({why}): fix the folder's permissions or set "
        "CRAG_CHROMA_DIR to a writable folder."
    )


def private_history(temp: Path) -> Path:
    """Where chats go while the index folder cannot be written: a file in ``temp/crag-<uid>``, a folder only this
    user can enter. A fixed name in a shared folder can be taken first by another local user (a link to their
    file, or their own folder, to read or swap the chats): such a folder is refused, and a new one with a random
    name is made instead (lost when the app restarts, like the rest of a temporary folder)."""
    uid = os.getuid()
    try:
        try:
            folder = private_folder(temp / f"crag-{uid}")
        except UnsafeFolder as exc:
            folder = Path(tempfile.mkdtemp(prefix=f"crag-{uid}-", dir=temp))  # made 0o700, its name unguessable
            log.warning("%s: chats are kept in %s instead", exc, folder)
    except OSError as exc:
        raise HistoryUnavailable(_not_writable(temp / f"crag-{uid}" / "x", exc.strerror or str(exc))) from None
    return folder / "conversations.sqlite3"


class UnsafeFolder(CragError):
    """A folder for private files that is a link, or that another user owns or can enter."""


def private_folder(folder: Path) -> Path:
    """``folder``, made with mode 0o700 when it is not there; refused unless it is a real folder of this user that
    no one else can enter (a folder others could enter may hold their links already)."""
    with suppress(FileExistsError):  # checked below, whoever made it
        folder.mkdir(mode=0o700)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeFolder(f"{folder} is not a folder (a link or a file): it was not used")
    if info.st_uid != os.getuid():
        raise UnsafeFolder(f"{folder} belongs to another user (uid {info.st_uid}): it was not used")
    if info.st_mode & 0o077:
        raise UnsafeFolder(f"{folder} can be opened by other users (mode {info.st_mode & 0o777:o}): it was not used")
    return folder
