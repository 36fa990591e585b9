"""The HTTP API's requests and responses (pydantic at the edge only). Answers are ``crag.contract.AnswerOut``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from crag.contract import MAX_TURN, MAX_TURNS, Turn
from crag.errors import CragError
from crag.text import MAX_QUESTION_CHARS, clean_question

MAX_SCOPE_PATHS = 100
MAX_SCOPE_PATH = 1_000  # characters of one folder or file path


def _question(text: str) -> str:
    """The one question check the UI, the CLI and the pipeline use: a bad question is a 422 up front."""
    try:
        return clean_question(text)
    except CragError as exc:
        raise ValueError(str(exc)) from None


class AskRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"question": "How much memory does the widget need?"},
                {
                    "question": "And on Windows?",
                    "history": [
                        {"role": "user", "content": "How do I install it?"},
                        {"role": "assistant", "content": "Run the installer [1]."},
                    ],
                    "web": False,
                    "stream": True,
                },
                {"question": "How much memory does the widget need?", "scope": ["projects/alpha"]},
            ]
        },
    )

    # The raw cap only bounds the transport (and makes pydantic refuse lone surrogates); the question's own
    # rule, the one the UI and the CLI apply, is ``clean_question``'s.
    question: Annotated[str, Field(min_length=1, max_length=MAX_TURN), AfterValidator(_question)] = Field(
        description=f"Control and invisible characters are removed; then 1 to {MAX_QUESTION_CHARS} characters, "
        "not punctuation only."
    )
    history: list[Turn] = Field(
        default_factory=list, max_length=MAX_TURNS, description="Earlier turns, oldest first, for follow-ups."
    )
    web: bool | None = Field(
        None, description="Search the web when local knowledge falls short; unset: CRAG_WEB_SEARCH."
    )
    scope: list[Annotated[str, Field(max_length=MAX_SCOPE_PATH)]] | None = Field(
        None,
        max_length=MAX_SCOPE_PATHS,
        description="Folders (knowledge bases) and files to ask, relative to the files folder: a folder holds its "
        "subfolders, and `(top level)` is the PDFs directly in it. Unset or empty: every document. GET /scopes "
        "lists the folders; an unknown one is a 400 that lists them too.",
    )
    stream: bool = Field(False, description="Answer with Server-Sent Events: stage, token, then done (or error).")


class IndexRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rebuild: bool = Field(False, description="Re-parse and re-embed every file, not only new and changed ones.")


class ErrorOut(BaseModel):
    error: str = Field(description="What went wrong and what to do about it.")


class FieldError(BaseModel):
    loc: list[str]
    msg: str
    type: str


class ValidationErrorOut(ErrorOut):
    detail: list[FieldError] = Field(description="The fields at fault.")


class ProgressOut(BaseModel):
    stage: str = Field(description="starting | scanning | parsing | embedding | writing | done")
    file: str
    file_index: int = Field(description="i of 'file i/N', from 1")
    file_count: int
    page: int = Field(description="j of 'page j/M' while parsing; chunks embedded while embedding")
    page_count: int
    fraction: float


class FileResultOut(BaseModel):
    model_config = ConfigDict(extra="allow")

    file: str
    status: str = Field(description="indexed | unchanged | removed | failed | skipped")
    pages: int = 0
    chunks: int = 0
    seconds: float = 0.0
    error: str = ""


class BuildReportOut(BaseModel):
    model_config = ConfigDict(extra="allow")

    files: list[FileResultOut]
    total_chunks: int
    pages_per_second: float


class JobOut(BaseModel):
    job: str
    state: Literal["running", "done", "failed", "cancelled"]
    rebuild: bool
    started_at: str
    finished_at: str | None
    progress: ProgressOut
    result: BuildReportOut | None = Field(description="Per-file results when the build is done.")
    error: str | None = Field(description="Why the build failed; the previous index still answers.")


class JobCreated(BaseModel):
    job: str
    status_url: str


class ManifestEntry(BaseModel):
    model_config = ConfigDict(extra="allow")

    file: str
    status: str
    pages: int = 0
    chunks: int = 0
    error: str = ""
    warnings: list[str] = Field(default_factory=list)
    hash: str = ""
    parser: str = ""
    parser_version: str = ""


class ScopeOut(BaseModel):
    name: str = Field(
        description="The folder, relative to the files folder; `(top level)` for the PDFs directly in it."
    )
    files: int = Field(description="Documents the index holds passages of, its subfolders' included.")
    chunks: int = Field(description="Their passages.")
    other: int = Field(description="Documents the build failed on or skipped.")


class ScopesOut(BaseModel):
    generation: str | None = Field(description="The index generation that answers; null when none is built.")
    scopes: list[ScopeOut] = Field(description="Every knowledge base, `(top level)` first, then by name.")


class FilesOut(BaseModel):
    generation: str | None = Field(description="The index generation that answers; null when none is built.")
    files: list[ManifestEntry]


class BackendOut(BaseModel):
    name: str
    model: str
    reason: str


class ModelPresence(BaseModel):
    name: str
    present: bool


class OllamaOut(BaseModel):
    url: str
    reachable: bool
    error: str | None
    chat_model: ModelPresence
    embed_model: ModelPresence


class IndexStats(BaseModel):
    generation: str
    built_at: str
    embedder: str
    files: int
    chunks: int


class HealthOut(BaseModel):
    status: Literal["ok", "degraded"] = Field(description="degraded: see backend_error and index_error")
    version: str
    backend: BackendOut | None = Field(description="The chat backend in use, or the one the first question will use.")
    backend_error: str | None
    embedded_model: ModelPresence = Field(description="The GGUF of the embedded backend.")
    ollama: OllamaOut
    pipeline_loaded: bool
    embedder: str | None = Field(description="The embedder answering queries, once the pipeline is loaded.")
    index: IndexStats | None
    index_error: str | None
    index_upgrade: str | None = Field(
        None,
        description="Set for an index built with the English-only MiniLM, which is no longer installed (it answers "
        "from its lexical index): a full rebuild (POST /index with rebuild) moves it to the multilingual built-in "
        "embedder.",
    )
    build_running: str | None = Field(description="The id of the build job that runs now.")
