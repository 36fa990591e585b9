"""Re-run on a real index: rated questions asked again are "same" while nothing changed, and "changed" once the file
their answer cited is removed and the knowledge base rebuilt; the passages rated up are then no longer retrieved."""

from __future__ import annotations

from pathlib import Path

import pytest

from crag.config import Settings, load_settings
from crag.conversations import Conversations
from crag.feedback import Change, Rating, generation_of, lost, rerun
from tests.pdfs import text_pdf

ALPHA = "Which codec does the alpha archiver use?"
BETA = "Which port does the beta daemon listen on?"


@pytest.fixture
def offline(tmp_path: Path, closed_port_url: str) -> Settings:
    return two_manuals(tmp_path, closed_port_url)


def two_manuals(tmp_path: Path, closed_port_url: str) -> Settings:
    """Two small manuals, alpha.pdf and beta.pdf, not indexed yet; the embedded backend, quoted answers, no web."""
    files = tmp_path / "Files"
    files.mkdir()
    text_pdf(
        files / "alpha.pdf",
        [
            "The alpha archiver compresses every file with the zeta codec at level nine.",
            "Archives made by the alpha archiver end in .alp and can be listed with alpha list.",
        ],
    )
    text_pdf(
        files / "beta.pdf",
        [
            "The beta daemon listens on port 7421 unless the configuration file names another port.",
            "Stop the beta daemon with beta stop; its log is written to beta.log.",
        ],
    )
    return load_settings(
        files_dir=files,
        chroma_dir=tmp_path / "db",
        ollama_url=closed_port_url,
        llm_backend="embedded",
        embed_backend="local",
        parser="pymupdf",
        web_search=False,
        answer_mode="evidence",
    )


@pytest.mark.integration
def test_re_run_is_same_until_the_cited_file_is_removed(offline: Settings) -> None:
    from crag.ingest import sync
    from crag.pipeline import Pipeline
    from crag.retriever import index_embedder

    sync(offline, index_embedder(offline))
    pipeline = Pipeline.from_settings(offline)
    store = Conversations(offline.chroma_dir / "conversations.sqlite3")
    for question in (ALPHA, BETA):
        answer = pipeline.ask(question)
        store.rate_answer(store.record(question, [], answer, generation_of(offline)), Rating.UP)
    alpha, beta = store.labels()
    assert {file for file, _ in alpha.answered.pages} == {"alpha.pdf"}, alpha.answered
    assert {file for file, _ in beta.answered.pages} == {"beta.pdf"}, beta.answered
    assert alpha.answered.generation and alpha.answered.generation == generation_of(offline)

    assert [rerun(pipeline, label).same for label in (alpha, beta)] == [True, True], "nothing changed: the same"
    assert lost(pipeline.retriever, [alpha, beta], offline.top_k) == []

    (offline.files_dir / "beta.pdf").unlink()
    sync(offline, index_embedder(offline))
    again = rerun(pipeline, beta)
    assert not again.same and Change.PAGES in again.changes, again
    assert rerun(pipeline, alpha).same, "an answer from another file is the same"
    assert lost(pipeline.retriever, [alpha, beta], offline.top_k) == [beta]
