"""Failures the pipeline survives become notes on the answer, and the server's log keeps their cause."""

from __future__ import annotations

import logging

import pytest
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.models.function import FunctionModel

from crag.evaluator import LLMEvaluator, SimilarityEvaluator
from crag.types import Method
from tests import fakes

QUESTION = "How many cores does the widget need?"
CHUNK = fakes.chunk("The widget needs two processor cores and eight hundred megabytes of memory.")


def unauthorized(*_: object) -> None:
    raise ModelHTTPError(401, "qwen3:8b", body={"error": "invalid api key"})


async def unauthorized_stream(*_: object):
    raise ModelHTTPError(401, "qwen3:8b", body={"error": "invalid api key"})
    yield ""  # an async generator, as a streamed answer is


def test_a_grader_that_fails_is_logged_with_its_cause(caplog: pytest.LogCaptureFixture) -> None:
    grader = LLMEvaluator(FunctionModel(unauthorized), SimilarityEvaluator(fakes.HashEmbedder()), timeout=5)
    with caplog.at_level(logging.WARNING, logger="crag"):
        grading = grader.grade(QUESTION, [CHUNK.text])
    assert grading.grades[0].method is Method.FALLBACK
    logged = [r for r in caplog.records if r.name == "crag.evaluator"]
    assert logged and "401" in logged[0].getMessage(), [r.getMessage() for r in caplog.records]


def test_a_model_that_fails_while_writing_is_logged_with_its_cause(settings, caplog: pytest.LogCaptureFixture) -> None:
    pipeline = fakes.pipeline(settings, [CHUNK], [0.9])
    pipeline.model = FunctionModel(unauthorized, stream_function=unauthorized_stream)
    with caplog.at_level(logging.WARNING, logger="crag"):
        answer = pipeline.ask(QUESTION)
    assert answer.error, "the user is told the answer failed"
    logged = [r.getMessage() for r in caplog.records if r.name == "crag.pipeline"]
    assert any("401" in m for m in logged), logged
