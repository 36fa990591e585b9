"""The OpenAI-compatible routes: ``GET /v1/models`` and ``POST /v1/chat/completions``, over the same pipeline.

Any chat client that speaks OpenAI's API (Open WebUI, LibreChat, the ``openai`` SDK) can ask the knowledge base.
The models are ``crag-kb`` (every document) and ``crag-kb-noweb`` (never the web), and each of them with
``/<folder>`` for one knowledge base: a client picks a knowledge base by picking a model. The CRAG method is
unchanged; only the envelope differs from ``POST /ask``:

- the last user message is the question, earlier user and assistant messages the history; system messages
  are not used (every client sends one, so they are noted in the trace rather than refused);
- the reply's text is the answer with its ``[n]`` citations, then the sources as a Markdown list, so a
  client that knows nothing of CRAG still shows them; the cited sources, with what the answer took from each,
  ride in an extra field of the message, ``citations`` (of the last chunk's delta when streamed), and the trace in
  another, ``crag``;
- what would change the reply's meaning (tools, n > 1, JSON output, images in the question) is refused
  with a 400 that says why; sampling knobs are accepted and noted as ignored;
- a model that fails mid-answer ends the stream with an OpenAI error chunk (the SDK raises ``APIError``)
  carrying the partial answer in ``crag``; without streaming it is a 502 with the same error.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from sse_starlette import ServerSentEvent

from crag.api.http import REMEDIES, ApiError, Json, error_response, event_stream, gone, sse
from crag.api.openai_schemas import (
    MODEL_DESCRIPTIONS,
    MODELS,
    ChatCompletion,
    ChatMessage,
    ChatRequest,
    ModelCard,
    ModelList,
    OpenAIError,
)
from crag.api.service import Answering, Service
from crag.contract import MAX_TURN, MAX_TURNS, AnswerOut, citations
from crag.errors import CragError
from crag.markdown import api_markdown
from crag.models import BackendInfo
from crag.scope import TOP_LEVEL, KnowledgeBase, unknown_scope
from crag.text import clean_question, pages_label, strip_invisible
from crag.types import Answer, Source

ROUTE = "/v1/chat/completions"
SOURCES_HEADING = "**Sources**"
# Our own sources list at the end of an earlier answer: the client sends it back as history, where it is noise.
_SOURCES_BLOCK = re.compile(r"\n+\*\*Sources\*\*\n+(?:- \[\d+\] [^\n]*(?:\n|$))+\s*$")
_MARKDOWN = re.compile(r"([\\`*_\[\]<>])")
# Fields that say who asks or where to log, not what to answer: not worth a note.
_BOOKKEEPING = frozenset({"user", "metadata", "store", "service_tier", "parallel_tool_calls"})


@dataclass(frozen=True, kw_only=True)
class ChatQuestion:
    """A chat request read as a question for the pipeline."""

    model: str
    question: str
    history: tuple[tuple[str, str], ...]
    web: bool | None
    include_usage: bool
    notes: tuple[str, ...]  # what of the request was not used, for the trace
    scope: tuple[str, ...] = ()  # the knowledge base a `crag-kb/<folder>` model asks


Known = Callable[[], Sequence[KnowledgeBase]]  # the knowledge bases of the index that answers


def openai_router(service: Service) -> APIRouter:
    """The /v1 routes. Their errors take OpenAI's shape in the app's handlers, which look at the path."""
    router = APIRouter(prefix="/v1", tags=["OpenAI-compatible"])
    created = int(time.time())

    @router.get(
        "/models", summary="The knowledge base and each folder of it, as OpenAI models", response_model=ModelList
    )
    def models() -> dict[str, Any]:
        return {"object": "list", "data": model_cards(service, created)}

    # "4XX" rather than 404 alone, or FastAPI would document a 422 that a string path parameter never gets.
    @router.get(
        "/models/{model:path}",
        summary="One model",
        response_model=ModelCard,
        responses={"4XX": {"model": OpenAIError, "description": "No such model (code model_not_found)."}},
    )
    def model(model: str) -> dict[str, Any]:
        _, scope = model_scope(model, service.knowledge_bases)
        kb = next((kb for kb in service.knowledge_bases() if (kb.name,) == scope), None) if scope else None
        return _card(model, created, kb)

    @router.post(
        "/chat/completions",
        summary="Ask the knowledge base in OpenAI's chat-completions format",
        response_model=None,
        responses={
            200: {
                "model": ChatCompletion,
                "description": "The completion. With `stream: true`, Server-Sent Events: `data: {chunk}` where "
                "`choices[0].delta.content` carries the text, then the sources, then a chunk with "
                '`finish_reason: "stop"`, the cited sources in `choices[0].delta.citations` and the trace in '
                "`crag`; then `data: [DONE]`. While the answer is prepared, chunks with an empty delta carry "
                "`crag: {stage}`. A failure mid-answer is a chunk "
                '`{"error": {...}}` before `[DONE]`.',
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            },
            "4XX": {"model": OpenAIError, "description": "A request this server cannot answer; the message says why."},
            409: {"model": OpenAIError, "description": "The index must be rebuilt first."},
            502: {"model": OpenAIError, "description": "The chat model failed midway; `crag` has the partial answer."},
            503: {"model": OpenAIError, "description": "The chat backend is down or misconfigured."},
        },
    )
    async def chat_completions(req: ChatRequest, request: Request) -> Any:
        # In a worker thread: reading the knowledge bases reads the index; the first question loads the models.
        chat = await run_in_threadpool(read_request, req, service.knowledge_bases)
        answering = await run_in_threadpool(service.answering, chat.question, chat.history, chat.web, chat.scope)
        if req.stream:
            return event_stream(_chunks(answering, chat))
        answer = await answering.whole(request.is_disconnected)
        return gone() if answer is None else completion(answer, answering.backend, chat)

    return router


def model_cards(service: Service, created: int) -> list[dict[str, Any]]:
    """`crag-kb` and `crag-kb-noweb`, then each of them per knowledge base, once the files folder has folders."""
    try:
        kbs = service.knowledge_bases()
    except (ApiError, CragError):  # an index that cannot be read: its folders are not models until rebuilt
        kbs = []
    if [kb.name for kb in kbs] == [TOP_LEVEL]:  # no folders: the top level is every document, as `crag-kb`
        kbs = []
    cards = [_card(name, created) for name in MODELS]
    return cards + [_card(f"{name}/{kb.name}", created, kb) for name in MODELS for kb in kbs]


def _card(name: str, created: int, kb: KnowledgeBase | None = None) -> dict[str, Any]:
    description = MODEL_DESCRIPTIONS[name.partition("/")[0]]
    if kb is not None:
        description = f"Only the {kb.files} document{'' if kb.files == 1 else 's'} in `{kb.name}`. " + description
    return {"id": name, "object": "model", "created": created, "owned_by": "crag", "description": description}


def model_scope(name: str, known: Known) -> tuple[bool | None, tuple[str, ...]]:
    """The web-search override and the scope a model asks: `crag-kb` every document, `crag-kb/<folder>` one
    knowledge base. Any other name is a 404 that lists what exists."""
    if name in MODELS:
        return MODELS[name], ()
    base, _, folder = name.partition("/")
    if base in MODELS and folder:
        kbs = known()
        if folder in {kb.name for kb in kbs}:
            return MODELS[base], (folder,)
        why = unknown_scope([folder], kbs)
        raise ApiError(
            404, f"The model `{name[:200]}` does not exist here. {why}", code="model_not_found", param="model"
        )
    models = " or ".join(f"`{m}`" for m in MODELS)
    raise ApiError(
        404,
        f"The model `{name[:80]}` does not exist here: use {models}, or one of them with `/<folder>` for one "
        "knowledge base (GET /v1/models lists them).",
        code="model_not_found",
        param="model",
    )


# ---------------------------------------------------------------------------------------------
# The request


def _unsupported(message: str, param: str) -> ApiError:
    return ApiError(400, message, code="unsupported_parameter", param=param)


def _refuse_unsupported(req: ChatRequest) -> None:
    """Refuse what would change what the reply is; a client that asked for it must not get something else."""
    if req.n is not None and req.n != 1:
        raise _unsupported(f"n={req.n} asks for several answers; the knowledge base gives one: set n to 1.", "n")
    for field in ("tools", "functions"):
        if getattr(req, field):
            raise _unsupported(
                f"`{field}` is not supported: the knowledge base answers from your documents and calls no tools. "
                f"Leave `{field}` out.",
                field,
            )
    for field in ("tool_choice", "function_call"):
        if getattr(req, field) not in (None, "none", "auto"):
            raise _unsupported(f"`{field}` can only be `none` or `auto`: this server calls no tools.", field)
    kind = (req.response_format or {}).get("type", "text")
    if kind != "text":
        raise _unsupported(
            f"response_format `{str(kind)[:40]}` is not supported: the answer is text with [n] citations, and "
            "the trace comes as JSON in the `crag` field. Leave response_format out.",
            "response_format",
        )
    if req.logprobs or req.top_logprobs:
        raise _unsupported("logprobs are not supported: leave `logprobs` and `top_logprobs` out.", "logprobs")
    if req.audio is not None or any(m != "text" for m in req.modalities or ()):
        raise _unsupported(
            'Only text replies are supported: leave `audio` out and `modalities` at ["text"].', "modalities"
        )


def _text(message: ChatMessage, param: str, strict: bool, notes: list[str]) -> str:
    """The text of a message. Parts that are not text are refused in the question (``strict``), where
    answering without them would answer another question, and dropped with a note from history."""
    if message.content is None or isinstance(message.content, str):
        return message.content or ""
    texts = []
    for i, part in enumerate(message.content):
        if part.type == "text":
            texts.append(part.text or "")
        elif strict:
            raise ApiError(
                400,
                f"The question has a part of type `{part.type[:40]}`; the knowledge base reads text only. Ask in words "
                "(to ask about a picture's text, put it in a PDF in Files/ and rebuild).",
                code="unsupported_content",
                param=f"{param}.content.{i}",
            )
        else:
            notes.append(
                f"a part of type `{part.type[:40]}` in an earlier message was left out: the knowledge base reads text"
            )
    return "\n".join(texts)


def read_request(req: ChatRequest, known: Known = list) -> ChatQuestion:
    """The question, the history and the options of a chat request; a 4xx with the reason for what cannot be
    answered. Runs before any stream starts, so a bad request is an error status, not a broken stream. ``known``:
    the knowledge bases, asked only for a `crag-kb/<folder>` model."""
    web, scope = model_scope(req.model, known)
    _refuse_unsupported(req)
    notes: list[str] = []
    last = len(req.messages) - 1
    for i, message in enumerate(req.messages):
        if message.role in ("tool", "function") or message.tool_calls or message.function_call:
            raise _unsupported(
                f"messages[{i}] is a tool call or its result; this server calls no tools. Send the conversation "
                "as user and assistant messages.",
                f"messages.{i}",
            )
    if req.messages[last].role != "user":
        raise ApiError(
            400,
            f"The last message must be the question, with role `user`; it has role `{req.messages[last].role}`.",
            code="invalid_question",
            param=f"messages.{last}",
        )
    try:
        # The one question check that the UI, the CLI and /ask use.
        question = clean_question(_text(req.messages[last], f"messages.{last}", True, notes))
    except CragError as exc:
        raise ApiError(400, str(exc), code="invalid_question", param=f"messages.{last}.content") from None

    history: list[tuple[str, str]] = []
    system = False
    for i, message in enumerate(req.messages[:last]):
        if message.role in ("system", "developer"):
            system = True
            continue
        text = strip_invisible(_text(message, f"messages.{i}", False, notes))
        if message.role == "assistant":
            text = _SOURCES_BLOCK.sub("", text)
        if text := text.strip()[:MAX_TURN]:
            history.append((message.role, text))
    if system:
        notes.append(
            "the system message was not used: the knowledge base answers with its own instructions, from your documents"
        )
    if len(history) > MAX_TURNS:
        notes.append(f"only the last {MAX_TURNS} of {len(history)} earlier messages were used")
        history = history[-MAX_TURNS:]
    ignored = sorted(k[:40] for k, v in (req.model_extra or {}).items() if k not in _BOOKKEEPING and v is not None)
    if ignored:
        shown = ", ".join(ignored[:10]) + (", ..." if len(ignored) > 10 else "")
        notes.append(f"ignored (the knowledge base answers with its own settings): {shown}")
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    return ChatQuestion(
        model=req.model,
        question=question,
        history=tuple(history),
        web=web,
        include_usage=include_usage,
        notes=tuple(dict.fromkeys(notes)),
        scope=scope,
    )


# ---------------------------------------------------------------------------------------------
# The reply


def _markdown(text: str) -> str:
    return _MARKDOWN.sub(r"\\\1", " ".join(text.split()))


def _label(source: Source) -> str:
    if source.kind == "local":
        pages = pages_label(source.pages)
        return f"{_markdown(source.file)}, {pages}" if pages else _markdown(source.file)
    url = source.url.replace(" ", "%20").replace("(", "%28").replace(")", "%29")
    return f"[{_markdown(source.title or source.url)}]({url})"


def sources_markdown(answer: Answer) -> str:
    """What follows the answer: what the user must do for any answer (build the knowledge base), in the API's words,
    and the sources the text cites (all of them when it cites none), as a Markdown list."""
    remedy = f"\n\n{REMEDIES[answer.trace.remedy]}" if answer.trace and answer.trace.remedy else ""
    shown = answer.cited_sources or answer.sources
    if not shown:
        return remedy
    return remedy + f"\n\n{SOURCES_HEADING}\n\n" + "\n".join(f"- [{s.n}] {_label(s)}" for s in shown)


def trace(answer: Answer, backend: BackendInfo, notes: tuple[str, ...]) -> dict[str, Any]:
    """The ``crag`` field: /ask's JSON, each source with its boxes, and what of the request was not used."""
    out = AnswerOut.of(answer, backend, REMEDIES, markdown=True).model_dump()
    out["notes"] = [*notes, *out["notes"]]
    boxes = {s.n: s.bboxes for s in answer.sources}
    for source in out["sources"]:
        source["boxes"] = [{"page": b[0], "bbox": list(b[1:])} for b in boxes.get(source["n"], ())]
    return out


def usage(answer: Answer) -> dict[str, int]:
    """Tokens of every model call the answer took, from the trace; 0 when no model was called."""
    prompt = answer.trace.input_tokens if answer.trace else 0
    written = answer.trace.output_tokens if answer.trace else 0
    return {"prompt_tokens": prompt, "completion_tokens": written, "total_tokens": prompt + written}


def citation_dicts(answer: Answer) -> list[dict[str, Any]]:
    """The ``citations`` field: the sources the text cites, each with what the answer took from it."""
    return [c.model_dump() for c in citations(answer)]


def _why(answer: Answer) -> str:
    return answer.error or "The answer stopped early: ask again."


def completion(answer: Answer, backend: BackendInfo, chat: ChatQuestion) -> Json:
    crag = trace(answer, backend, chat.notes)
    if not answer.complete:
        return error_response(ROUTE, 502, _why(answer), code="answer_incomplete", crag=crag)
    return Json(
        {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": chat.model,
            "system_fingerprint": None,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": api_markdown(answer.parts) + sources_markdown(answer),
                        "refusal": None,
                        "citations": citation_dicts(answer),
                    },
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": usage(answer),
            "crag": crag,
        }
    )


async def _chunks(answering: Answering, chat: ChatQuestion) -> AsyncIterator[ServerSentEvent]:
    """The answer as chat.completion.chunk events, from the answer's worker thread."""
    head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk", "created": int(time.time())}
    head |= {"model": chat.model, "system_fingerprint": None}
    if chat.include_usage:
        head["usage"] = None  # as OpenAI does: null on every chunk, the numbers on the last

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> ServerSentEvent:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return sse({**head, "choices": [choice], **extra})

    yield chunk({"role": "assistant", "content": ""})
    async for kind, value in answering.events():
        if kind == "stage":
            yield chunk({}, crag={"stage": value})
        elif kind == "token":
            yield chunk({"content": value})
        elif value.complete:
            if sources := sources_markdown(value):
                yield chunk({"content": sources})
            yield chunk({"citations": citation_dicts(value)}, "stop", crag=trace(value, answering.backend, chat.notes))
            if chat.include_usage:
                yield sse({**head, "choices": [], "usage": usage(value)})
        else:
            # OpenAI's own shape for a failure mid-stream: the SDK raises APIError with this message.
            error = {"message": _why(value), "type": "server_error", "param": None, "code": "answer_incomplete"}
            yield sse({"error": {**error, "crag": trace(value, answering.backend, chat.notes)}})
    yield sse("[DONE]")
