"""Power loss just after a build: the new generation's files reach the disk before the pointer moves to them, and the
generation before stays until the next build, so a pointer to files a power loss cut short has one to fall back to."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient

from crag.api import create_app
from crag.config import Settings
from crag.ingest import sync
from crag.retriever import Retriever
from crag.store import Store
from tests.apiclient import hash_embedder
from tests.fakes import HashEmbedder
from tests.helpers import widget_kb
from tests.pdfs import manual_pdf

QUESTION = "How much memory does the widget need?"


@pytest.fixture
def kb(tmp_path: Path) -> Settings:
    return widget_kb(tmp_path)


def collections(settings: Settings) -> set[str]:
    return {getattr(c, "name", c) for c in Store(settings.chroma_dir).client.list_collections()}


def generations(settings: Settings) -> set[str]:
    return {p.name for p in (settings.chroma_dir / "generations").iterdir()}


def test_a_build_syncs_its_files_and_folders_before_the_pointer_moves(
    kb: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def replace(src, dst) -> None:
        synced.append(f"replace {dst}")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    sync(kb, HashEmbedder())
    folder = kb.chroma_dir / "generations" / Store(kb.chroma_dir).active().id
    swap = synced.index(f"replace {kb.chroma_dir / 'ACTIVE.json'}")
    before = set(synced[:swap])
    files = [folder / "chunks.jsonl", folder / "manifest.json", *(folder / "bm25").iterdir()]
    assert {str(p) for p in files} <= before, "every file of the generation is on the disk before the swap"
    assert {str(folder), str(folder / "bm25"), str(folder.parent)} <= before, "and the folders that name them"
    assert str(kb.chroma_dir) in synced[swap:], "then the pointer's own folder"


def test_the_previous_generation_is_kept_until_the_next_build(kb: Settings) -> None:
    embedder = HashEmbedder()
    first = sync(kb, embedder).generation
    manual_pdf(kb.files_dir / "gadget.pdf", topic="gadget")
    second = sync(kb, embedder).generation
    assert generations(kb) == collections(kb) == {first, second}
    manual_pdf(kb.files_dir / "sprocket.pdf", topic="sprocket")
    third = sync(kb, embedder).generation
    assert generations(kb) == collections(kb) == {second, third}, "one previous generation, no more"


def test_a_generation_cut_short_by_a_power_loss_gives_way_to_the_previous_one(kb: Settings) -> None:
    embedder = HashEmbedder()
    first = sync(kb, embedder).generation
    manual_pdf(kb.files_dir / "gadget.pdf", topic="gadget")
    second = sync(kb, embedder).generation
    # What a power loss leaves of files the disk had not written yet: their names, and no bytes.
    (kb.chroma_dir / "generations" / second / "chunks.jsonl").write_bytes(b"")

    store = Store(kb.chroma_dir)
    assert store.active().id == first
    note = store.verify()
    assert note and "chunks.jsonl has 0 of its" in note and "Rebuild the knowledge base" in note
    hits = Retriever(kb, embedder).retrieve(QUESTION, 3)
    assert hits and hits[0].chunk.file == "widget.pdf", "the previous generation answers"
    with TestClient(create_app(kb, embedder_factory=hash_embedder), base_url="http://127.0.0.1") as client:
        health = client.get("/health").json()
    assert health["index"]["generation"] == first and "incomplete on disk" in health["index_error"]

    report = sync(kb, embedder)  # the next build starts from the generation that answers
    assert {f.file: f.status for f in report.files} == {"gadget.pdf": "indexed", "widget.pdf": "unchanged"}
    assert Store(kb.chroma_dir).verify() is None and generations(kb) == {first, report.generation}


def test_a_build_with_nothing_to_change_leaves_a_whole_pointer(kb: Settings) -> None:
    embedder = HashEmbedder()
    first = sync(kb, embedder).generation
    manual_pdf(kb.files_dir / "gadget.pdf", topic="gadget")
    second = sync(kb, embedder).generation
    (kb.files_dir / "gadget.pdf").unlink()  # the folder is as it was for the first generation
    (kb.chroma_dir / "generations" / second / "manifest.json").write_bytes(b"")
    report = sync(kb, embedder)
    assert report.generation == first and Store(kb.chroma_dir).verify() is None
    assert generations(kb) == {first}


def test_an_index_gone_between_reading_its_pointer_and_opening_it_answers_nothing(
    kb: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    retriever = Retriever(kb, HashEmbedder())
    monkeypatch.setattr(retriever.store, "active", lambda max_age=0.0: SimpleNamespace(id="gone"))
    monkeypatch.setattr(retriever.store, "reader", lambda: None)  # removed meanwhile
    assert retriever.current() is None
    assert retriever.retrieve(QUESTION, 3) == []
