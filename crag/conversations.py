"""Conversations, kept across reloads and restarts: SQLite beside the index.

Every answer is stored with its trace, so the action, how it was made and its sources show again after a
restart. Each write is one transaction. An answer is written when it starts (marked incomplete) and
again when it ends, so a crash mid-answer leaves the partial answer, marked incomplete, not a question
without a reply. Each conversation keeps its scope (the folders and files it asks; none: every document), and
each answer the scope it was asked in (``Trace.scope``).

An answer may be rated (``rate``): the rating is kept in the same file, with what the answer was made from
(``crag.feedback.Answered``), and goes when its chat is deleted. A scope's ratings are its labels (``labels``), which
export and import as data (``export_labels``, ``import_labels``). Thresholds fitted to them and applied to a scope are
kept here too (``apply_thresholds``, ``revert_thresholds``). Answers made through the HTTP API are kept in chats of
their own, not listed in the page's sidebar (``record``), so that they can be rated.

A store written by an older version gains the columns and tables it lacks when it is opened, in place.
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
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter

from crag.calibration import Applied, Thresholds, fitted_overrides
from crag.errors import CragError
from crag.feedback import NOTE_CHARS, Answered, Label, Rating, Wrong, answered, labels_from_json, labels_json, scope_key
from crag.parts import Suggestion, Suggestions
from crag.types import Answer, method_of

if TYPE_CHECKING:
    from crag.config import Settings

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
CREATE TABLE IF NOT EXISTS ratings (
    answer_id TEXT PRIMARY KEY,
    message INTEGER UNIQUE REFERENCES messages(id) ON DELETE CASCADE,
    rating TEXT NOT NULL CHECK (rating IN ('up', 'down')),
    wrong TEXT NOT NULL DEFAULT '[]',
    note TEXT NOT NULL DEFAULT '',
    scope TEXT NOT NULL DEFAULT '[]',
    action TEXT NOT NULL DEFAULT '',
    answered TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS ratings_by_scope ON ratings (scope);
CREATE TABLE IF NOT EXISTS thresholds (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    scope TEXT NOT NULL,
    lower REAL NOT NULL,
    upper REAL NOT NULL,
    before_lower REAL NOT NULL,
    before_upper REAL NOT NULL,
    labels INTEGER NOT NULL,
    held_out REAL NOT NULL,
    current REAL NOT NULL,
    applied REAL NOT NULL,
    reverted REAL
);
"""
# Columns older stores lack, by table: each added in place, with the default that says what old rows were.
ADDED = {
    # Chats asked every document before they kept a scope.
    "conversations": {
        "scope": "TEXT NOT NULL DEFAULT '[]'",
        "origin": "TEXT NOT NULL DEFAULT 'app'",  # app: the page's; api: an answer of POST /ask
    },
    # Why a message stopped was said in ``error`` only; answers had no id to rate them by, nor a generation.
    "messages": {
        "stop": "TEXT NOT NULL DEFAULT ''",
        "answer_id": "TEXT",
        "generation": "TEXT NOT NULL DEFAULT ''",
    },
}
# Made once the columns they index are there.
INDEXES = "CREATE UNIQUE INDEX IF NOT EXISTS messages_by_answer ON messages (answer_id);"
TITLE_CHARS = 60
log = logging.getLogger(__name__)
_ANSWER = TypeAdapter(Answer)
_ANSWERED = TypeAdapter(Answered)
COLUMNS = "id, title, created, updated, scope"
RATING_COLUMNS = "answer_id, message, rating, wrong, note, answered, created, updated"
API_KEPT = 500  # answers of the HTTP API kept unrated; older unrated ones are deleted as new ones come


class Origin(StrEnum):
    """Who made a chat."""

    APP = "app"  # the page: listed in its sidebar
    API = "api"  # an answer of POST /ask, kept so that it can be rated


class NotRatable(CragError):
    """An answer that cannot be rated: not found, or not saved whole."""


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
    answer_id: str = ""  # an answer's id, as the API gives it; "" for questions and answers saved before ids
    rating: Label | None = None  # what the user said of the answer


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
            for table, columns in ADDED.items():
                have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
                for name, kind in columns.items():
                    if name not in have:
                        db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
            db.executescript(INDEXES)

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
        """The page's chats, most recently active first (not the API's answers)."""
        with self._connect() as db:
            rows = db.execute(
                f"SELECT {COLUMNS} FROM conversations WHERE origin = ? ORDER BY updated DESC", (Origin.APP,)
            ).fetchall()
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
                "SELECT id, role, content, answer, complete, error, stop, m.answer_id, "
                f"{', '.join('r.' + c for c in RATING_COLUMNS.split(', '))} "
                "FROM messages m LEFT JOIN ratings r ON r.message = m.id WHERE conversation = ? ORDER BY id",
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
                answer_id=answer_id or "",
                rating=_label(rating) if rating[0] else None,
            )
            for id_, role, content, answer, complete, error, stop, answer_id, *rating in rows
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
        """A message at the end of the conversation; its id. An answer gets an ``answer_id`` too."""
        with self._connect() as db:
            return _add(db, conversation, role, content, answer, complete, error, stop)

    def update(
        self,
        message: int,
        content: str,
        answer: Answer | None = None,
        complete: bool = True,
        error: str = "",
        keep_error: bool = False,
        stop: Stop | None = None,
        generation: str = "",
    ) -> None:
        """Rewrite a message. ``keep_error``: an error it has already (why it stopped, written by someone else, such
        as the user's Stop in the app's next run) stays, with its ``stop``, in the same transaction; ``error`` and
        ``stop`` apply only without one. ``generation``: the index generation that answered, when known."""
        with self._connect() as db:
            db.execute(
                "UPDATE messages SET content = ?, answer = ?, complete = ?, "
                "error = CASE WHEN ? AND error != '' THEN error ELSE ? END, "
                "stop = CASE WHEN ? AND error != '' THEN stop ELSE ? END, "
                "generation = CASE WHEN ? != '' THEN ? ELSE generation END WHERE id = ?",
                (
                    content,
                    _dump(answer),
                    int(complete),
                    int(keep_error),
                    error,
                    int(keep_error),
                    stop or "",
                    generation,
                    generation,
                    message,
                ),
            )

    # ---- answers of the HTTP API

    def record(self, question: str, history: Sequence[tuple[str, str]], answer: Answer, generation: str = "") -> str:
        """An answer of the HTTP API, kept in a chat of its own (the turns it came with, the question, the answer) so
        that it can be rated; its ``answer_id``. The oldest unrated ones past ``API_KEPT`` are deleted."""
        now = time.time()
        chat = uuid.uuid4().hex
        with self._connect() as db:
            db.execute(
                f"INSERT INTO conversations ({COLUMNS}, origin) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    chat,
                    title_of(question),
                    now,
                    now,
                    json.dumps(list(answer.trace.scope if answer.trace else ()), ensure_ascii=False),
                    Origin.API,
                ),
            )
            for role, text in history:
                _add(db, chat, role, text)
            _add(db, chat, "user", question)
            message = _add(
                db, chat, "assistant", answer.text, answer, answer.complete, answer.error, generation=generation
            )
            db.execute(
                "DELETE FROM conversations WHERE origin = 'api' AND id NOT IN "
                "(SELECT m.conversation FROM messages m JOIN ratings r ON r.message = m.id) AND id NOT IN "
                "(SELECT id FROM conversations WHERE origin = 'api' ORDER BY updated DESC LIMIT ?)",
                (API_KEPT,),
            )
            found = db.execute("SELECT answer_id FROM messages WHERE id = ?", (message,)).fetchone()
        return str(found[0])

    # ---- ratings

    def rate(self, message: int, rating: Rating, wrong: Sequence[Wrong] = (), note: str = "") -> Label:
        """Rate an answer of a chat, or rate it again: what was wrong and the note are those given now. Raises
        ``NotRatable`` for a message that is no answer saved whole."""
        wrong = tuple(dict.fromkeys(wrong)) if rating is Rating.DOWN else ()
        note = " ".join(note.split())[:NOTE_CHARS]
        with self._connect() as db:
            answer_id, answered = _answered(db, message)
            now = time.time()
            db.execute(
                f"INSERT INTO ratings ({RATING_COLUMNS}, scope, action) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (answer_id) DO UPDATE SET rating = excluded.rating, wrong = excluded.wrong, "
                "note = excluded.note, answered = excluded.answered, updated = excluded.updated",
                (
                    answer_id,
                    message,
                    rating,
                    json.dumps(list(wrong)),
                    note,
                    _ANSWERED.dump_json(answered).decode(),
                    now,
                    now,
                    json.dumps(list(answered.scope), ensure_ascii=False),
                    answered.action or "",
                ),
            )
            row = db.execute(f"SELECT {RATING_COLUMNS} FROM ratings WHERE answer_id = ?", (answer_id,)).fetchone()
        return _label(row)

    def rate_answer(self, answer_id: str, rating: Rating, wrong: Sequence[Wrong] = (), note: str = "") -> Label:
        """``rate``, by the answer's id (as the HTTP API gave it)."""
        return self.rate(self._message_of(answer_id), rating, wrong, note)

    def unrate(self, message: int) -> bool:
        """Remove an answer's rating; whether it had one."""
        with self._connect() as db:
            return db.execute("DELETE FROM ratings WHERE message = ?", (message,)).rowcount > 0

    def unrate_answer(self, answer_id: str) -> bool:
        return self.unrate(self._message_of(answer_id))

    def _message_of(self, answer_id: str) -> int:
        with self._connect() as db:
            found = db.execute(
                "SELECT id FROM messages WHERE answer_id = ? AND role = 'assistant'", (answer_id,)
            ).fetchone()
        if found is None:
            raise NotRatable(
                f"No answer has the id “{answer_id[:80]}”: use the answer_id that POST /ask returned (answers are "
                "kept unless CRAG_API_STORE_ANSWERS is off; the oldest unrated ones are dropped)."
            )
        return int(found[0])

    def labels(self, scope: Sequence[str] | None = None) -> builtins.list[Label]:
        """The rated answers of ``scope`` (its paths, in any order; None: of every scope), in the order they were
        first rated."""
        query = f"SELECT {RATING_COLUMNS} FROM ratings"
        args: tuple[str, ...] = ()
        if scope is not None:
            query, args = query + " WHERE scope = ?", (json.dumps(list(scope_key(scope)), ensure_ascii=False),)
        with self._connect() as db:
            rows = db.execute(query + " ORDER BY created, answer_id", args).fetchall()
        return [_label(row) for row in rows]

    def rated_scopes(self) -> builtins.list[tuple[tuple[str, ...], int]]:
        """Every scope with rated answers, and how many, the most rated first."""
        with self._connect() as db:
            rows = db.execute("SELECT scope, COUNT(*) FROM ratings GROUP BY scope ORDER BY COUNT(*) DESC, scope")
            return [(tuple(json.loads(scope)), n) for scope, n in rows.fetchall()]

    def export_labels(self, scope: Sequence[str] | None = None) -> dict[str, Any]:
        """The rated answers of ``scope`` (None: every scope) as JSON-able data, for an export of the knowledge base
        or of the chats; ``import_labels`` reads it back, here or in another copy of the app."""
        return labels_json(self.labels(scope))

    def import_labels(self, data: Any) -> int:
        """Rated answers exported by ``export_labels``; how many were new or newer than those kept. A label this
        store has (the same answer id) is replaced only by a newer rating. Raises ``BadLabels``, importing nothing,
        when ``data`` is not such an export."""
        labels = labels_from_json(data)
        changed = 0
        with self._connect() as db:
            for label in labels:
                changed += db.execute(
                    f"INSERT INTO ratings ({RATING_COLUMNS}, scope, action) VALUES (?, NULL, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (answer_id) DO UPDATE SET rating = excluded.rating, wrong = excluded.wrong, "
                    "note = excluded.note, answered = excluded.answered, updated = excluded.updated "
                    "WHERE excluded.updated > ratings.updated",
                    (
                        label.answer_id,
                        label.rating,
                        json.dumps(list(label.wrong)),
                        label.note,
                        _ANSWERED.dump_json(label.answered).decode(),
                        label.created,
                        label.updated,
                        json.dumps(list(scope_key(label.answered.scope)), ensure_ascii=False),
                        label.answered.action or "",
                    ),
                ).rowcount
        return changed

    # ---- thresholds fitted to a scope's ratings

    def applied(self, scope: Sequence[str]) -> Applied | None:
        """The fit that answers ``scope`` now, or None (the settings' thresholds answer)."""
        with self._connect() as db:
            row = db.execute(
                f"SELECT {APPLIED_COLUMNS} FROM thresholds WHERE scope = ? AND reverted IS NULL ORDER BY id DESC",
                (json.dumps(list(scope_key(scope)), ensure_ascii=False),),
            ).fetchone()
        return _applied(row) if row else None

    def apply_thresholds(
        self,
        scope: Sequence[str],
        thresholds: Thresholds,
        before: Thresholds,
        labels: int,
        held_out: float,
        current: float,
    ) -> Applied:
        """Apply fitted thresholds to ``scope``: they answer its questions from now on, until reverted."""
        key = json.dumps(list(scope_key(scope)), ensure_ascii=False)
        with self._connect() as db:
            db.execute(
                "INSERT INTO thresholds (scope, lower, upper, before_lower, before_upper, labels, held_out, current, "
                "applied) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    key,
                    thresholds.lower,
                    thresholds.upper,
                    before.lower,
                    before.upper,
                    labels,
                    held_out,
                    current,
                    time.time(),
                ),
            )
        applied = self.applied(scope)
        assert applied is not None  # just written
        return applied

    def revert_thresholds(self, scope: Sequence[str]) -> Applied | None:
        """Take back the fit applied last to ``scope``: what answered before it answers again (an earlier fit, or
        the settings'). The fit taken back, or None when none applied."""
        applied = self.applied(scope)
        if applied is not None:
            with self._connect() as db:
                db.execute("UPDATE thresholds SET reverted = ? WHERE id = ?", (time.time(), applied.id))
        return applied


def _add(
    db: sqlite3.Connection,
    conversation: str,
    role: str,
    content: str,
    answer: Answer | None = None,
    complete: bool = True,
    error: str = "",
    stop: Stop | None = None,
    generation: str = "",
) -> int:
    """A message at the end of the conversation, in the transaction ``db``; its id."""
    now = time.time()
    answer_id = uuid.uuid4().hex if role == "assistant" else None
    cursor = db.execute(
        "INSERT INTO messages (conversation, role, content, answer, complete, error, created, stop, answer_id, "
        "generation) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (conversation, role, content, _dump(answer), int(complete), error, now, stop or "", answer_id, generation),
    )
    db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (now, conversation))
    assert cursor.lastrowid is not None  # set by an INSERT
    return cursor.lastrowid


def _answered(db: sqlite3.Connection, message: int) -> tuple[str, Answered]:
    """The id of an answer saved whole and what a rating keeps of it, in the transaction ``db``. An answer saved
    before answers had ids gets one now."""
    row = db.execute(
        "SELECT conversation, answer, complete, answer_id, generation FROM messages "
        "WHERE id = ? AND role = 'assistant'",
        (message,),
    ).fetchone()
    if row is None or not row[1] or not row[2]:
        raise NotRatable(
            "Only an answer that was saved whole can be rated: this one stopped before its end, or is gone."
        )
    conversation, stored, _, answer_id, generation = row
    if not answer_id:
        answer_id = uuid.uuid4().hex
        db.execute("UPDATE messages SET answer_id = ? WHERE id = ?", (answer_id, message))
    turns = db.execute(
        "SELECT role, content FROM messages WHERE conversation = ? AND id < ? AND complete AND content != '' "
        "ORDER BY id",
        (conversation, message),
    ).fetchall()
    asked = max((i for i, (role, _) in enumerate(turns) if role == "user"), default=-1)
    question = turns[asked][1] if asked >= 0 else ""
    return answer_id, answered(_load(stored), question, [tuple(t) for t in turns[:asked]], generation)


def _label(row: Sequence[Any]) -> Label:
    answer_id, message, rating, wrong, note, stored, created, updated = row
    return Label(
        answer_id=answer_id,
        message=message,
        rating=Rating(rating),
        wrong=tuple(Wrong(w) for w in json.loads(wrong)),
        note=note,
        answered=_ANSWERED.validate_json(stored),
        created=created,
        updated=updated,
    )


APPLIED_COLUMNS = "id, scope, lower, upper, before_lower, before_upper, labels, held_out, current, applied"


def _applied(row: Sequence[Any]) -> Applied:
    id_, scope, lower, upper, before_lower, before_upper, labels, held_out, current, applied = row
    return Applied(
        id=id_,
        scope=tuple(json.loads(scope)),
        thresholds=Thresholds(lower, upper),
        before=Thresholds(before_lower, before_upper),
        labels=labels,
        held_out=held_out,
        current=current,
        applied=applied,
    )


def _load(stored: str) -> Answer:
    """A stored answer. A trace stored before a grade's method was a kind names it in words ("similarity (fallback:
    <why>)"): read back into the kind and its detail. An answer stored before answers were parts holds its text
    alone: read back into parts (``crag.legacy``), with its suggestions."""
    data = json.loads(stored)
    for scored in (data.get("trace") or {}).get("retrieved", ()):
        if "detail" not in scored:
            scored["method"], scored["detail"] = method_of(scored.get("method") or "")
    if "parts" in data:
        return _ANSWER.validate_python(data)
    from crag.legacy import stored_parts  # the old answers' readers: loaded with the first old answer, not at start

    answer = _ANSWER.validate_python({**data, "parts": []})
    items = tuple(Suggestion(**s) for s in data.get("suggestions") or ())
    parts = stored_parts(data.get("text", ""), answer.kind.value)
    return replace(answer, parts=(*parts, *([Suggestions(items=items)] if items else [])))


def _dump(answer: Answer | None) -> str | None:
    return _ANSWER.dump_json(answer).decode() if answer is not None else None


def chats_file(settings: Settings) -> Path:
    """Where the chats and their ratings are kept: beside the index (``private_history`` is the page's way out when
    that folder cannot be written)."""
    return settings.chroma_dir / "conversations.sqlite3"


def thresholds_for(settings: Settings, scope: Sequence[str]) -> dict[str, Any]:
    """``fitted_overrides`` of the ratings kept beside the index, for a process that keeps no store open (``crag
    ask``): none when nothing was rated there, and no store is made to be read."""
    if not chats_file(settings).is_file():
        return {}
    try:
        return fitted_overrides(Conversations(chats_file(settings)), settings, scope)
    except CragError as exc:
        log.warning("the thresholds fitted to %s could not be read: %s", list(scope), exc)
        return {}


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
