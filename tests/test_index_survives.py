"""A failed update never removes the index that answers. A lock, a full disk or permissions stop the build with what to
do and leave the index as it was; what the build cannot read is moved aside, never deleted. Real Chroma on tmp_path,
real PDFs, the hashing embedder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from chromadb.api.models.Collection import Collection
from chromadb.errors import InternalError

import crag.store.local
from crag.config import Settings
from crag.errors import CragError
from crag.ingest import sync
from crag.retriever import Retriever
from crag.store import Store
from crag.store.chroma import forget_embedded
from tests.fakes import HashEmbedder
from tests.helpers import widget_kb
from tests.pdfs import manual_pdf

pytestmark = pytest.mark.reliability
QUESTION = "How much memory does the widget need?"
LOCKED = "error returned from database: (code: 5) database is locked"
DISK_FULL = "error returned from database: (code: 13) database or disk is full"


@pytest.fixture
def kb(tmp_path: Path) -> Settings:
    return widget_kb(tmp_path)


def answers_from(settings: Settings, generation: str, retriever: Retriever | None = None) -> None:
    """The generation answers: named by the pointer, and a question finds its passage (with a new retriever and, when
    given, one that was open before)."""
    assert Store(settings.chroma_dir).active().id == generation
    for asking in [Retriever(settings, HashEmbedder()), *([retriever] if retriever else [])]:
        hits = asking.retrieve(QUESTION, 3)
        assert hits and hits[0].chunk.file == "widget.pdf"
        assert asking.current().generation.id == generation


def chroma_fails(monkeypatch: pytest.MonkeyPatch, message: str) -> None:
    """Opening Chroma's folder fails as chromadb's Rust core does (a bare ``InternalError`` carrying SQLite's code)."""

    def failing(path: Path) -> None:
        raise InternalError(message)

    monkeypatch.setattr(crag.store.local, "embedded_client", failing)


def test_a_locked_index_fails_an_incremental_build_and_the_previous_generation_answers(
    kb: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedder = HashEmbedder()
    first = sync(kb, embedder).generation
    open_before = Retriever(kb, embedder)
    open_before.retrieve(QUESTION, 3)
    manual_pdf(kb.files_dir / "gadget.pdf", topic="gadget")
    with monkeypatch.context() as patch:
        chroma_fails(patch, LOCKED)
        with pytest.raises(CragError, match="locked") as failed:
            sync(kb, embedder)
    assert "close it, then try again" in str(failed.value) and "Nothing was deleted" in str(failed.value)
    answers_from(kb, first, open_before)
    assert sorted(p.name for p in kb.chroma_dir.iterdir() if "broken" in p.name) == [], "nothing was set aside"
    report = sync(kb, embedder)  # the lock is gone: the update goes on from the generation that answered
    assert {f.file: f.status for f in report.files} == {"gadget.pdf": "indexed", "widget.pdf": "unchanged"}


def test_a_full_disk_midway_through_an_incremental_build_leaves_the_previous_generation_answering(
    kb: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedder = HashEmbedder()
    first = sync(kb, embedder).generation
    manual_pdf(kb.files_dir / "gadget.pdf", topic="gadget")

    def full(self: Collection, **kwargs: object) -> None:
        raise InternalError(DISK_FULL)

    with monkeypatch.context() as patch:
        patch.setattr(Collection, "add", full)
        with pytest.raises(CragError, match="free some space"):
            sync(kb, embedder)
    answers_from(kb, first)


@pytest.mark.parametrize("failure", ["opening Chroma", "writing the new generation"])
def test_a_full_rebuild_that_fails_leaves_the_old_index_answering(
    kb: Settings, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    embedder = HashEmbedder()
    first = sync(kb, embedder).generation
    open_before = Retriever(kb, embedder)
    with monkeypatch.context() as patch:
        if failure == "opening Chroma":
            chroma_fails(patch, "No space left on device (os error 28)")
        else:
            patch.setattr(Collection, "add", lambda self, **kwargs: (_ for _ in ()).throw(InternalError(DISK_FULL)))
        with pytest.raises(CragError, match="disk is full"):
            sync(kb, embedder, rebuild=True)
    answers_from(kb, first, open_before)


def test_an_unreadable_chroma_folder_is_moved_aside_not_deleted(kb: Settings) -> None:
    embedder = HashEmbedder()
    sync(kb, embedder)
    database = kb.chroma_dir / "chroma" / "chroma.sqlite3"
    with database.open("r+b") as fh:
        fh.write(b"not a database " * 64)  # SQLite's header gone: "file is not a database"
    damaged = database.read_bytes()
    forget_embedded()  # as a new process finds it

    report = sync(kb, embedder)
    [aside] = [p for p in kb.chroma_dir.iterdir() if p.name.startswith("broken-")]
    assert (aside / "chroma" / "chroma.sqlite3").read_bytes() == damaged, "moved as it was, not deleted"
    assert (aside / "ACTIVE.json").is_file() and (aside / "generations").is_dir(), "with what belongs to it"
    [note] = report.notes
    assert str(aside) in note and "not deleted" in note and f"delete {aside.name}" in note
    assert json.loads(json.dumps(report.to_json()))["notes"] == [note], "`crag index --json` says it too"
    assert {f.status for f in report.files} == {"indexed"}
    answers_from(kb, report.generation)


def test_an_unreadable_pointer_is_kept_aside(kb: Settings) -> None:
    embedder = HashEmbedder()
    sync(kb, embedder)
    (kb.chroma_dir / "ACTIVE.json").write_text("{not json", encoding="utf-8")
    report = sync(kb, embedder)
    [aside] = kb.chroma_dir.glob("ACTIVE.json.broken-*")
    assert aside.read_text(encoding="utf-8") == "{not json"
    assert aside.name in report.notes[0]
    answers_from(kb, report.generation)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (InternalError("error returned from database: (code: 5) database is locked"), "locked"),
        (InternalError("error returned from database: (code: 517) database is locked"), "locked"),  # SQLITE_BUSY_*
        (InternalError("No space left on device (os error 28)"), "disk full"),
        (InternalError("Permission denied (os error 13)"), "denied"),
        (InternalError("error returned from database: (code: 8) attempt to write a readonly database"), "denied"),
        (PermissionError(13, "Permission denied"), "denied"),
        (OSError(28, "No space left on device"), "disk full"),
        (InternalError("error returned from database: (code: 26) file is not a database"), None),
        (InternalError("error returned from database: (code: 11) database disk image is malformed"), None),
        (InternalError("No such file or directory (os error 2)"), None),  # a file of Chroma's missing: damage
        (RuntimeError("unsupported schema version"), None),
    ],
)
def test_what_a_failure_says_about_the_index(error: BaseException, kind: str | None) -> None:
    from crag.store.chroma import blocked

    assert blocked(error) == kind
