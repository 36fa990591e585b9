"""``POST /ask``: an answer as ``python -m crag ask --json`` prints it, whole or as Server-Sent Events."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from sse_starlette import ServerSentEvent

from crag.api.http import INVALID, REMEDIES, TOO_MANY, event_stream, gone, sse
from crag.api.schemas import AskRequest, ErrorOut
from crag.api.service import Answering, Service
from crag.contract import AnswerOut
from crag.models import BackendInfo
from crag.types import Answer


def answer_json(answer: Answer, backend: BackendInfo, answer_id: str | None = None) -> dict[str, Any]:
    """The answer contract; an incomplete answer (the model failed midway) says why. ``answer_id``: the id it was
    kept under, to rate it."""
    return AnswerOut.of(answer, backend, REMEDIES, answer_id, markdown=True).model_dump()


Keep = Callable[[Answer], Awaitable[str | None]]  # keeps an answer to be rated; its id


def ask_router(service: Service) -> APIRouter:
    router = APIRouter()

    @router.post(
        "/ask",
        summary="Answer a question",
        response_model=None,
        responses={
            200: {
                "model": AnswerOut,
                "description": "The answer as `python -m crag ask --json` prints it, with the `answer_id` to rate "
                "it by (POST /feedback). With `stream: true`, Server-Sent Events: `stage` ({stage}), `token` "
                "({text}), then `done` (this object) or `error` (this object with `complete: false` and `error`).",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            },
            400: {"model": ErrorOut, "description": "The scope names no folder or file of the index (all listed)."},
            409: {"model": ErrorOut, "description": "The index must be rebuilt first."},
            **INVALID,
            **TOO_MANY,
            503: {"model": ErrorOut, "description": "The chat backend is down or misconfigured."},
        },
    )
    async def ask(req: AskRequest, request: Request) -> Any:
        history = [(turn.role, turn.content) for turn in req.history]
        # In a worker thread: the first question loads the models.
        answering = await run_in_threadpool(service.answering, req.question, history, req.web, req.scope or ())

        async def keep(answer: Answer) -> str | None:  # kept to be rated: its id
            return await run_in_threadpool(service.chats.record, req.question, history, answer)

        if req.stream:
            return event_stream(_events(answering, keep))
        answer = await answering.whole(request.is_disconnected)
        return gone() if answer is None else answer_json(answer, answering.backend, await keep(answer))

    return router


async def _events(answering: Answering, keep: Keep) -> AsyncIterator[ServerSentEvent]:
    """``stage``, ``token``, then ``done`` or ``error`` with the answer's JSON."""
    async for kind, value in answering.events():
        if kind == "stage":
            yield sse({"stage": value}, "stage")
        elif kind == "token":
            yield sse({"text": value}, "token")
        else:
            done = "done" if value.complete else "error"
            yield sse(answer_json(value, answering.backend, await keep(value)), done)
