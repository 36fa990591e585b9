"""Backend choice, the Ollama health check and the OpenAI-compatible path, against loopback servers."""

from __future__ import annotations

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, NativeOutput

from crag.config import load_settings
from crag.errors import BackendUnavailable, ConfigError
from crag.models import (
    OllamaEmbedder,
    build_chat_model,
    build_embedder,
    ollama_health,
    resolve_backend,
    to_chat_messages,
)


def test_health_of_a_closed_port(closed_port_url: str) -> None:
    health = ollama_health(closed_port_url)
    assert not health.reachable and health.error
    assert health.url == closed_port_url


def test_health_lists_models(fake_ollama) -> None:
    fake_ollama.models = ["qwen3:4b", "bge-m3:latest"]
    health = ollama_health(fake_ollama.url)
    assert health.reachable
    assert health.has("qwen3:4b") and health.has("bge-m3") and not health.has("llama3.2")


def test_auto_falls_back_to_embedded_and_says_why(closed_port_url: str) -> None:
    backend = resolve_backend(load_settings(ollama_url=closed_port_url))
    assert backend.name == "embedded"
    assert closed_port_url in backend.reason and "ollama serve" in backend.reason


def test_auto_uses_ollama_when_it_has_the_model(fake_ollama) -> None:
    fake_ollama.models = ["qwen3:4b"]
    backend = resolve_backend(load_settings(ollama_url=fake_ollama.url))
    assert (backend.name, backend.model) == ("ollama", "qwen3:4b")


def test_auto_falls_back_when_the_model_is_not_pulled(fake_ollama) -> None:
    fake_ollama.models = ["llama3.2:latest"]
    backend = resolve_backend(load_settings(ollama_url=fake_ollama.url))
    assert backend.name == "embedded" and "ollama pull qwen3:4b" in backend.reason


def test_explicit_ollama_that_is_down_is_an_error(closed_port_url: str) -> None:
    with pytest.raises(BackendUnavailable) as err:
        resolve_backend(load_settings(ollama_url=closed_port_url, llm_backend="ollama"))
    assert closed_port_url in str(err.value) and "ollama serve" in str(err.value)


def test_explicit_ollama_without_the_model_is_an_error(fake_ollama) -> None:
    with pytest.raises(BackendUnavailable, match="ollama pull qwen3:4b"):
        resolve_backend(load_settings(ollama_url=fake_ollama.url, llm_backend="ollama"))


def test_openai_backend_needs_a_base_url() -> None:
    with pytest.raises(ConfigError, match="CRAG_OPENAI_BASE_URL"):
        resolve_backend(load_settings(llm_backend="openai"))


class Verdict(BaseModel):
    relevant: bool
    score: float


def test_ollama_structured_output_uses_json_schema(fake_ollama, real_models) -> None:
    """NativeOutput reaches Ollama as response_format json_schema, and its reply is parsed."""
    fake_ollama.models = ["qwen3:4b"]
    fake_ollama.chat_reply = '{"relevant": true, "score": 0.75}'
    settings = load_settings(ollama_url=fake_ollama.url, llm_backend="ollama")
    model = build_chat_model(settings, resolve_backend(settings))
    result = Agent(model, output_type=NativeOutput(Verdict)).run_sync("Is this relevant?")
    assert result.output == Verdict(relevant=True, score=0.75)
    body = fake_ollama.requests[-1]["body"]
    assert body["model"] == "qwen3:4b"
    assert body["response_format"]["type"] == "json_schema"
    assert set(body["response_format"]["json_schema"]["schema"]["properties"]) == {"relevant", "score"}


def test_openai_compatible_server_gets_the_key(fake_ollama, real_models) -> None:
    fake_ollama.chat_reply = "Hello"
    settings = load_settings(
        llm_backend="openai", openai_base_url=f"{fake_ollama.url}/v1", openai_api_key="sk-test", chat_model="m"
    )
    model = build_chat_model(settings, resolve_backend(settings))
    assert Agent(model).run_sync("Hi").output == "Hello"


def test_embedder_prefers_ollama_when_it_has_the_model(fake_ollama) -> None:
    fake_ollama.models = ["bge-m3:latest"]
    embedder = build_embedder(load_settings(ollama_url=fake_ollama.url))
    assert isinstance(embedder, OllamaEmbedder) and embedder.name == "ollama:bge-m3"
    assert embedder.embed(["一", "two"]) == [pytest.approx([0.6, 0.8, 0.0])] * 2


def test_explicit_ollama_embedder_that_is_down_is_an_error(closed_port_url: str) -> None:
    with pytest.raises(BackendUnavailable, match="ollama serve"):
        build_embedder(load_settings(ollama_url=closed_port_url, embed_backend="ollama"))


def test_chat_messages_fold_system_turns_first() -> None:
    from pydantic_ai.messages import ModelRequest, ModelResponse, SystemPromptPart, TextPart, UserPromptPart

    history = [
        ModelRequest(parts=[SystemPromptPart("be brief"), UserPromptPart("hi")]),
        ModelResponse(parts=[TextPart("hello")]),
        ModelRequest(parts=[UserPromptPart("and?")]),
    ]
    assert to_chat_messages(history, "rules") == [
        {"role": "system", "content": "rules\n\nbe brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "and?"},
    ]


def test_embedding_a_batch_larger_than_the_cache_keeps_every_vector() -> None:
    """A question embedded earlier, then again with more new strips than the cache holds: it is not lost
    to eviction between computing the batch and reading it back (the benchmark died of a KeyError)."""
    from tests.fakes import HashEmbedder

    embedder = HashEmbedder()
    embedder.cache_size = 3
    question = "How much memory does the widget need?"
    first = embedder.embed([question])[0]
    strips = [f"strip number {n} about memory" for n in range(5)]
    vectors = embedder.embed([question, *strips, question])
    assert len(vectors) == 7 and vectors[0] == first == vectors[-1]
    assert vectors[1:6] == HashEmbedder().embed(strips)
