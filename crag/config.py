"""Settings, read from the environment (prefix ``CRAG_``) and an optional ``.env`` file.

Settings are read when ``load_settings()`` is called, never at import, so tests and the UI can
change the environment first. Relative paths are relative to the working directory.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from crag.errors import ConfigError

DEFAULT_OLLAMA_URL = "http://127.0.0.1:11434"


def normalize_ollama_url(value: str) -> str:
    """Accept what ``OLLAMA_HOST`` accepts (``host``, ``host:port``, ``0.0.0.0``) and return a URL."""
    value = value.strip().rstrip("/")
    if not value:
        return DEFAULT_OLLAMA_URL
    if "://" not in value:
        value = "http://" + value
    parts = urlsplit(value)
    host = parts.hostname or "127.0.0.1"
    # 0.0.0.0 is where a server listens, not an address to connect to.
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    port = parts.port or (443 if parts.scheme == "https" else 11434)
    return f"{parts.scheme}://{host}:{port}{parts.path}"


def is_loopback(host: str) -> bool:
    """Whether a server bound to ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# A Host header, as RFC 9110 has it: a name (or an IPv4 address) or an IPv6 address in brackets, then a port. Nothing
# else: read as a URL's authority, "evil.com@127.0.0.1" (a user before "@") or "127.0.0.1#@evil.com" (a fragment) would
# be 127.0.0.1, a name a browser never sends for them.
_HOST = re.compile(r"(?:(?P<name>[A-Za-z0-9._-]+)|\[(?P<ip>[0-9A-Fa-f:.]+)\])(?::[0-9]{0,5})?")


def host_name(host: str) -> str | None:
    """The name in a ``Host`` header or an address, lower-cased, without its port or brackets
    (``[::1]:8000`` -> ``::1``); None when there is none, or when it holds more than a name and a port."""
    found = _HOST.fullmatch(host.strip())
    if found is None:
        return None
    if found["ip"] is not None:
        try:
            return str(ipaddress.IPv6Address(found["ip"]))
        except ValueError:
            return None
    return found["name"].lower()


# Query parameters that carry a credential in a base URL (?api_key=..., ?key=..., ?access_token=..., ?sig=...).
_SECRET_PARAM = ("key", "token", "secret", "password", "passwd", "pwd", "auth", "sig", "credential", "session")


def redacted_url(url: str) -> str:
    """A URL to show: without the user and password before its host, and with the values of query parameters
    that carry a credential replaced by ``***``. A base URL may hold a key; the page and /health show it."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(an unreadable URL)"
    if ":" in host:
        host = f"[{host}]"
    netloc = ("***@" if "@" in parts.netloc else "") + host + port
    query = [
        (name, "***" if any(word in name.lower() for word in _SECRET_PARAM) else value)
        for name, value in parse_qsl(parts.query, keep_blank_values=True)
    ]
    return urlunsplit((parts.scheme, netloc, parts.path, urlencode(query, safe="*"), ""))


class Settings(BaseSettings):
    """Every setting of the app. docs/configuration.md documents each one with its env var and default."""

    model_config = SettingsConfigDict(
        env_prefix="CRAG_", env_file=".env", env_file_encoding="utf-8", extra="ignore", validate_by_name=True
    )

    # Paths
    files_dir: Path = Field(Path("Files"), description="Folder of PDFs that make the knowledge base.")
    chroma_dir: Path = Field(Path("chroma_db"), description="Folder of the persisted index.")
    chroma_url: str | None = Field(
        None,
        description="A Chroma server (`chroma run`) that holds the index, shared by every app instance that "
        "points at it, e.g. http://10.0.0.5:8000. Unset: embedded Chroma in chroma_dir.",
    )
    chroma_token: SecretStr | None = Field(
        None, description="Token sent to the Chroma server (or the proxy in front of it). Never logged or shown."
    )
    chroma_token_header: Literal["Authorization", "X-Chroma-Token"] = Field(
        "Authorization",
        description="Header that carries chroma_token: Authorization (as `Bearer <token>`) or X-Chroma-Token.",
    )
    build_lease_seconds: float = Field(
        30.0,
        ge=2,
        le=3600,
        description="With a Chroma server: how long the build lease lasts unless renewed (a build renews it "
        "every third of this); a killed build blocks the next one this long at most.",
    )

    # Backends
    llm_backend: Literal["auto", "ollama", "openai", "embedded"] = Field(
        "auto", description="Chat model backend. auto: Ollama when it answers and has the model, else embedded."
    )
    embed_backend: Literal["auto", "ollama", "local"] = Field(
        "auto",
        description="Embedding backend for a new index or a full rebuild. auto: Ollama when it answers and has the "
        "model, else the packaged multilingual USE (local).",
    )
    ollama_url: str = Field(
        DEFAULT_OLLAMA_URL,
        validation_alias=AliasChoices("CRAG_OLLAMA_URL", "OLLAMA_HOST"),
        description="Ollama server. OLLAMA_HOST is honoured when CRAG_OLLAMA_URL is unset.",
    )
    chat_model: str = Field("qwen3:4b", description="Chat model on Ollama or the OpenAI-compatible server.")
    embed_model: str = Field("bge-m3", description="Embedding model on Ollama (multilingual).")
    openai_base_url: str | None = Field(
        None,
        description="Base URL of an OpenAI-compatible server (vLLM, LM Studio, DashScope), e.g. http://127.0.0.1:8000/v1.",
    )
    openai_api_key: SecretStr | None = Field(None, description="API key for that server. Never logged or shown.")
    embedded_gguf: Path | None = Field(
        None,
        description="An instruction-tuned GGUF for the embedded backend; unset uses the packaged SmolLM2 135M.",
    )
    embedded_context: int = Field(8192, ge=512, description="Context window (tokens) of the embedded model.")
    embedded_threads: int = Field(0, ge=0, description="CPU threads for the embedded model; 0 uses every core.")
    answer_mode: Literal["auto", "evidence", "generated"] = Field(
        "auto",
        description="auto: quoted evidence on the embedded backend, written answers on Ollama/OpenAI servers. "
        "evidence: always quote the documents' sentences. generated: a model writes the answer (on the embedded "
        "backend that is the weak 135M model: an explicit opt-in).",
    )
    thinking: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Reasoning of thinking models (qwen3). auto: off on Ollama (faster; grading and answers do not "
        "need it), the server's default elsewhere.",
    )
    request_timeout: float = Field(120.0, gt=0, description="Seconds before a model request is abandoned.")
    max_answer_tokens: int = Field(512, ge=16, description="Upper bound on the tokens of one answer.")

    # Ingestion
    parser: Literal["auto", "mineru", "pymupdf"] = Field(
        "auto", description="PDF parser. auto: MinerU when configured and reachable, else PyMuPDF."
    )
    max_upload_mb: int = Field(50, ge=1, le=4096, description="Largest PDF the sidebar accepts, in MB.")
    max_pages: int = Field(
        500, ge=1, description="PDFs with more pages are refused (parsing runs at a few pages per second)."
    )
    # A part is 8 pages: about 3 s of layout, or about 30 s if every page is a scan read with OCR (3.5 s a page);
    # 120 s leaves room for a slower or busier machine, and a page that hangs MuPDF still fails within minutes.
    parse_part_timeout: float = Field(
        120.0, gt=0, description="Seconds a parse worker may spend on 8 pages before it is stopped and the file fails."
    )
    ocr: Literal["auto", "off", "force"] = Field(
        "auto", description="OCR (RapidOCR, offline) for pages without a usable text layer; force: every page."
    )
    ocr_dpi: int = Field(200, ge=100, le=300, description="Resolution pages are rendered at for OCR.")
    mineru_url: str | None = Field(None, description="MinerU server URL (http-client backend).")
    mineru_model_path: Path | None = Field(None, description="Local MinerU model folder (transformers backend).")

    watch: Literal["on", "off", "poll"] = Field(
        "on",
        description="Watch the files folder, and sync the knowledge base when PDFs are added, changed, moved or "
        "removed (the app, `crag serve`). poll: look for changes every few seconds instead of being told, for network "
        "folders (NFS, SMB), which do not report changes. off: only the Rebuild button and `crag index` sync.",
    )
    watch_quiet: float = Field(
        2.0,
        gt=0,
        le=600,
        description="Seconds the files folder must stay quiet, and a changed PDF unchanged, before a watched folder "
        "syncs: a burst of copies is one sync, and a copy in progress is not read.",
    )

    chunk_tokens: int = Field(
        220, ge=32, le=4096, description="Chunk size in tokens, as the built-in embedder's tokenizer counts them."
    )
    chunk_overlap: int = Field(32, ge=0, le=512, description="Tokens of whole sentences shared by adjacent chunks.")

    # Retrieval and CRAG
    retrieval_mode: Literal["hybrid", "dense", "lexical"] = Field(
        "hybrid", description="hybrid fuses dense and BM25 rankings with reciprocal rank fusion."
    )
    top_k: int = Field(5, ge=1, le=50, description="Chunks retrieved per question.")
    upper_threshold: float = Field(0.55, ge=-1, le=1, description="A score at or above this makes the action Correct.")
    lower_threshold: float = Field(-0.8, ge=-1, le=1, description="All scores below this make the action Incorrect.")
    evaluator: Literal["auto", "llm", "similarity"] = Field("auto", description="Retrieval evaluator.")
    model_search: bool = Field(
        True,
        description="With a model server: the model writes what the answer would say, in the documents' words, and "
        "that is searched beside the question (on|off).",
    )
    model_search_timeout: float = Field(
        30.0,
        gt=0,
        description="Seconds the model may take to write its search words; past them the question's own search stands.",
    )
    grade_timeout: float = Field(
        60.0, gt=0, description="Seconds the LLM grader may take; past them the passages are graded by similarity."
    )
    web_search: bool = Field(True, description="Search the web when local knowledge falls short (on|off).")

    # HTTP API
    api_token: SecretStr | None = Field(
        None,
        description="Bearer token that `python -m crag serve` requires on every route when set. Never logged or shown.",
    )
    allowed_hosts: Annotated[list[str] | None, NoDecode] = Field(
        None,
        description="Without api_token: host names, besides this machine's, that the API answers requests for "
        "(the name a reverse proxy forwards), comma-separated.",
    )
    api_max_body_kb: int = Field(1024, ge=1, le=1_048_576, description="Largest request body the API reads, in KB.")
    api_max_answers: int = Field(
        4, ge=1, le=256, description="Answers the API makes at once; past it a request is told to retry (429)."
    )
    api_store_answers: bool = Field(
        True,
        description="Keep the answers of POST /ask beside the chats, so that they can be rated (POST /feedback) and "
        "evaluated (on|off); off: /ask keeps nothing and returns no answer_id.",
    )

    @field_validator("ollama_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return normalize_ollama_url(value)

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _hosts(cls, value: str | Iterable[object] | None) -> list[str] | None:
        if value is None:
            return None
        given = value.replace(",", " ").split() if isinstance(value, str) else list(value or [])
        names = []
        for host in map(str, given):
            name = host_name(host)
            if name is None:
                raise ValueError(f"{host[:80]!r} is not a host name such as kb.example.org")
            names.append(name)
        return names

    @field_validator("chroma_url")
    @classmethod
    def _chroma_url(cls, value: str | None) -> str | None:
        value = (value or "").strip().rstrip("/")
        if not value:
            return None
        if "://" not in value:
            value = "http://" + value
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{value!r} is not a Chroma server URL such as http://10.0.0.5:8000")
        return value

    @model_validator(mode="after")
    def _thresholds(self) -> Settings:
        if self.lower_threshold > self.upper_threshold:
            raise ValueError(
                f"lower_threshold ({self.lower_threshold}) is above upper_threshold ({self.upper_threshold})"
            )
        return self

    def chroma_headers(self) -> dict[str, str]:
        """The headers every request to the Chroma server carries: the token, when one is set."""
        if self.chroma_token is None:
            return {}
        token = self.chroma_token.get_secret_value()
        if self.chroma_token_header == "Authorization":
            return {"Authorization": f"Bearer {token}"}
        return {"X-Chroma-Token": token}

    @property
    def threads(self) -> int:
        return self.embedded_threads or cpu_threads()


_thread_cap = 0  # set by ``cap_threads`` in a process that is one of several sharing the cores


def cpu_threads() -> int:
    """The cores this process may run on (a container's or taskset's limit, not the machine's count), or fewer
    where ``cap_threads`` said so."""
    affinity = getattr(os, "sched_getaffinity", None)
    cores = len(affinity(0)) if affinity else os.cpu_count() or 1
    return min(cores, _thread_cap or cores)


def cap_threads(threads: int) -> None:
    """Have this process's engines (the layout model, OCR) made from now on use at most ``threads`` threads: a
    build's parse worker takes one core of several."""
    global _thread_cap
    _thread_cap = threads


def load_settings(**overrides: Any) -> Settings:
    """Read the settings now. Invalid values become a ``ConfigError`` that names the variable."""
    from pydantic import ValidationError

    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(
            f"CRAG_{'_'.join(str(p) for p in err['loc']).upper() or 'SETTINGS'}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"Invalid setting: {problems}. Fix it in the environment or in .env.") from None
