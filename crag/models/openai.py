"""Any OpenAI-compatible server (vLLM, LM Studio, DashScope) at ``CRAG_OPENAI_BASE_URL``."""

from __future__ import annotations

from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings

from crag.config import Settings


def openai_chat_model(settings: Settings, model_settings: ModelSettings) -> Model:
    """``CRAG_CHAT_MODEL`` on that server. ``model_settings`` comes from the backend choice (timeout, thinking)."""
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    # Local servers take no key, but the OpenAI client refuses to start without one.
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else "not-needed"
    provider = OpenAIProvider(base_url=settings.openai_base_url, api_key=key)
    return OpenAIChatModel(settings.chat_model, provider=provider, settings=model_settings)
