"""Ratings through the HTTP API: ``POST /feedback`` rates an answer of ``POST /ask`` by its ``answer_id``, rates it
again, or takes its rating back (``"rating": null``). ``Chats`` is the conversation store the routes share: where /ask
keeps its answers (``CRAG_API_STORE_ANSWERS``) and where the thresholds fitted to a scope are read."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any, Literal

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from crag.api.http import INVALID, ApiError
from crag.api.schemas import ErrorOut
from crag.calibration import fitted_overrides
from crag.config import Settings
from crag.conversations import Conversations, HistoryUnavailable, NotRatable, chats_file
from crag.feedback import NOTE_CHARS, Label, Rating, Wrong, generation_of
from crag.followups import History
from crag.types import Answer

log = logging.getLogger("crag.api")
ANSWER_ID_CHARS = 64


class Chats:
    """The conversation store beside the index, opened on first use and shared by the routes."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._store: Conversations | None = None
        self._lock = threading.Lock()

    def store(self) -> Conversations:
        """Raises ``ApiError`` 503, saying what to do, when the store cannot be used now."""
        with self._lock:
            if self._store is None:
                try:
                    self._store = Conversations(chats_file(self.settings))
                except HistoryUnavailable as exc:
                    raise ApiError(503, str(exc), code="history_unavailable") from None
            return self._store

    def thresholds(self, scope: Sequence[str]) -> dict[str, Any]:
        """The thresholds that answer ``scope``, as ``Pipeline.stream`` keywords (``fitted_overrides``)."""
        try:
            store = self.store()
        except ApiError as exc:
            log.warning("the thresholds fitted to %s could not be read: %s", list(scope), exc)
            return {}
        return fitted_overrides(store, self.settings, scope)

    def record(self, question: str, history: History, answer: Answer) -> str | None:
        """Keep an answer of /ask to be rated; its id, or None when answers are not kept (the setting, or an answer
        that stopped early). A store that cannot be written leaves the answer unkept, and the log says why."""
        if not self.settings.api_store_answers or not answer.complete:
            return None
        try:
            return self.store().record(question, history, answer, generation_of(self.settings))
        except (ApiError, HistoryUnavailable) as exc:
            log.warning("the answer could not be kept for rating: %s", exc)
            return None


class FeedbackRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"answer_id": "3f2b9c0e8a4d4e1f9b7a6c5d4e3f2a1b", "rating": "up"},
                {"answer_id": "3f2b9c0e8a4d4e1f9b7a6c5d4e3f2a1b", "rating": None},
                {
                    "answer_id": "3f2b9c0e8a4d4e1f9b7a6c5d4e3f2a1b",
                    "rating": "down",
                    "wrong": ["badge", "sources"],
                    "note": "The answer is on page 12, not page 3.",
                },
            ]
        },
    )

    answer_id: str = Field(
        min_length=1, max_length=ANSWER_ID_CHARS, description="The `answer_id` POST /ask returned with the answer."
    )
    rating: Literal["up", "down"] | None = Field(
        description="up: the answer held; down: it did not; null: take the rating back."
    )
    wrong: list[Literal["badge", "answer", "sources", "missing"]] = Field(
        default_factory=list,
        max_length=4,
        description="With `down`: what was wrong. badge: the verdict (Correct, Ambiguous, Incorrect); answer: what it "
        "says; sources: the passages it cites; missing: a passage that answers was not among them. Ignored with `up`.",
    )
    note: str = Field("", max_length=NOTE_CHARS, description="What the user said, if anything.")


class RatingOut(BaseModel):
    answer_id: str
    rating: Literal["up", "down"]
    wrong: list[str]
    note: str
    question: str = Field(description="The question the answer was rated for.")
    scope: list[str] = Field(description="Where it was asked; empty for every document.")
    action: Literal["correct", "ambiguous", "incorrect"] | None
    verdict_right: bool | None = Field(
        description="Whether the rating says the action was the right verdict (docs/evaluation.md); null for an "
        "answer without an action."
    )


class RemovedOut(BaseModel):
    answer_id: str
    rating: None = None
    removed: bool = Field(description="Whether the answer had a rating.")


def rating_json(label: Label) -> dict[str, Any]:
    action = label.answered.action
    return RatingOut(
        answer_id=label.answer_id,
        rating=label.rating.value,
        wrong=[w.value for w in label.wrong],
        note=label.note,
        question=label.answered.question,
        scope=list(label.answered.scope),
        action=action.value if action else None,
        verdict_right=label.right(action) if action else None,
    ).model_dump()


NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut, "description": "No kept answer has this id."},
    503: {"model": ErrorOut, "description": "The store of chats and ratings cannot be used now."},
}


def feedback_router(chats: Chats) -> APIRouter:
    router = APIRouter()

    @router.post(
        "/feedback",
        summary="Rate an answer",
        response_model=RatingOut | RemovedOut,
        responses={**NOT_FOUND, **INVALID},
        description="Rate an answer of POST /ask, rate it again (what is sent now replaces what was), or take its "
        "rating back (`rating: null`). The ratings of a knowledge base are its test set: `python -m crag evaluate` "
        "and the page's Evaluate page judge its verdicts by them, and fit its thresholds to them.",
    )
    async def rate(req: FeedbackRequest) -> Any:
        store = chats.store
        wrong = [Wrong(w) for w in req.wrong]

        def rated() -> dict[str, Any]:
            if req.rating is None:
                return {"answer_id": req.answer_id, "rating": None, "removed": store().unrate_answer(req.answer_id)}
            return rating_json(store().rate_answer(req.answer_id, Rating(req.rating), wrong, req.note))

        try:
            return await run_in_threadpool(rated)
        except NotRatable as exc:
            raise ApiError(404, str(exc), code="unknown_answer") from None
        except HistoryUnavailable as exc:
            raise ApiError(503, str(exc), code="history_unavailable") from None

    return router
