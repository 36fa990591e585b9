"""CRAG's retrieval evaluator: how well does each text answer the question, in [-1, 1]?

Two implementations behind one interface:

- ``SimilarityEvaluator``: embedding similarity plus IDF-weighted coverage of the question's words,
  calibrated to [-1, 1]. Deterministic, cheap, offline; also scores refinement strips and the
  sentences of evidence answers.
- ``LLMEvaluator``: the chat model grades all texts in ONE schema-constrained request. Its output
  is validated and clamped; a request that fails twice (or times out) falls back to the similarity
  scores, and the trace says so. A misbehaving grader never crashes a chat.

Both grade the passages alone. The near-miss verdict that may cap their grades (a specific term of the question that
no passage mentions) is the question's analysis, ``crag.analysis``; the pipeline applies it.
"""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic_ai import Agent
from pydantic_ai.models import Model
from pydantic_ai.usage import RunUsage

from crag import prompts
from crag.analysis import coverage, word_weights
from crag.models import Embedder, NoStructuredOutput, run_structured
from crag.terms import TermStats
from crag.text import cjk_share
from crag.tuning import TUNING
from crag.types import Method

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Grade:
    score: float  # in [-1, 1]
    method: Method
    detail: str = ""  # see ScoredChunk.detail: the LLM's structured output mode, or why it fell back

    @property
    def trusted(self) -> bool:
        return self.method.trusted


@dataclass(frozen=True)
class Grading:
    """Grades in the order of the texts, and a web query when the grader wrote one on the way."""

    grades: list[Grade]
    web_query: str = ""


class Evaluator(ABC):
    name: str

    @abstractmethod
    def grade(self, question: str, texts: Sequence[str], usage: RunUsage | None = None) -> Grading:
        """One grade per text, in order."""


StatsSource = Callable[[], "TermStats | None"]


# ---------------------------------------------------------------------------------------------
# Similarity

# The raw similarity (dense cosine and weighted coverage) is calibrated to [-1, 1] with a logistic curve
# (TUNING.grading: its midpoint maps to 0, its slope sets how fast grades saturate).
_GRADING = TUNING.grading


def calibrate(raw: float) -> float:
    return round(2.0 / (1.0 + math.exp(-_GRADING.slope * (raw - _GRADING.midpoint))) - 1.0, 4)


class SimilarityEvaluator(Evaluator):
    name = "similarity"

    def __init__(self, embedder: Embedder, stats: StatsSource | None = None) -> None:
        self.embedder = embedder
        self.stats = stats or (lambda: None)

    def raw(self, question: str, texts: Sequence[str], vector: Sequence[float] | None = None) -> list[float]:
        """Cosine and coverage mixed, before calibration. ``vector`` is the question's, when already embedded."""
        if not texts:
            return []
        vectors = self.embedder.embed(list(texts) if vector is not None else [question, *texts])
        q, rows = (vector, vectors) if vector is not None else (vectors[0], vectors[1:])
        stats = self.stats()
        weights = word_weights(question, stats)
        # An English-only embedder says nothing about Chinese text: lean on word coverage instead.
        dense = _GRADING.dense_weight * (1.0 if self.embedder.multilingual else 1.0 - cjk_share(question))
        return [
            dense * sum(a * b for a, b in zip(q, v, strict=True)) + (1.0 - dense) * coverage(weights, text)
            for text, v in zip(texts, rows, strict=True)
        ]

    def grade(self, question: str, texts: Sequence[str], usage: RunUsage | None = None) -> Grading:
        return Grading([Grade(calibrate(r), Method.SIMILARITY) for r in self.raw(question, texts)])

    def off_topic(self, question: str, headings: Sequence[str]) -> list[float]:
        """How far each heading is from saying that the text under it is about the question's words, in [0, 1]: one
        less the weighted share of the words it holds, for the part of the question the embedder cannot read (all of a
        Chinese question's with an English-only embedder, so only for an index built with MiniLM; none with a
        multilingual one); 0 for no heading."""
        blind = 0.0 if self.embedder.multilingual else cjk_share(question)
        if not blind:
            return [0.0] * len(headings)
        weights = word_weights(question, self.stats())
        # No heading says nothing either way.
        return [blind * (1.0 - coverage(weights, heading)) if heading.strip() else 0.0 for heading in headings]


# ---------------------------------------------------------------------------------------------
# LLM


def grades_schema(k: int) -> type[BaseModel]:
    """One required number per passage, by name: the grammar then guarantees exactly k scores.

    No bounds on the numbers: llama.cpp's grammar cannot enforce them, so values are clamped after.
    The web query rides along, so the action never needs a separate rewrite call.
    """
    fields: dict = {f"passage_{i}": (float, ...) for i in range(1, k + 1)}
    fields["web_query"] = (str, Field("", max_length=80))
    return create_model("Grades", __config__=ConfigDict(extra="ignore"), **fields)


_graders: dict[int, Agent[Any, Any]] = {}


def grader_agent(k: int) -> Agent[Any, Any]:
    """The grading agent for k passages, built once per k; the model is given per run."""
    if k not in _graders:
        _graders[k] = Agent(output_type=grades_schema(k), instructions=prompts.GRADER, retries=1)
    return _graders[k]


class LLMEvaluator(Evaluator):
    name = "llm"

    def __init__(self, model: Model, fallback: SimilarityEvaluator, timeout: float = 60.0) -> None:
        self.model = model
        self.fallback = fallback
        self.timeout = timeout

    def grade(self, question: str, texts: Sequence[str], usage: RunUsage | None = None) -> Grading:
        """One request for all the texts, in the structured output mode the model server accepts; the grades'
        method names that mode when it was found out for this server ("llm (json_object)")."""
        if not texts:
            return Grading([])
        usage = usage if usage is not None else RunUsage()
        prompt = prompts.grader_prompt(question, texts)
        try:
            result = run_structured(grader_agent(len(texts)), prompt, self.model, self.timeout)
        except NoStructuredOutput as exc:  # found out once: later questions fall back without a request
            return self._fallback(question, texts, str(exc))
        except TimeoutError:
            return self._fallback(question, texts, f"grader timed out after {self.timeout:g} s")
        except Exception as exc:  # noqa: BLE001 - junk twice, a server error: similarity takes over
            log.warning("the LLM grader failed: %r", exc)
            return self._fallback(question, texts, f"grader failed: {type(exc).__name__}")
        usage.incr(result.usage)
        values = [getattr(result.output, f"passage_{i}") for i in range(1, len(texts) + 1)]
        backup: list[Grade] | None = None
        grades = []
        for i, value in enumerate(values):
            if isinstance(value, float) and math.isfinite(value):
                grades.append(Grade(max(-1.0, min(1.0, value)), Method.LLM, result.mode or ""))
            else:
                log.warning("the LLM grader gave no number for passage %d: similarity grades it", i + 1)
                backup = backup or self.fallback.grade(question, texts).grades
                grades.append(Grade(backup[i].score, Method.FALLBACK, "grader gave no number"))
        return Grading(grades, result.output.web_query.strip())

    def _fallback(self, question: str, texts: Sequence[str], why: str) -> Grading:
        log.warning("the LLM grader fell back to similarity: %s", why)
        grades = self.fallback.grade(question, texts).grades
        return Grading([Grade(g.score, Method.FALLBACK, why) for g in grades])
