"""What the MCP tools and resources ask of the core: graded evidence, answers, the documents and their pages.

Every answer is one ``Pipeline.ask``, the call the CLI and the API make, with the tool's scope (folders or files of
the files folder) checked by the core as for them. Failures meant for the user are ``CragError``s with the messages
the app shows (an unknown scope lists the knowledge bases); the server turns them into tool errors.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from crag.calibration import fitted_overrides
from crag.config import Settings
from crag.conversations import Conversations, chats_file
from crag.errors import CragError, Remedy
from crag.followups import History
from crag.ingest.pymupdf import clean, open_pdf, printed_pages
from crag.models import close_event_loop
from crag.pipeline import Pipeline
from crag.scope import Scope, knowledge_bases, missing, unknown_scope
from crag.store import Generation, open_store
from crag.types import Answer, AnswerKind, FileResult

log = logging.getLogger(__name__)

PipelineSource = Callable[[], Pipeline]
ForClient = Callable[[Answer], Answer]
Admit = Callable[[], AbstractContextManager[object]]  # held while an answer is made; raises CragError when full

# Statuses of files the index holds passages of: their pages can be read as resources.
HELD = ("indexed", "unchanged")


@dataclass(frozen=True)
class Documents:
    """What the index holds, per file: the manifest of the generation that answers (None when nothing is built)."""

    generation: Generation | None
    files: tuple[FileResult, ...]


class ToolBackend:
    """The core behind the tools. ``pipeline`` gives the pipeline that answers (the API's, when mounted there);
    without it one is built on first use and kept until a rebuild made elsewhere moves the index to another embedder,
    and a failure to build it is not kept, so the next call retries.
    ``for_client`` is what a remote client may see of an answer (a model's own error stays in the log); ``admit``
    holds one of the answers a server makes at once while ``search`` or ``ask`` runs: a search retrieves, grades and
    refines as an answer does."""

    def __init__(
        self,
        settings: Settings,
        pipeline: PipelineSource | None = None,
        for_client: ForClient | None = None,
        admit: Admit = nullcontext,
    ) -> None:
        self.settings = settings
        self._source = pipeline
        self._for_client = for_client or (lambda answer: answer)
        self._admit = admit
        self._pipeline: Pipeline | None = None
        self._chats: Conversations | None = None
        self._lock = threading.Lock()

    def pipeline(self) -> Pipeline:
        if self._source is not None:
            return self._source()
        with self._lock:
            if self._pipeline is None or self._pipeline.retriever.moved():
                self._pipeline = None  # the old one is let go: if the new one fails, the next call tries again
                self._pipeline = Pipeline.from_settings(self.settings)
            return self._pipeline

    def search(self, question: str, scope: Sequence[str] | None, k: int | None) -> Answer:
        """The graded evidence, with no model call on any action: the similarity evaluator grades, the answer quotes,
        no second search in the model's words, no web."""
        with self._admit():
            return self._answer(question, (), scope or (), top_k=k, use_model=False)

    def ask(self, question: str, scope: Sequence[str] | None, history: History) -> Answer:
        """The CRAG answer, made as the app makes it (``crag.mcp.outputs.ask_out`` sets it as Markdown a client may
        render, with images and links shown as typed: a document could have dictated an image's address)."""
        with self._admit():
            return self._answer(question, history, scope or ())

    def _fitted(self, scope: Sequence[str]) -> dict[str, Any]:
        """The thresholds a fit applied to the scope (on the page, or with ``crag evaluate --apply``), as the page
        and the API answer with them; none when the ratings cannot be read (the log says why)."""
        if not chats_file(self.settings).is_file():
            return {}  # nothing rated here yet: no store is made to be read
        with self._lock:
            if self._chats is None:
                try:
                    self._chats = Conversations(chats_file(self.settings))
                except CragError as exc:
                    log.warning("the thresholds fitted to %s could not be read: %s", list(scope), exc)
                    return {}
        return fitted_overrides(self._chats, self.settings, scope)

    def _answer(self, question: str, history: History, scope: Sequence[str], **options: Any) -> Answer:
        """``options``: ``Overrides`` keywords, besides the thresholds fitted to the scope."""
        options = {**self._fitted(scope), **options, "scope": scope}
        try:
            answer = self.pipeline().ask(question, history, **options)
        finally:
            close_event_loop()  # the loop this worker thread's model calls made, with what they left on it
        if answer.kind is AnswerKind.NO_ANSWER and answer.trace is not None and not answer.trace.retrieved:
            # Nothing is indexed (a first build may be running), and the web gave nothing: the message says so and
            # what to do.
            raise CragError(answer.text, remedy=answer.trace.remedy)
        return self._for_client(answer)

    # ---- the documents and their pages

    def documents(self, scope: Sequence[str] | None) -> Documents:
        """The files of the scope (every file without one); a scope the index does not hold is an error."""
        wanted = Scope.of(scope)
        store = open_store(self.settings)
        try:
            generation = store.active()
            manifest = store.manifest() if generation else []
        except (OSError, ValueError) as exc:  # a manifest that is missing or not JSON
            raise CragError(
                f"The index in {self.settings.chroma_dir} cannot be read ({type(exc).__name__}).",
                remedy=Remedy.FULL_REBUILD,
            ) from None
        if gone := missing(wanted, manifest):  # a folder whose files all failed is listed, with their reasons
            raise unknown_scope(gone, knowledge_bases(manifest), self.settings.files_dir)
        return Documents(generation, tuple(f for f in manifest if f.status != "removed" and wanted.holds(f.file)))

    def path(self, file: str) -> Path:
        """The PDF of an indexed document, or a ``CragError`` that says why it cannot be read."""
        held = {f.file for f in self.documents(None).files if f.status in HELD}
        if file not in held:
            raise CragError(f"“{file}” is not an indexed document: list_documents lists them.")
        root = self.settings.files_dir.resolve()
        path = (root / file).resolve()
        if not path.is_relative_to(root) or not path.is_file():
            raise CragError(f"“{file}” is no longer in the files folder ({root}): rebuild the knowledge base.")
        return path

    def printed(self, file: str, pages: Sequence[int]) -> str:
        """The page numbers the document prints on these pages where they differ from the PDF's; "" otherwise."""
        root = self.settings.files_dir.resolve()
        path = (root / file).resolve()
        try:
            mtime = path.stat().st_mtime_ns if path.is_relative_to(root) else 0
        except OSError:
            return ""
        return _printed(str(path), mtime, tuple(pages)) if mtime and pages else ""

    def page_texts(self, file: str, page: int | None) -> list[tuple[int, str, str]]:
        """(page, printed label, text) of one page of an indexed document, or of all of them."""
        with open_pdf(self.path(file)) as doc:
            if page is not None and not 1 <= page <= doc.page_count:
                raise CragError(f"“{file}” has {doc.page_count} pages: ask for a page from 1 to {doc.page_count}.")
            wanted = [page] if page is not None else range(1, doc.page_count + 1)
            return [(p, doc[p - 1].get_label(), clean(doc[p - 1].get_text("text", sort=True)).strip()) for p in wanted]


@lru_cache(maxsize=512)
def _printed(path: str, mtime_ns: int, pages: tuple[int, ...]) -> str:
    try:
        return printed_pages(Path(path), pages)
    except Exception:  # noqa: BLE001 - a nicety: a PDF that cannot be read has no labels to show
        return ""
