"""Sync and retrieval for real: PDFs made here, PyMuPDF, the built-in USE embedder, Chroma and BM25 on disk."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from crag.analysis import Analysis
from crag.config import Settings, load_settings
from crag.ingest import sync
from crag.ingest.chunking import CHUNKER_VERSION
from crag.ingest.sync import EmbedderMismatch
from crag.models import Embedder, USEEmbedder
from crag.retriever import Retriever
from crag.store import BuildInProgress, RebuildNeeded, Store, fuse
from crag.store.common import fuse_top
from crag.text import lexical_tokens
from crag.types import Chunk, Progress, ScoredChunk
from tests.fakes import chunk
from tests.pdfs import encrypted_pdf, manual_pdf

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def embedder() -> USEEmbedder:
    return USEEmbedder()


@pytest.fixture
def kb(tmp_path: Path) -> Settings:
    files = tmp_path / "Files"
    files.mkdir()
    manual_pdf(files / "widget.pdf", topic="widget")
    manual_pdf(files / "gadget.pdf", topic="gadget", pages=3)
    manual_pdf(files / "zh.pdf", topic="小部件", chinese=True)
    return load_settings(files_dir=files, chroma_dir=tmp_path / "chroma_db", parser="pymupdf")


def statuses(report) -> dict[str, str]:
    return {f.file: f.status for f in report.files}


def test_lexical_tokens_cover_english_and_chinese() -> None:
    assert lexical_tokens("How do I install the packages?") == ["install", "package"]
    tokens = lexical_tokens("如何安装小部件的依赖")
    assert "安装" in tokens and "依赖" in tokens and "的" not in tokens


def test_fuse_rewards_agreement() -> None:
    a, b, c = (Chunk(id=i, text=i, file="f", pages=(1,)) for i in "abc")
    fused = fuse(
        [
            [ScoredChunk(chunk=a, score=0.9), ScoredChunk(chunk=b, score=0.8)],
            [ScoredChunk(chunk=b, score=5.0), ScoredChunk(chunk=c, score=4.0)],
        ]
    )
    assert [h.chunk.id for h in fused] == ["b", "a", "c"]


def test_first_sync_indexes_and_reports_progress(kb: Settings, embedder: Embedder) -> None:
    events: list[Progress] = []
    report = sync(kb, embedder, on_progress=events.append)
    assert statuses(report) == {"gadget.pdf": "indexed", "widget.pdf": "indexed", "zh.pdf": "indexed"}
    assert report.total_chunks == sum(f.chunks for f in report.files) > 0
    assert report.pages_per_second > 0
    parsing = [e for e in events if e.stage == "parsing" and e.page_count]
    assert {(e.file, e.page, e.page_count) for e in parsing} >= {("gadget.pdf", 3, 3), ("widget.pdf", 2, 2)}
    assert {e.file_count for e in parsing} == {3}
    assert events[-1].stage == "done" and events[-1].fraction == 1.0

    store = Store(kb.chroma_dir)
    gen = store.active()
    assert gen.embedder == embedder.name and gen.chunking == {
        "chunk_tokens": 220,
        "chunk_overlap": 32,
        "max_tokens": 254,
        "chunker": CHUNKER_VERSION,
    }
    manifest = {m.file: m for m in store.manifest()}
    assert manifest["widget.pdf"].parser == "pymupdf" and len(manifest["widget.pdf"].hash) == 64


@pytest.mark.parametrize("mode", ["dense", "lexical", "hybrid"])
def test_retrieval_modes_find_the_right_file(kb: Settings, embedder: Embedder, mode: str) -> None:
    sync(kb, embedder)
    retriever = Retriever(kb, embedder)
    hits = retriever.retrieve("What are the limits of the gadget: cores and memory?", 3, mode)
    assert hits and hits[0].chunk.file == "gadget.pdf"
    zh = retriever.retrieve("小部件需要多少内存", 3, mode if mode != "dense" else "hybrid")
    assert zh[0].chunk.file == "zh.pdf"


def test_each_file_has_its_language(kb: Settings, embedder: Embedder) -> None:
    assert Retriever(kb, embedder).file_languages() == {}, "nothing built yet"
    sync(kb, embedder)
    assert Retriever(kb, embedder).file_languages() == {"widget.pdf": "en", "gadget.pdf": "en", "zh.pdf": "zh"}


def test_a_name_the_top_k_misses_brings_a_passage_that_mentions_it(kb: Settings, embedder: Embedder) -> None:
    sync(kb, embedder)
    retriever = Retriever(kb, embedder)
    question = "小部件需要安装依赖吗？gadget 呢？"
    hits = retriever.retrieve(question, 1)
    assert [h.chunk.file for h in hits] == ["zh.pdf"]
    stats = retriever.term_stats()
    added = retriever.anchor(Analysis(question, stats), hits)[1:]
    assert [(h.chunk.file, h.anchor) for h in added] == [("gadget.pdf", "gadget")]
    # A name the documents never mention makes the question Incorrect whatever else is found: nothing is added.
    assert retriever.anchor(Analysis("小部件需要安装依赖吗？gadget 和 Zorblax 呢？", stats), hits) == hits
    # Every name already retrieved: nothing is added.
    hits = retriever.retrieve("How much memory does the gadget need?", 1)
    assert retriever.anchor(Analysis("How much memory does the gadget need?", stats), hits) == hits


def test_incremental_sync_touches_only_what_changed(kb: Settings, embedder: Embedder) -> None:
    first = sync(kb, embedder)
    unchanged = sync(kb, embedder)
    assert set(statuses(unchanged).values()) == {"unchanged"}
    assert unchanged.generation == first.generation, "nothing changed: no new generation"

    manual_pdf(kb.files_dir / "widget.pdf", topic="widget", pages=4)  # changed content
    (kb.files_dir / "gadget.pdf").unlink()
    manual_pdf(kb.files_dir / "new.pdf", topic="sprocket")
    report = sync(kb, embedder)
    assert statuses(report) == {
        "gadget.pdf": "removed",
        "new.pdf": "indexed",
        "widget.pdf": "indexed",
        "zh.pdf": "unchanged",
    }
    hits = Retriever(kb, embedder).retrieve("gadget limits", 10, "hybrid")
    assert all(h.chunk.file != "gadget.pdf" for h in hits)
    assert Store(kb.chroma_dir).active().chunks == report.total_chunks


def test_full_rebuild_reparses_everything(kb: Settings, embedder: Embedder) -> None:
    sync(kb, embedder)
    report = sync(kb, embedder, rebuild=True)
    assert set(statuses(report).values()) == {"indexed"}


@pytest.mark.reliability
def test_bad_files_get_a_status_and_the_rest_index(kb: Settings, embedder: Embedder) -> None:
    sync(kb, embedder)
    encrypted_pdf(kb.files_dir / "locked.pdf")
    (kb.files_dir / "notes.txt").write_text("not a pdf")
    shutil.copy(kb.files_dir / "widget.pdf", kb.files_dir / "widget copy.pdf")
    (kb.files_dir / "renamed.pdf").write_text("plain text with a pdf name")
    report = {f.file: f for f in sync(kb, embedder).files}
    assert report["locked.pdf"].status == "failed" and "password" in report["locked.pdf"].error
    assert report["renamed.pdf"].status == "failed" and "not a PDF" in report["renamed.pdf"].error
    assert report["notes.txt"].status == "skipped"
    copy = report["widget copy.pdf"]
    assert copy.status == "skipped" and "same content as widget.pdf" in copy.error
    assert report["widget.pdf"].status == "unchanged" and report["zh.pdf"].status == "unchanged"
    again = {f.file: f.status for f in sync(kb, embedder).files}
    assert again["locked.pdf"] == "failed", "tried again, and failed again"


def test_another_embedder_needs_a_rebuild(kb: Settings, embedder: Embedder) -> None:
    sync(kb, embedder)

    class Other(Embedder):
        name = "ollama:bge-m3"

        def _embed(self, texts):
            return [[1.0, 0.0, 0.0] for _ in texts]

    with pytest.raises(RebuildNeeded, match="Rebuild needed.*use-multilingual-v3.*ollama:bge-m3"):
        Retriever(kb, Other()).retrieve("anything", 3, "hybrid")
    with pytest.raises(EmbedderMismatch, match="never mixes embedders.*full rebuild"):
        sync(kb, Other())  # an incremental build keeps the index's embedder, or does not run
    assert Store(kb.chroma_dir).active().embedder == embedder.name
    report = sync(kb, Other(), rebuild=True)  # a full rebuild moves the index to the new embedder
    assert set(statuses(report).values()) == {"indexed"}


@pytest.mark.reliability
def test_one_build_at_a_time(kb: Settings, embedder: Embedder) -> None:
    store = Store(kb.chroma_dir)
    with store.build_lock(), pytest.raises(BuildInProgress, match=f"pid {os.getpid()}"):
        sync(kb, embedder)


def test_leftovers_of_a_dead_build_are_collected(kb: Settings, embedder: Embedder) -> None:
    first = sync(kb, embedder).generation
    store = Store(kb.chroma_dir)
    orphan = store.writer(embedder.name, embedder.dimension, {})  # a build that never committed
    assert orphan.folder.exists()
    sync(kb, embedder, rebuild=True)
    assert not orphan.folder.exists()
    names = {getattr(c, "name", c) for c in Store(kb.chroma_dir).client.list_collections()}
    assert names == {Store(kb.chroma_dir).active().id, first}, "the active generation and the one before it"


def test_empty_folder_gives_an_empty_index(tmp_path: Path, embedder: Embedder) -> None:
    settings = load_settings(files_dir=tmp_path / "none", chroma_dir=tmp_path / "db", parser="pymupdf")
    report = sync(settings, embedder)
    assert report.files == [] and report.total_chunks == 0
    assert Retriever(settings, embedder).retrieve("anything", 5, "hybrid") == []


def test_the_dense_legs_best_passage_is_never_outvoted() -> None:
    """A Chinese question about an English manual: the multilingual dense leg ranks the passage that answers first, and
    BM25, which shares no word with it, ranks passages that repeat a name of the question. Fused by votes alone, the
    passages both legs rank middling fill the top k and the answer is lost; each full leg's best is always kept."""
    answer, *named = [chunk(f"passage {i}", n=i) for i in range(7)]
    dense = [ScoredChunk(chunk=c, score=0.6) for c in [answer, *named]]  # the answer first, then the named ones
    lexical = [ScoredChunk(chunk=c, score=3.0) for c in reversed(named)]  # BM25 never finds the answer
    top = fuse_top([dense, lexical], [1.0, 1.0], 3)
    assert answer.id in [h.chunk.id for h in top] and len(top) == 3
    assert lexical[0].chunk.id in [h.chunk.id for h in top]
    # An English-only embedder's partial vote on a Chinese question is not trusted that far.
    assert answer.id not in [h.chunk.id for h in fuse_top([dense, lexical], [0.3, 1.0], 3)]
    assert fuse_top([dense, lexical], [1.0, 1.0], 3) != fuse([dense, lexical], [1.0, 1.0])[:3]
    assert answer.id not in [h.chunk.id for h in fuse([dense, lexical], [0.3, 1.0])[:3]]  # what the old cut did
    assert fuse_top([], [], 3) == []
    assert [h.chunk.id for h in fuse_top([dense[:1], []], [1.0, 1.0], 5)] == [answer.id]
    assert len(fuse_top([dense, lexical], [1.0, 1.0], 1)) == 1  # fewer places than legs: the fused best of them
