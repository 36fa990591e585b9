"""Any OpenAI-compatible server (vLLM, LM Studio, llama-cpp-python's, DashScope) at ``CRAG_OPENAI_BASE_URL``.

Structured output adapts to what the server accepts: ``crag.models.structured``."""

from __future__ import annotations

from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings

from crag.config import Settings


def openai_chat_model(settings: Settings, model_settings: ModelSettings) -> Model:
    """``CRAG_CHAT_MODEL`` on that server. ``model_settings`` comes from the backend choice (timeout, thinking)."""
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.profiles.openai import OpenAIModelProfile
    from pydantic_ai.providers.openai import OpenAIProvider

    # Local servers take no key, but the OpenAI client refuses to start without one.
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else "not-needed"
    provider = OpenAIProvider(base_url=settings.openai_base_url, api_key=key)
    # Which structured output the server takes is found out per server (crag.models.structured), which sends
    # json_object itself, with the schema: PydanticAI's prompted mode must not add a bare one. The answer's cap goes
    # as max_tokens, which these servers read; llama-cpp-python's ignores OpenAI's newer max_completion_tokens.
    profile = OpenAIModelProfile(supports_json_object_output=False, openai_chat_supports_max_completion_tokens=False)
    return OpenAIChatModel(settings.chat_model, provider=provider, settings=model_settings, profile=profile)
