"""Ollama: is it up and which models has it, pulling a model, and the chat model on its ``/v1``.

``OllamaModel`` talks to Ollama's OpenAI-compatible endpoint; structured output is ``NativeOutput``
(``response_format`` json_schema, grammar-constrained by Ollama). The ``ollama`` client is imported inside
the functions that use it, so a process that never talks to Ollama never loads it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings

from crag.config import Settings
from crag.errors import BackendUnavailable


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
    except ValueError:  # not JSON, or not a model list (pydantic's ValidationError is a ValueError)
        # Something else answers there: a proxy's login page, another server on Ollama's port.
        error = f"not Ollama at {url}: its answer is not Ollama's model list"
        return OllamaHealth(url=url, reachable=False, error=error)
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
            f"Ollama is not reachable at {url} ({str(exc) or type(exc).__name__}): start it with `ollama serve`, "
            f"or set CRAG_OLLAMA_URL to where it runs, then pull `{name}` again."
        ) from None


def ollama_chat_model(settings: Settings, model_settings: ModelSettings) -> Model:
    """``CRAG_CHAT_MODEL`` on Ollama. ``model_settings`` comes from the backend choice (timeout, thinking)."""
    from pydantic_ai.models.ollama import OllamaModel
    from pydantic_ai.providers.ollama import OllamaProvider

    provider = OllamaProvider(base_url=f"{settings.ollama_url}/v1")
    return OllamaModel(settings.chat_model, provider=provider, settings=model_settings)
