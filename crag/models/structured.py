"""Structured output that adapts to the model server: what each (server, model) accepts is found once per process.

Servers take a schema in different ways. llama.cpp's C++ server, vLLM, LM Studio and Ollama accept
``response_format`` json_schema; llama-cpp-python's server refuses it (HTTP 500, "Input should be 'text' or
'json_object'") and takes ``json_object`` with the schema, which its grammar enforces; some servers have only
tool calls. The modes are tried in this order, and the first that gives a valid output is kept:

- ``json_schema``: PydanticAI's ``NativeOutput``;
- ``json_object``: ``PromptedOutput`` (the schema in the instructions) with ``response_format`` json_object and
  the schema, sent in the request's extra body;
- ``tool``: ``ToolOutput``, a tool call whose arguments are the output;
- ``prompted``: ``PromptedOutput`` alone, the reply validated.

A FastAPI server (llama-cpp-python's, vLLM) publishes its request schema at ``/openapi.json``: a mode that it
rules out is not tried, so finding out costs such a server no failed request. A server that accepts none is
remembered too: callers fall back at once, without a request.

Only OpenAI-compatible servers are asked. Ollama's ``/v1`` takes json_schema, llama.cpp in this process takes
any schema through its grammar, and PydanticAI's function and test models take what they are given: these run
``NativeOutput`` and report no mode.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, cast

import httpx
from pydantic import BaseModel
from pydantic_ai import Agent, NativeOutput, PromptedOutput, ToolOutput
from pydantic_ai.exceptions import (
    ModelAuthenticationError,
    ModelContextWindowExceededError,
    ModelHTTPError,
    UnexpectedModelBehavior,
)
from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RunUsage


class OutputMode(StrEnum):
    JSON_SCHEMA = "json_schema"
    JSON_OBJECT = "json_object"
    TOOL = "tool"
    PROMPTED = "prompted"


# What a server says when it refuses a request's form rather than failing at it: bad request, unprocessable,
# not implemented, and the 500 that llama-cpp-python answers a json_schema with.
_REFUSALS = frozenset({400, 415, 422, 500, 501})


class NoStructuredOutput(Exception):
    """The server accepts none of the modes: the caller goes on without the model's structured output."""


@dataclass(frozen=True)
class Structured:
    output: Any
    usage: RunUsage
    mode: OutputMode | None  # None: a model that is not asked (in-process, Ollama, a test model)


@dataclass
class _Server:
    """What one (server, model) accepts, as far as it is known."""

    mode: OutputMode | None = None
    ruled_out: dict[OutputMode, str] = field(default_factory=dict)  # mode -> why
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def accepts_none(self) -> bool:
        return len(self.ruled_out) == len(OutputMode)


_servers: dict[tuple[str, str], _Server] = {}
_servers_lock = threading.Lock()


def _server_of(model: Model) -> _Server | None:
    """The record of an OpenAI-compatible server and model; None for a model whose mode is known."""
    from pydantic_ai.models.ollama import OllamaModel
    from pydantic_ai.models.openai import OpenAIChatModel

    if not isinstance(model, OpenAIChatModel) or isinstance(model, OllamaModel):
        return None
    with _servers_lock:
        return _servers.setdefault((model.base_url, model.model_name), _Server())


def run_structured(agent: Agent[Any, Any], prompt: str, model: Model, timeout: float) -> Structured:
    """Run ``agent`` (whose ``output_type`` is a pydantic model) with the mode this server accepts, found on first
    use. Raises ``NoStructuredOutput`` when it accepts none, and whatever the run raises otherwise."""
    output_type = cast(type[BaseModel], agent.output_type)
    server = _server_of(model)
    if server is None:
        result = agent.run_sync(prompt, model=model, output_type=NativeOutput(output_type), timeout=timeout)
        return Structured(result.output, result.usage, None)
    with server.lock:  # one question finds out; the others wait for its answer
        if server.mode is None and not server.accepts_none:
            found = _find_out(agent, prompt, model, output_type, server, timeout)
            if found is not None:
                return found
    if server.mode is None:
        raise NoStructuredOutput(_none_accepted(model, server))
    return _run(agent, prompt, model, output_type, server.mode, timeout)


def _find_out(
    agent: Agent, prompt: str, model: Model, output_type: type[BaseModel], server: _Server, timeout: float
) -> Structured | None:
    """The first mode left that gives a valid output, remembered; None when each is ruled out."""
    _read_openapi(server, model, timeout)
    for mode in OutputMode:
        if mode in server.ruled_out:
            continue
        try:
            # One request per mode: the SDK's retries would repeat a refusal.
            found = _run(agent, prompt, model, output_type, mode, timeout, {"max_retries": 0})
        except Exception as exc:
            if not _refused(exc, mode):
                raise  # down, slow or failing every request: nothing learnt about the modes
            server.ruled_out[mode] = _why(exc)
            continue
        server.mode = mode
        return found
    return None


def _none_accepted(model: Model, server: _Server) -> str:
    tried = "; ".join(f"{mode.value}: {why}" for mode, why in server.ruled_out.items())
    return f"the model server accepts no structured output for {model.model_name} ({tried})"


def _run(
    agent: Agent,
    prompt: str,
    model: Model,
    output_type: type[BaseModel],
    mode: OutputMode,
    timeout: float,
    settings: dict[str, Any] | None = None,
) -> Structured:
    extra: dict[str, Any] = dict(settings or {})
    if mode is OutputMode.JSON_SCHEMA:
        spec: Any = NativeOutput(output_type)
    elif mode is OutputMode.TOOL:
        spec = ToolOutput(output_type)
    else:
        spec = PromptedOutput(output_type)
    if mode is OutputMode.JSON_OBJECT:
        # The schema rides with json_object, where llama-cpp-python's server turns it into a grammar. The model's
        # profile keeps PydanticAI from sending a bare json_object of its own in prompted mode (models/openai.py).
        extra["extra_body"] = {"response_format": {"type": "json_object", "schema": output_type.model_json_schema()}}
    result = agent.run_sync(
        prompt, model=model, output_type=spec, timeout=timeout, model_settings=cast(ModelSettings, extra) or None
    )
    return Structured(result.output, result.usage, mode)


def _refused(exc: Exception, mode: OutputMode) -> bool:
    """Whether a failure says the server does not take this mode (rather than that it is down or misconfigured).

    Prompted mode sends neither a response format nor tools: an HTTP error then is the server failing any request.
    """
    if isinstance(exc, UnexpectedModelBehavior):  # no valid output after the retries: not usable here
        return True
    if not isinstance(exc, ModelHTTPError) or mode is OutputMode.PROMPTED:
        return False
    if isinstance(exc, (ModelAuthenticationError, ModelContextWindowExceededError)):
        return False
    return exc.status_code in _REFUSALS


def _why(exc: Exception) -> str:
    if isinstance(exc, ModelHTTPError):
        return f"HTTP {exc.status_code}"
    return "no valid output"


def _base_url(model: Model) -> str:
    return str(getattr(model, "base_url", "")).rstrip("/")


# ---------------------------------------------------------------------------------------------
# The server's own word: its OpenAPI document


def _read_openapi(server: _Server, model: Model, timeout: float) -> None:
    """Rule out the modes that the server's published request schema leaves out. Says nothing when there is no
    such document, or it reads otherwise than expected."""
    found = _chat_request_schema(_base_url(model), min(timeout, 10.0))
    if found is None:
        return
    request, doc = found
    properties = request.get("properties", {})
    formats = _type_values(properties.get("response_format", {}), doc)
    if formats:
        for mode in (OutputMode.JSON_SCHEMA, OutputMode.JSON_OBJECT):
            if mode.value not in formats:
                server.ruled_out.setdefault(mode, f"not among its response_format types {sorted(formats)}")
    if properties and "tools" not in properties:
        server.ruled_out.setdefault(OutputMode.TOOL, "its chat request takes no tools")


def _chat_request_schema(base_url: str, timeout: float) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The chat completion request's schema in the server's OpenAPI document, and the document."""
    try:
        response = httpx.get(f"{base_url.removesuffix('/v1')}/openapi.json", timeout=timeout)
        doc = response.json() if response.status_code == 200 else None
        if not isinstance(doc, dict):
            return None
        path = next(p for p in doc.get("paths", {}) if p.rstrip("/").endswith("/chat/completions"))
        schema = _resolve(doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"], doc)
    except (httpx.HTTPError, ValueError, KeyError, TypeError, StopIteration):
        return None
    return (schema, doc) if isinstance(schema, dict) else None


def _resolve(node: Any, doc: dict[str, Any]) -> Any:
    """A ``$ref`` to ``#/components/...`` followed (one level)."""
    if isinstance(node, dict) and isinstance(ref := node.get("$ref"), str) and ref.startswith("#/"):
        target: Any = doc
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        return target
    return node


def _type_values(node: Any, doc: dict[str, Any], depth: int = 0) -> set[str]:
    """The values a ``type`` property may take in a schema, through references and unions."""
    node = _resolve(node, doc)
    if not isinstance(node, dict) or depth > 6:
        return set()
    found: set[str] = set()
    for key in ("anyOf", "oneOf", "allOf"):
        for option in node.get(key, []):
            found |= _type_values(option, doc, depth + 1)
    kind = _resolve(node.get("properties", {}).get("type", {}), doc)
    if isinstance(kind, dict):
        found |= {v for v in kind.get("enum", []) if isinstance(v, str)}
        if isinstance(kind.get("const"), str):
            found.add(kind["const"])
    return found
