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
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic_ai import Agent
from pydantic_ai.models import Model
from pydantic_ai.usage import RunUsage

from crag import prompts
from crag.analysis import coverage, word_weights
from crag.blocks import is_code
from crag.models import Embedder, NoStructuredOutput, run_structured
from crag.terms import TermStats
from crag.text import cjk_share, content_words, join_sentences, split_sentences, width
from crag.tuning import TUNING
from crag.types import Method, Verdict, trusted_grade

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Grade:
    score: float  # in [-1, 1]
    method: Method
    detail: str = ""  # see ScoredChunk.detail: the LLM's structured output mode, or why it fell back
    verdict: Verdict | None = None  # the LLM grader's
    answering: str = ""  # the sentence the LLM grader copied as the one that answers
    similarity: float | None = None  # beside the LLM grader's verdict: the similarity grade it rests a partial one on

    @property
    def trusted(self) -> bool:
        return trusted_grade(self.method, self.verdict, self.answering)


@dataclass(frozen=True)
class Grading:
    """Grades in the order of the texts, and a web query when the grader wrote one on the way."""

    grades: list[Grade]
    web_query: str = ""


def _pieces(text: str) -> list[str]:
    """A passage's heading line, then its sentences, a code paragraph as one piece (marked by a leading blank)."""
    heading, _, body = text.partition("\n") if "\n" in text else ("", "", text)
    pieces = [heading]
    for paragraph in body.split("\n\n"):
        if is_code(paragraph):
            pieces.append("\n" + paragraph.strip("\n"))
        else:
            pieces += split_sentences(paragraph.replace("\n", " "))
    return pieces


def _joined(pieces: Sequence[str]) -> list[str]:
    """Sentences of a passage's excerpt joined as prose, a code piece on lines of its own."""
    lines: list[str] = []
    prose = ""
    for piece in pieces:
        if piece.startswith("\n"):
            lines += [prose] if prose else []
            lines.append(piece.strip("\n"))
            prose = ""
        else:
            prose = join_sentences(prose, piece)
    return lines + ([prose] if prose else [])


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

    def excerpts(self, question: str, texts: Sequence[str], chars: int) -> list[str]:
        """Each text as its heading line and the sentences (or code) closest to the question, in their order, up to
        about ``chars``: what a model reads fast. A text that short already is whole."""
        pieces = [_pieces(text) if width(text) > chars else [] for text in texts]
        scores = iter(self.raw(question, [p for ps in pieces for p in ps[1:]]))
        out = []
        for text, ps in zip(texts, pieces, strict=True):
            if not ps:
                out.append(text)
                continue
            ranked = sorted(((next(scores), i) for i in range(1, len(ps))), reverse=True)
            kept: list[int] = []
            used = width(ps[0])
            for _, i in ranked:
                if kept and used + width(ps[i]) > chars:
                    continue
                kept.append(i)
                used += width(ps[i])
            out.append("\n".join([ps[0], *_joined([ps[i] for i in sorted(kept)])]))
        return out

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

_VERDICTS = TUNING.verdicts
VERDICT_WORDS = tuple(v.value for v in Verdict)


def grades_schema(k: int) -> type[BaseModel]:
    """One required verdict per passage, by name, then the sentence that answers and where it is from: the grammar
    then guarantees exactly k verdicts. A few words per passage: a small model on 2 cores writes about 15 a second."""
    verdict = Literal["answers", "partly", "no"]
    fields: dict = {f"passage_{i}": (verdict, ...) for i in range(1, k + 1)}
    fields["quote"] = (str, Field("", max_length=300))
    fields["quoted_from"] = (int, 0)
    return create_model("Verdicts", __config__=ConfigDict(extra="ignore"), **fields)


_graders: dict[int, Agent[Any, Any]] = {}


def grader_agent(k: int) -> Agent[Any, Any]:
    """The grading agent for k passages, built once per k; the model is given per run."""
    if k not in _graders:
        _graders[k] = Agent(output_type=grades_schema(k), instructions=prompts.GRADER, retries=1)
    return _graders[k]


def verdict_grade(verdict: Verdict, quoted: bool, similarity: float) -> float:
    """A verdict as a grade. "Answers" with a sentence of the passage that answers to show for it is Correct, "not" is
    Incorrect; a partial verdict ("partly", or "answers" with nothing to show) takes the similarity grade, below
    Correct: a small model says "partly" of passages on any topic, and similarity tells those apart."""
    if verdict is Verdict.ANSWERS and quoted:
        return _VERDICTS.answers
    if verdict is Verdict.NO:
        return _VERDICTS.no
    return min(similarity, _VERDICTS.partial_ceiling)


def holds_quote(text: str, quote: str) -> bool:
    """Whether ``text`` holds the sentence a model says it copied from it: most of the sentence's words, in any
    order (a small model drops a word or a bracket as it copies)."""
    words = content_words(quote)
    if len(words) < _VERDICTS.quote_min_words:  # "device", "the output": a word shows no answer
        return False
    held = set(content_words(text))
    return sum(w in held for w in words) >= _VERDICTS.quote_words * len(words)


class LLMEvaluator(Evaluator):
    """The chat model reads the passages' excerpts closest to the question in one call, and says of each whether it
    answers, partly does, or does not, with the sentence that answers. Its verdicts are trusted: what it says answers
    may be Correct whatever words the question used."""

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
        prompt = prompts.grader_prompt(question, self.fallback.excerpts(question, texts, _VERDICTS.excerpt_chars))
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
        similar = [g.score for g in self.fallback.grade(question, texts).grades]
        return Grading(self._grades(result.output, texts, result.mode or "", similar))

    def _grades(self, output: Any, texts: Sequence[str], mode: str, similar: Sequence[float]) -> list[Grade]:
        """The verdicts as grades. The quoted sentence is the answering one of the passage that holds it: the one the
        model named, else the first it said answers."""
        verdicts = [Verdict(getattr(output, f"passage_{i}")) for i in range(1, len(texts) + 1)]
        quote = " ".join(str(output.quote).split())
        holding = [i for i, text in enumerate(texts) if quote and holds_quote(text, quote)]
        named = output.quoted_from - 1
        answering = named if named in holding else next((i for i in holding if verdicts[i] is Verdict.ANSWERS), -1)
        return [
            Grade(
                verdict_grade(v, i == answering, similar[i]),
                Method.LLM,
                mode,
                v,
                quote if i == answering else "",
                similar[i],
            )
            for i, v in enumerate(verdicts)
        ]

    def _fallback(self, question: str, texts: Sequence[str], why: str) -> Grading:
        log.warning("the LLM grader fell back to similarity: %s", why)
        grades = self.fallback.grade(question, texts).grades
        return Grading([Grade(g.score, Method.FALLBACK, why) for g in grades])
