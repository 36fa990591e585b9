"""The build keeps working: failed files tried again, unchanged files not read, parsers' work kept.
Real PDFs and PyMuPDF; the hashing embedder, so no model loads."""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from crag.config import Settings, load_settings
from crag.ingest import sync
from crag.ingest.base import Parser
from crag.ingest.chunking import Chunker
from crag.ingest.pymupdf import PyMuPDFParser
from crag.store import Store
from crag.types import FileResult, ParsedPDF
from tests.fakes import HashEmbedder
from tests.pdfs import encrypted_pdf, manual_pdf

pytestmark = pytest.mark.reliability
sync_module = importlib.import_module("crag.ingest.sync")  # the package's `sync` is the function


@pytest.fixture
def kb(tmp_path: Path) -> Settings:
    files = tmp_path / "Files"
    files.mkdir()
    manual_pdf(files / "widget.pdf", topic="widget")
    manual_pdf(files / "gadget.pdf", topic="gadget", pages=3)
    return load_settings(files_dir=files, chroma_dir=tmp_path / "db", parser="pymupdf")


def statuses(report) -> dict[str, str]:
    return {f.file: f.status for f in report.files}


class Flaky(Parser):
    """PyMuPDF, except that the named files fail the first ``times`` times, as a passing fault would."""

    def __init__(self, failing: Sequence[str], times: int = 1, name: str = "pymupdf") -> None:
        self.inner = PyMuPDFParser()
        self.name, self.version = name, self.inner.version
        self.failing = {f: times for f in failing}
        self.parsed: list[str] = []

    def parse(self, path, pages=None, on_page=None) -> ParsedPDF:
        self.parsed.append(path.name)
        if self.failing.get(path.name, 0) > 0:
            self.failing[path.name] -= 1
            raise OSError("the disk went away for a moment")
        return replace(self.inner.parse(path, pages, on_page), parser=self.name)


def test_a_chunker_bug_fails_its_file_only(kb: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    real_add = Chunker.add

    def broken(self, blocks):
        if self.file == "gadget.pdf":
            raise ZeroDivisionError("chunker bug")
        return real_add(self, blocks)

    monkeypatch.setattr(Chunker, "add", broken)
    report = {f.file: f for f in sync(kb, HashEmbedder()).files}
    assert report["widget.pdf"].status == "indexed"
    assert report["gadget.pdf"].status == "failed" and "ZeroDivisionError: chunker bug" in report["gadget.pdf"].error


def test_a_failed_file_is_tried_again_on_the_next_sync(kb: Settings) -> None:
    embedder = HashEmbedder()
    parser = Flaky(["gadget.pdf"])
    first = sync(kb, embedder, parser=parser)
    assert statuses(first) == {"gadget.pdf": "failed", "widget.pdf": "indexed"}
    assert "the disk went away" in {f.file: f for f in first.files}["gadget.pdf"].error

    second = sync(kb, embedder, parser=parser)  # same content, same parser version: tried again all the same
    assert statuses(second) == {"gadget.pdf": "indexed", "widget.pdf": "unchanged"}
    assert parser.parsed == ["gadget.pdf", "widget.pdf", "gadget.pdf"]
    assert {m.file: m.status for m in Store(kb.chroma_dir).manifest()}["gadget.pdf"] == "indexed"


def test_a_file_that_fails_again_leaves_the_index_as_it_was(kb: Settings) -> None:
    embedder = HashEmbedder()
    encrypted_pdf(kb.files_dir / "locked.pdf")
    first = sync(kb, embedder)
    assert statuses(first)["locked.pdf"] == "failed"
    again = sync(kb, embedder)
    assert statuses(again) == {"gadget.pdf": "unchanged", "locked.pdf": "failed", "widget.pdf": "unchanged"}
    assert "password" in {f.file: f for f in again.files}["locked.pdf"].error
    assert again.generation == first.generation, "tried again and failed again: no new generation"


def test_an_unchanged_file_is_not_read(kb: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    embedder = HashEmbedder()
    old = os.stat(kb.files_dir / "widget.pdf").st_mtime_ns - 10**10  # modified 10 s ago: settled
    for name in ("widget.pdf", "gadget.pdf"):
        os.utime(kb.files_dir / name, ns=(old, old))
    sync(kb, embedder)
    manifest = {m.file: m for m in Store(kb.chroma_dir).manifest()}
    assert manifest["widget.pdf"].size == (kb.files_dir / "widget.pdf").stat().st_size
    assert manifest["widget.pdf"].mtime_ns == old

    hashed: list[str] = []
    real_hash = sync_module.file_hash
    monkeypatch.setattr(sync_module, "file_hash", lambda path: hashed.append(path.name) or real_hash(path))
    assert set(statuses(sync(kb, embedder)).values()) == {"unchanged"}
    assert hashed == [], "same size and modification time: not read at all"

    os.utime(kb.files_dir / "gadget.pdf", ns=(old + 10**9, old + 10**9))  # touched, same content
    assert set(statuses(sync(kb, embedder)).values()) == {"unchanged"}
    assert hashed == ["gadget.pdf"]


def test_an_index_of_an_older_chunker_is_rebuilt_whole(kb: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new chunker version cuts the same blocks differently (footnotes moved, marks dropped): the next sync
    indexes every file again, though none changed, and the index then records the new version."""
    embedder = HashEmbedder()
    sync(kb, embedder)
    assert set(statuses(sync(kb, embedder)).values()) == {"unchanged"}
    monkeypatch.setattr(sync_module, "CHUNKER_VERSION", sync_module.CHUNKER_VERSION + 1)
    assert set(statuses(sync(kb, embedder)).values()) == {"indexed"}
    assert Store(kb.chroma_dir).reader().generation.chunking["chunker"] == sync_module.CHUNKER_VERSION
    assert set(statuses(sync(kb, embedder)).values()) == {"unchanged"}


def test_a_file_changed_just_now_is_read_again(kb: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """A modification time as recent as the build may be shared with a change still to come: not trusted."""
    embedder = HashEmbedder()
    sync(kb, embedder)  # the files were just written
    assert {m.mtime_ns for m in Store(kb.chroma_dir).manifest()} == {0}
    hashed: list[str] = []
    monkeypatch.setattr(sync_module, "file_hash", lambda path: hashed.append(path.name) or "x" * 64)
    sync(kb, embedder)
    assert sorted(hashed) == ["gadget.pdf", "widget.pdf"]


def test_an_old_manifest_without_sizes_is_read(kb: Settings) -> None:
    embedder = HashEmbedder()
    sync(kb, embedder)
    store = Store(kb.chroma_dir)
    path = kb.chroma_dir / "generations" / store.active().id / "manifest.json"
    entries = json.loads(path.read_text())
    path.write_text(json.dumps([{k: v for k, v in e.items() if k not in ("size", "mtime_ns")} for e in entries]))
    assert FileResult.from_json({"file": "a.pdf", "status": "indexed", "someday": 1}) == FileResult(
        file="a.pdf", status="indexed"
    )
    assert set(statuses(sync(kb, embedder)).values()) == {"unchanged"}


def test_an_unreadable_file_fails_with_a_reason(kb: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(path: Path) -> str:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(sync_module, "file_hash", denied)
    report = {f.file: f for f in sync(kb, HashEmbedder()).files}
    assert (
        report["widget.pdf"].status == "failed" and "cannot be read (Permission denied)" in report["widget.pdf"].error
    )


def test_files_another_parser_made_are_kept_until_a_better_one_is_back(kb: Settings) -> None:
    """MinerU down: PyMuPDF stands in for new files only. MinerU back: what PyMuPDF parsed meanwhile is parsed again."""
    embedder = HashEmbedder()
    mineru = Flaky([], name="mineru")
    sync(kb, embedder, parser=mineru)
    assert {m.parser for m in Store(kb.chroma_dir).manifest()} == {"mineru"}

    manual_pdf(kb.files_dir / "new.pdf", topic="sprocket")
    pymupdf = Flaky([])
    down = sync(kb, embedder, parser=pymupdf)
    assert statuses(down) == {"gadget.pdf": "unchanged", "new.pdf": "indexed", "widget.pdf": "unchanged"}
    assert pymupdf.parsed == ["new.pdf"]
    assert {m.file: m.parser for m in Store(kb.chroma_dir).manifest()}["new.pdf"] == "pymupdf"

    back = sync(kb, embedder, parser=mineru)
    assert statuses(back) == {"gadget.pdf": "unchanged", "new.pdf": "indexed", "widget.pdf": "unchanged"}
    assert {m.parser for m in Store(kb.chroma_dir).manifest()} == {"mineru"}
