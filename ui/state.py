"""Session state, the settings the sidebar changes, and the calls into ``crag`` that the page makes.

``crag`` is reached through module attributes (``crag.ingest.sync``, ``Pipeline.from_settings``,
``crag.models.ollama_health``) at call time, so tests can swap any piece for a fake.

What outlives a session lives in the process: the build job runner (a build goes on through reruns,
reloads and other sessions, which all see it) and the conversation store (SQLite beside the index).
The open conversation is in the page's URL (``?chat=``), so a reload reopens it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import streamlit as st

import crag.ingest
import crag.models
import crag.pipeline
import crag.retriever
import crag.store
from crag.config import Settings, load_settings
from crag.conversations import Conversations
from crag.errors import CragError
from crag.jobs import Builds
from crag.store import Generation
from crag.types import FileResult

# Widget keys of the answer settings: per-question options for this session, on top of the environment's.
TOP_K, THRESHOLDS, WEB, EVALUATOR, ANSWER_MODE = "set_top_k", "set_thresholds", "set_web", "set_evaluator", "set_answer"


def init() -> None:
    ss = st.session_state
    ss.setdefault("uploader", 0)  # the uploader's key suffix: a new key empties it after a save
    ss.setdefault("file_notes", [])  # (kind, message) of the last upload or removal
    ss.setdefault("build_error", "")  # why the last click on Rebuild started nothing


# ---------------------------------------------------------------------------------------------
# Conversations


@st.cache_resource
def _conversations(path: str) -> Conversations:
    return Conversations(Path(path))


def conversations(settings: Settings) -> Conversations:
    """The store every session shares. Raises ``HistoryUnavailable`` when it cannot be written."""
    return _conversations(str(settings.chroma_dir / "conversations.sqlite3"))


def temporary_conversations() -> Conversations:
    """Where conversations go while the index folder cannot be written: lost when the machine restarts."""
    return _conversations(str(Path(tempfile.gettempdir()) / f"crag-conversations-{os.getuid()}.sqlite3"))


def current_chat(store: Conversations) -> str | None:
    """The open conversation (from the URL), or None for a new one not saved yet."""
    chat = st.query_params.get("chat")
    if chat and store.get(chat) is None:  # deleted in another tab, or a stale link
        del st.query_params["chat"]
        st.toast("The chat in this link no longer exists (deleted?): this is a new chat.", icon=":material/info:")
        return None
    return chat or None


def open_chat(chat: str | None) -> None:
    if chat:
        st.query_params["chat"] = chat
    elif "chat" in st.query_params:
        del st.query_params["chat"]


def new_chat() -> None:
    open_chat(None)


# ---------------------------------------------------------------------------------------------
# Settings


def options(base: Settings) -> dict[str, Any]:
    """This session's answer settings, as ``Pipeline.stream`` options: changing one reloads nothing."""
    ss = st.session_state
    ss.setdefault(TOP_K, base.top_k)
    ss.setdefault(THRESHOLDS, (base.lower_threshold, base.upper_threshold))
    ss.setdefault(WEB, base.web_search)
    if not base.web_search:  # off for the app (CRAG_WEB_SEARCH): no session can turn it on, and none shows it on
        ss[WEB] = False
    ss.setdefault(EVALUATOR, base.evaluator)
    ss.setdefault(ANSWER_MODE, base.answer_mode)
    lower, upper = sorted(float(v) for v in ss[THRESHOLDS])  # a range slider keeps them ordered; be sure
    return {
        "top_k": int(ss[TOP_K]),
        "lower_threshold": lower,
        "upper_threshold": upper,
        "web": bool(ss[WEB]),
        "evaluator": ss[EVALUATOR],
        "answer_mode": ss[ANSWER_MODE],
    }


def load_base_settings() -> Settings:
    return load_settings()


def _key(settings: Settings) -> str:
    # The dump masks the API key; its hash keeps two keys from sharing a cached pipeline.
    secret = settings.openai_api_key.get_secret_value() if settings.openai_api_key else ""
    return settings.model_dump_json() + hashlib.sha256(secret.encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------------------------
# The pipeline (the model, the embedder, the retriever): built once per settings


@st.cache_resource(show_spinner="Loading the model…", max_entries=4)
def _pipeline(key: str, _settings: Settings) -> crag.pipeline.Pipeline:
    return crag.pipeline.Pipeline.from_settings(_settings)


# The pipelines this process has loaded: an incremental build embeds with the one that answers, rather
# than load the same model a second time.
_loaded: dict[str, crag.pipeline.Pipeline] = {}


def pipeline(settings: Settings) -> tuple[crag.pipeline.Pipeline | None, str]:
    """The pipeline, or None and a message that says what to do. A failure is not cached: the next run retries."""
    try:
        loaded = _pipeline(_key(settings), settings)
        if loaded.retriever.missing and _embedder_back(settings, loaded.retriever.missing.embedder):
            forget_pipeline()  # Ollama is back with the index's embedder: its dense half answers again
            loaded = _pipeline(_key(settings), settings)
        _loaded[_key(settings)] = loaded
        return loaded, ""
    except CragError as exc:
        return None, str(exc)
    except Exception as exc:  # noqa: BLE001 - the page stays up whatever the model layer raises
        return None, (
            f"The model could not be loaded ({type(exc).__name__}: {exc}). "
            "Check the CRAG_* settings (environment or .env) and the model server, then reload the page."
        )


def _embedder_back(settings: Settings, embedder: str) -> bool:
    """Whether Ollama now has the index's missing embedder, by the cached answer: a page run sends no probe."""
    health = ollama_health(settings.ollama_url)
    return embedder.startswith("ollama:") and health.reachable and health.has(embedder.removeprefix("ollama:"))


def forget_pipeline() -> None:
    """Rebuild the pipeline on the next run: after a model pull, or an index built with another embedder."""
    _pipeline.clear()
    _loaded.clear()


def reopen_if_rebuilt(settings: Settings, pipeline: crag.pipeline.Pipeline | None) -> bool:
    """A full rebuild may move the index to another embedder: then the pipeline opens it anew. An index whose own
    embedder is missing is not such a move: the pipeline answers from its lexical half meanwhile."""
    try:
        active = crag.store.open_store(settings).active()
    except CragError:
        return False
    if pipeline is None or active is None:
        return False
    missing = pipeline.retriever.missing
    if active.embedder in (pipeline.retriever.embedder.name, missing.embedder if missing else None):
        return False
    forget_pipeline()
    return True


# ---------------------------------------------------------------------------------------------
# Builds: background jobs of the process


@st.cache_resource
def _builds(key: str, _settings: Settings) -> Builds:
    def embedder_for(rebuild: bool) -> crag.models.Embedder:
        # An incremental build keeps the index's embedder, already loaded by the pipeline; a full rebuild
        # chooses afresh, which is how an index moves to Ollama's bge-m3 once it is pulled.
        # An index whose embedder is missing gets no other: the build fails, saying so (EmbedderUnavailable).
        loaded = _loaded.get(key)
        if loaded is not None and not rebuild and loaded.retriever.missing is None:
            return loaded.retriever.embedder
        return crag.retriever.index_embedder(_settings, rebuild)

    return Builds(_settings, embedder_for, lambda embedder: None)


def builds(settings: Settings) -> Builds:
    """The one job runner of this process for these settings: every session sees its builds."""
    return _builds(_key(settings), settings)


# ---------------------------------------------------------------------------------------------
# Ollama


@st.cache_data(ttl=15, show_spinner=False)
def ollama_health(url: str) -> crag.models.OllamaHealth:
    return crag.models.ollama_health(url)


def forget_health() -> None:
    ollama_health.clear()


# ---------------------------------------------------------------------------------------------
# The knowledge base


@dataclass
class KnowledgeBase:
    generation: Generation | None = None
    files: list[FileResult] = field(default_factory=list)  # the manifest, plus files not indexed yet ("new")
    error: str = ""  # the index cannot be read

    @property
    def empty(self) -> bool:
        return self.generation is None or self.generation.chunks == 0

    @property
    def pending(self) -> list[str]:
        return [f.file for f in self.files if f.status == "new"]

    @property
    def missing(self) -> list[str]:
        """Indexed files that are no longer in the folder: the index holds them until the next build."""
        return [f.file for f in self.files if f.status == "missing" and f.chunks]

    @property
    def parsers(self) -> list[str]:
        return sorted({f.parser for f in self.files if f.parser})


def knowledge_base(settings: Settings) -> KnowledgeBase:
    """What the index holds, per file, and which files of the folder it does not hold yet."""
    kb = KnowledgeBase()
    try:
        store = crag.store.open_store(settings)
        kb.generation = store.active()
        manifest = store.manifest() if kb.generation else []
        kb.error = store.verify()  # a damaged index is caught here, before any question hits it
    except CragError as exc:
        kb.error, manifest = str(exc), []
    except (OSError, ValueError) as exc:
        kb.error = f"The index in {settings.chroma_dir} cannot be read ({exc}): run a full rebuild."
        manifest = []
    try:
        on_disk = {p.relative_to(settings.files_dir).as_posix() for p in crag.ingest.scan(settings.files_dir)}
    except OSError:
        on_disk = set()
    kb.files = [
        replace(m, status="missing") if m.file not in on_disk and m.status != "removed" else m for m in manifest
    ]
    known = {m.file for m in manifest}
    kb.files += [FileResult(name, "new") for name in sorted(on_disk - known)]
    kb.files.sort(key=lambda f: f.file.lower())
    return kb
