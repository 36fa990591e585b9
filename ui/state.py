"""Session state, what the process shares, and the calls into ``crag`` that the page makes.

``crag`` is reached through module attributes (``crag.ingest.sync``, ``Pipeline.from_settings``,
``crag.models.ollama_health``) at call time, so tests can swap any piece for a fake.

What outlives a session lives in the process: the pipeline, loaded in a background thread (``Loading``), the
build job runner (a build goes on through reruns, reloads and other sessions, which all see it) and the
conversation store (SQLite beside the index). The open conversation is in the page's URL (``?chat=``), so a reload
reopens it.

The modules that take seconds to import (pydantic-ai, Chroma, torch, PyMuPDF) are imported where they are used,
not here: the first page after the server starts is drawn without them, while the pipeline loads.
"""

from __future__ import annotations

import hashlib
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import streamlit as st

import crag.files
import crag.store
from crag import first_imports
from crag.config import Settings, load_settings
from crag.conversations import Conversations, HistoryUnavailable, chats_file, private_history
from crag.errors import CragError
from crag.jobs import Builds
from crag.store import Generation
from crag.types import FileResult
from ui import scope
from ui.text import error_text

if TYPE_CHECKING:
    import crag.models
    import crag.pipeline
    import crag.watch


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
    return _conversations(str(chats_file(settings)))


def temporary_conversations() -> Conversations:
    """Where conversations go while the index folder cannot be written: a folder of the temporary folder that only
    this user can enter (``crag.conversations.private_history``), lost when the machine restarts."""
    return _conversations(str(_private_history(tempfile.gettempdir())))


@st.cache_resource
def _private_history(temp: str) -> Path:
    """One per process and temporary folder: a folder made with a random name is made once, and kept."""
    return private_history(Path(temp))


def current_chat(store: Conversations) -> str | None:
    """The open conversation (from the URL), or None for a new one not saved yet."""
    chat = st.query_params.get("chat")
    if chat and store.get(chat) is None:  # deleted in another tab, or a stale link
        del st.query_params["chat"]
        st.toast("The chat in this link no longer exists (deleted?): this is a new chat.", icon=":material/info:")
        return None
    return chat or None


def open_chat(chat: str | None) -> None:
    scope.forget_new()  # a new chat's scope is in the URL only until the chat is created
    if chat:
        st.query_params["chat"] = chat
    elif "chat" in st.query_params:
        del st.query_params["chat"]


def new_chat() -> None:
    open_chat(None)


ALONE = "ask_alone"  # a question to ask again without the conversation before it


def ask_alone(question: str) -> None:
    """Under an answer read as a follow-up, "Ask it on its own": the question again, read as it is."""
    st.session_state[ALONE] = question


def thresholds(store: Conversations, settings: Settings, options: dict[str, Any]) -> dict[str, Any]:
    """The thresholds that answer the next question, as ``Pipeline.stream`` options, with whose they are: those of
    the Answer settings when moved from the app's, else a fit applied to the question's scope, else the app's."""
    from crag.calibration import Thresholds, answering, overrides

    chosen = Thresholds(options["lower_threshold"], options["upper_threshold"])
    try:
        applied = store.applied(options.get("scope") or ())
    except HistoryUnavailable:  # the sidebar says the history cannot be used; the app's thresholds answer
        applied = None
    return overrides(*answering(Thresholds(settings.lower_threshold, settings.upper_threshold), applied, chosen))


def answering() -> bool:
    """Whether this run of the page writes an answer: a question was just asked (the chat box, or a button under an
    answer that asks again). The sidebar is drawn before it."""
    ss = st.session_state
    return bool(ss.get("question")) or bool(ss.get("reask")) or bool(ss.get(ALONE))


# ---------------------------------------------------------------------------------------------
# Settings


def load_base_settings() -> Settings:
    return load_settings()


def _key(settings: Settings) -> str:
    # The dump masks the API key; its hash keeps two keys from sharing a cached pipeline.
    secret = settings.openai_api_key.get_secret_value() if settings.openai_api_key else ""
    return settings.model_dump_json() + hashlib.sha256(secret.encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------------------------
# The pipeline (the model, the embedder, the retriever): loaded once per settings, in the background


class Loading:
    """``Pipeline.from_settings`` in a thread of the process. The page is drawn at once and says the models are
    loading; a question asked meanwhile waits for them. ``start`` is called once the page's chat box is drawn, so
    that drawing the first page does not share the CPU with the loading."""

    def __init__(self, key: str, settings: Settings) -> None:
        self.key, self.settings = key, settings
        self.pipeline: crag.pipeline.Pipeline | None = None
        self.error = ""  # why it failed: a message that says what to do
        self.done = threading.Event()
        self.began: float | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self.began is not None:
                return
            self.began = time.monotonic()
        threading.Thread(target=self._load, name="crag-load-models", daemon=True).start()

    def wait(self, seconds: float) -> bool:
        """Whether it is done (loaded or failed), after waiting at most ``seconds``."""
        self.start()
        return self.done.wait(seconds)

    @property
    def seconds(self) -> float:
        """How long it has been loading."""
        return time.monotonic() - self.began if self.began is not None else 0.0

    def _load(self) -> None:
        try:
            with first_imports:  # a build may start in another thread meanwhile
                import crag.pipeline  # pydantic-ai, Chroma and the models' libraries: seconds of imports, here

            self.pipeline = crag.pipeline.Pipeline.from_settings(self.settings)
            _loaded[self.key] = self.pipeline
        except CragError as exc:
            self.error = error_text(exc)
        except Exception as exc:  # noqa: BLE001 - the page stays up whatever the model layer raises
            self.error = (
                f"The model could not be loaded ({type(exc).__name__}: {exc}). "
                "Check the CRAG_* settings (environment or .env) and the model server, then reload the page."
            )
        finally:
            self.done.set()


@st.cache_resource(show_spinner=False, max_entries=4)
def _loading(key: str, _settings: Settings) -> Loading:
    return Loading(key, _settings)


# The pipelines this process has loaded: an incremental build embeds with the one that answers, rather
# than load the same model a second time.
_loaded: dict[str, crag.pipeline.Pipeline] = {}


def models(settings: Settings) -> Loading:
    """The pipeline's loading for these settings: done or not, loaded or failed. A load that failed is tried again
    by a session's first run (a reload) and by "Check again" (``forget_pipeline``)."""
    loading = _loading(_key(settings), settings)
    first_run = not st.session_state.get("models_seen")
    st.session_state.models_seen = True
    if loading.done.is_set() and loading.error and first_run:
        forget_pipeline()
        return _loading(_key(settings), settings)
    loaded = loading.pipeline
    if loaded is not None and loaded.retriever.missing and _embedder_back(settings, loaded.retriever.missing.embedder):
        forget_pipeline()  # Ollama is back with the index's embedder: its dense half answers again
        return _loading(_key(settings), settings)
    return loading


def _embedder_back(settings: Settings, embedder: str) -> bool:
    """Whether Ollama now has the index's missing embedder, by the cached answer: a page run sends no probe."""
    health = ollama_health(settings.ollama_url)
    return embedder.startswith("ollama:") and health.reachable and health.has(embedder.removeprefix("ollama:"))


def forget_pipeline() -> None:
    """Load the pipeline again: after a model pull, a failed load, or an index built with another embedder."""
    _loading.clear()
    _loaded.clear()


def reopen_if_rebuilt(pipeline: crag.pipeline.Pipeline | None) -> bool:
    """A full rebuild may move the index to another embedder (``Retriever.moved``): then the pipeline opens it anew."""
    if pipeline is None or not pipeline.retriever.moved():
        return False
    forget_pipeline()
    return True


# ---------------------------------------------------------------------------------------------
# Builds: background jobs of the process


@st.cache_resource
def _builds(key: str, _settings: Settings) -> Builds:
    def embedder_for(rebuild: bool) -> crag.models.Embedder:
        import crag.retriever

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


@st.cache_resource
def _watcher(key: str, _settings: Settings) -> crag.watch.Watcher:
    import crag.watch

    return crag.watch.Watcher(_settings, _builds(key, _settings)).start()


def watcher(settings: Settings) -> crag.watch.Watcher | None:
    """The one watcher of the files folder of this process (``crag.watch``), started with the first page; None when
    ``CRAG_WATCH=off``. Its builds are the runner's, as the Rebuild button's are."""
    return _watcher(_key(settings), settings) if settings.watch != "off" else None


# ---------------------------------------------------------------------------------------------
# Ollama


@st.cache_data(ttl=15, show_spinner=False)
def ollama_health(url: str) -> crag.models.OllamaHealth:
    import crag.models

    return crag.models.ollama_health(url)


def forget_health() -> None:
    ollama_health.clear()


# ---------------------------------------------------------------------------------------------
# The knowledge base


@dataclass
class IndexContents:
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


def index_contents(settings: Settings, verify: bool = True) -> IndexContents:
    """What the index holds, per file, and which files of the folder it does not hold yet. ``verify``: open the
    index to check it (Chroma and BM25), which the first page leaves to the pipeline's loading."""
    kb = IndexContents()
    try:
        store = crag.store.open_store(settings)
        kb.generation = store.active()
        manifest = store.manifest() if kb.generation else []
        if verify:  # a damaged index is caught here, before any question hits it
            kb.error = store.verify() or ""
    except CragError as exc:
        kb.error, manifest = error_text(exc), []
    except (OSError, ValueError) as exc:
        kb.error = f"The index in {settings.chroma_dir} cannot be read ({exc}): run a full rebuild."
        manifest = []
    try:
        on_disk = {p.relative_to(settings.files_dir).as_posix() for p in crag.files.scan(settings.files_dir)}
    except OSError:
        on_disk = set()
    kb.files = [  # a file imported without its PDF is not missing: the index keeps it as imported
        replace(m, status="missing") if m.file not in on_disk and m.status != "removed" and not m.detached else m
        for m in manifest
    ]
    known = {m.file for m in manifest}
    kb.files += [FileResult(file=name, status="new") for name in sorted(on_disk - known)]
    kb.files.sort(key=lambda f: f.file.lower())
    return kb
