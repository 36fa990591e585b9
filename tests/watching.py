"""Helpers of the tests of a watched files folder and of archives: a knowledge base watched for real (watchdog on a
temporary folder, the real build with the hashing embedder), a pipeline over its real index, waiting on conditions."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pymupdf

from crag.config import Settings, load_settings
from crag.evaluator import SimilarityEvaluator
from crag.ingest.base import Parser
from crag.jobs import Builds, Job
from crag.models import BackendInfo
from crag.pipeline import Pipeline
from crag.retriever import Retriever
from crag.types import Answer, Block, ParsedPDF
from crag.watch import Watcher
from tests.fakes import FakeSearcher, HashEmbedder, ScriptedModel
from tests.helpers import refused_port

T = TypeVar("T")
QUIET = 0.3  # seconds: the watched folder's quiet period in tests (the setting's default is 2)


class CountingEmbedder(HashEmbedder):
    """The hashing embedder, counting the passages it embeds for the index: a rename must embed none."""

    def __init__(self) -> None:
        super().__init__()
        self.documents = 0

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self.documents += len(texts)
        return super().embed_documents(texts)


class PlainParser(Parser):
    """PyMuPDF's plain text blocks, a page's in a millisecond, for tests of many files where the layout does not
    matter (the real parser reads a few pages a second). Named as PyMuPDF's, so that the build treats it as such."""

    name = "pymupdf"
    version = "plain-test-1"

    def parse(self, path: Path, pages: Sequence[int] | None = None, on_page=None) -> ParsedPDF:
        blocks = []
        with pymupdf.open(path) as doc:
            for number, page in enumerate(doc, start=1):
                for order, (x0, y0, x1, y1, text, *_) in enumerate(page.get_text("blocks")):
                    blocks.append(
                        Block(type="text", text=text.strip(), page=number, bbox=(x0, y0, x1, y1), order=order)
                    )
            count = doc.page_count
        return ParsedPDF(
            blocks=tuple(b for b in blocks if b.text), pages=count, parser=self.name, parser_version=self.version
        )


def watched_settings(root: Path, **overrides) -> Settings:
    """Settings of a knowledge base in ``root/Files`` and ``root/db``, watched with a short quiet period, offline."""
    (root / "Files").mkdir(parents=True, exist_ok=True)
    values = {
        "files_dir": root / "Files",
        "chroma_dir": root / "db",
        "parser": "pymupdf",
        "embed_backend": "local",
        "llm_backend": "embedded",
        "web_search": False,
        "ollama_url": f"http://127.0.0.1:{refused_port()}",
        "watch": "on",
        "watch_quiet": QUIET,
    }
    return load_settings(**(values | overrides))


@dataclass
class Watched:
    settings: Settings
    builds: Builds
    watcher: Watcher
    embedder: CountingEmbedder
    synced: list[Job]  # builds whose end the watcher saw, in order

    @property
    def files(self) -> Path:
        return self.settings.files_dir

    def builds_started(self) -> int:
        return self.watcher.state.syncs

    def idle(self, timeout: float = 60) -> None:
        """Wait until nothing waits for a sync, no build runs, and the watcher has taken in the last one's end."""

        def idle() -> bool:
            latest, watcher = self.builds.latest, self.watcher
            taken_in = latest is None or watcher._seen_job == latest.id
            return not watcher.state.waiting and self.builds.running is None and not watcher._dirty and taken_in

        wait_for(idle, timeout, "the watched folder to be synced")


@contextmanager
def watching(settings: Settings, embedder: CountingEmbedder | None = None) -> Iterator[Watched]:
    embedder = embedder or CountingEmbedder()
    builds = Builds(settings, lambda rebuild: embedder, lambda e: None)
    synced: list[Job] = []
    watcher = Watcher(settings, builds, on_synced=synced.append).start()
    try:
        wait_for(lambda: watcher.state.watching, 30, "the watcher to start")
        yield Watched(settings, builds, watcher, embedder, synced)
    finally:
        watcher.stop()
        wait_for(lambda: builds.running is None, 60, "the last build to end")


def wait_for(condition: Callable[[], T], timeout: float = 60, what: str = "the condition") -> T:
    """``condition()``'s first true value, looked at every 20 ms; a hang fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout} s for {what}")
        time.sleep(0.02)


def pipeline_over(settings: Settings, embedder: HashEmbedder) -> Pipeline:
    """The real pipeline over the real index, offline: its retriever, the similarity grader, quoted answers."""
    retriever = Retriever(settings, embedder)
    scorer = SimilarityEvaluator(embedder, retriever.term_stats)
    return Pipeline(
        settings=settings,
        model=ScriptedModel().model(),
        backend=BackendInfo("embedded", "fake", "test"),
        retriever=retriever,
        scorer=scorer,
        evaluators={"similarity": scorer, "llm": scorer},
        searcher=FakeSearcher(),
        fetch=lambda results, top_n, timeout: list(results),
    )


def cited_files(answer: Answer) -> set[str]:
    return {s.file for s in answer.cited_sources}
