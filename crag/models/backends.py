"""Choosing the chat backend (``CRAG_LLM_BACKEND``) and building its PydanticAI model.

The CRAG core receives a PydanticAI model and never learns which backend runs; this module is the one
place that knows the three of them and why one was picked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings

from crag.config import Settings, redacted_url
from crag.errors import BackendUnavailable, ConfigError
from crag.models.embedded import check_embedded, embedded_chat_model, embedded_label
from crag.models.ollama import OllamaHealth, ollama_chat_model, ollama_health, ollama_unreachable_message
from crag.models.openai import openai_chat_model


@dataclass(frozen=True)
class BackendInfo:
    """The backend that runs, and why: the UI and the CLI show this to the user."""

    name: str  # "ollama" | "openai" | "embedded"
    model: str
    reason: str


def resolve_backend(settings: Settings, health: OllamaHealth | None = None) -> BackendInfo:
    """Pick the chat backend. Explicit choices fail loudly; ``auto`` falls back and says why. The embedded model
    need not be installed for ``auto``'s fallback, whose answers quote the documents: a call that needs it says how to
    install it."""
    embedded = embedded_label(settings)
    choice = settings.llm_backend
    if choice == "embedded":
        check_embedded(settings)
        return BackendInfo("embedded", embedded, "CRAG_LLM_BACKEND=embedded")
    if choice == "openai":
        if not settings.openai_base_url:
            raise ConfigError(
                "CRAG_LLM_BACKEND=openai needs CRAG_OPENAI_BASE_URL (for example http://127.0.0.1:8000/v1)."
            )
        where = redacted_url(settings.openai_base_url)  # shown by the sidebar and /health: no key in it
        return BackendInfo("openai", settings.chat_model, f"OpenAI-compatible server at {where}")

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
        return ollama_chat_model(settings, model_settings(settings, backend))
    if backend.name == "openai":
        return openai_chat_model(settings, model_settings(settings, backend))
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
