"""CRAG's retrieval evaluator: how well does each text answer the question, in [-1, 1]?

Two implementations behind one interface:

- ``SimilarityEvaluator``: embedding similarity plus IDF-weighted coverage of the question's words,
  calibrated to [-1, 1]. Deterministic, cheap, offline; also scores refinement strips and the
  sentences of evidence answers.
- ``LLMEvaluator``: the chat model grades all texts in ONE schema-constrained request. Its output
  is validated and clamped; a request that fails twice (or times out) falls back to the similarity
  scores, and the trace says so. A misbehaving grader never crashes a chat.

And one check that holds for both: ``crag.terms.check_terms`` finds the question's specific terms (names,
identifiers, numbers, rare words) that no retrieved passage mentions in any form. A missing term is evidence
against the passages, not a veto: ``cap_near_miss`` keeps them below Correct, and makes them Incorrect only when
the question's specific content is absent from the documents and the passages do not match the rest of the
question either.
"""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic_ai import Agent
from pydantic_ai.models import Model

from crag import prompts
from crag.models import Embedder, NoStructuredOutput, run_structured
from crag.terms import SPECIFIC_ZIPF, TermStats
from crag.text import (
    cjk_share,
    content_words,
    general_frequency,
    has_han,
    lexical_tokens,
    split_pairs,
)
from crag.types import TermCheck

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Grade:
    score: float  # in [-1, 1]
    method: str  # "llm" | "similarity" | "similarity (fallback: <why>)"


@dataclass(frozen=True)
class Grading:
    """Grades in the order of the texts, and a web query when the grader wrote one on the way."""

    grades: list[Grade]
    web_query: str = ""


@dataclass
class Usage:
    """What grading cost: LLM requests and tokens (zero for the similarity evaluator)."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def add(self, usage) -> None:  # a pydantic-ai RunUsage
        self.requests += usage.requests
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens


class Evaluator(ABC):
    name: str

    @abstractmethod
    def grade(self, question: str, texts: Sequence[str], usage: Usage | None = None) -> Grading:
        """One grade per text, in order."""


StatsSource = Callable[[], "TermStats | None"]


# A missing term is evidence against the passages, not a veto. A specific term that no retrieved passage mentions
# caps their grades below the upper threshold: Ambiguous at most, so the web is asked too and the answer says the
# passages may not answer. The action is Incorrect (every grade at most NEAR_MISS_SCORE, below any sensible lower
# threshold) only when the question is about what the documents lack: a term that no passage of the index mentions in
# any form is a name rarer than everyday words ("pbzip2", "Flatpak", "devtools": a page that never names it does not
# answer a question about it), or it carries most of the weight of the question's specific terms and nothing else of
# the question that the best passage matches outweighs it. An everyday word the documents never use ("Norwegian",
# "Workshop") is often the user's way of saying what they say in other words: their closest passages are shown, as
# such.
NEAR_MISS_SCORE = -0.9


def term_weight(term: str, stats: TermStats | None, unknown: bool = False) -> float:
    """A specific term's weight, as ``word_weights`` weighs a question's words: its rarest word's, or for a term the
    documents never mention in any form, a word they never use ("PDF/A" is absent, though "PDF" is everywhere)."""
    if unknown:
        return idf("", None if stats is None else _Unseen(stats.n_docs)) * _everyday(term)
    return max(word_weights(term, stats).values(), default=0.0)


@dataclass(frozen=True)
class _Unseen:
    """Statistics in which no word occurs: the IDF of a word the documents never use."""

    n_docs: int

    def doc_frequency(self, token: str) -> int:
        return 0


def decisive(question: str, check: TermCheck, texts: Sequence[str], stats: TermStats | None) -> bool:
    """Whether a near miss makes the action Incorrect (see above)."""
    if not check.unknown or not texts:
        return False
    if any(general_frequency(t.lower()) < SPECIFIC_ZIPF for t in check.unknown):
        return True
    weights = {t: term_weight(t, stats, t in check.unknown) for t in check.terms}
    absent = sum(weights[t] for t in check.missing)
    if absent < 0.5 * sum(weights.values()):
        return False
    rest = question
    for term in check.missing:
        rest = rest.replace(term, " ")
    rest_weights = word_weights(rest, stats)
    support = max(coverage(rest_weights, text) for text in texts) * sum(rest_weights.values())
    return support < absent


def cap_near_miss(grades: Sequence[Grade], check: TermCheck, upper: float) -> list[Grade]:
    """Grades capped for a near miss: at most ``NEAR_MISS_SCORE`` when it is ``decisive``, else below ``upper``."""
    if check.decisive:
        cap = NEAR_MISS_SCORE
    elif check.missing:
        cap = upper - 0.01
    else:
        return list(grades)
    return [Grade(min(g.score, cap), g.method) for g in grades]


# ---------------------------------------------------------------------------------------------
# Similarity

# Calibration of the raw similarity (dense cosine and weighted coverage) to [-1, 1] with a logistic curve:
# MIDPOINT maps to 0 and SLOPE sets how fast scores saturate. Fitted on the dev split of
# crag/bench/questions.jsonl (docs/benchmarks.md), never on the test split: for MiniLM first, and fitted again for the
# multilingual USE on the dev split and its dev twins together, where no midpoint and slope made fewer wrong actions
# without crowding the grades at the top of the scale.
MIDPOINT = 0.38
SLOPE = 12.0
DENSE_WEIGHT = 0.7  # of the raw score, when the embedder understands the question's language


def calibrate(raw: float) -> float:
    return round(2.0 / (1.0 + math.exp(-SLOPE * (raw - MIDPOINT))) - 1.0, 4)


class DocFrequencies(Protocol):
    """What an IDF needs of the index: its passages, and in how many of them a token occurs (``TermStats``)."""

    @property
    def n_docs(self) -> int: ...

    def doc_frequency(self, token: str) -> int: ...


def idf(token: str, stats: DocFrequencies | None) -> float:
    """BM25's IDF in these documents. Without stats every word weighs 1."""
    if stats is None:
        return 1.0
    n, df = stats.n_docs, stats.doc_frequency(token)
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def word_weights(question: str, stats: TermStats | None) -> dict[str, float]:
    """How much each content word of the question says: rare in these documents (IDF, highest for a word
    they never use) and not everyday wording ("every", "开始" weigh little)."""
    # A pair of characters the dictionary split ("双栏", "宏包") counts as a word when these documents use it.
    pairs = [w for w in split_pairs(question) if stats is not None and stats.doc_frequency(w)]
    return {word: idf(word, stats) * _everyday(word) for word in [*content_words(question), *pairs]}


def _everyday(word: str) -> float:
    """1 for a word rarer than once in ten thousand in everyday language, down to 0.1 for the commonest."""
    return min(1.0, max(0.1, (6.5 - general_frequency(word.lower())) / 3.0))


def coverage(weights: dict[str, float], text: str) -> float:
    """The weighted share of the question's words that the text contains (Chinese words as substrings:
    segmentation differs between a question and a document)."""
    total = sum(weights.values())
    if not total:
        return 0.0
    present = set(lexical_tokens(text))
    return sum(w for word, w in weights.items() if (word in text if has_han(word) else word in present)) / total


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
        dense = DENSE_WEIGHT if self.embedder.multilingual else DENSE_WEIGHT * (1.0 - cjk_share(question))
        return [
            dense * sum(a * b for a, b in zip(q, v, strict=True)) + (1.0 - dense) * coverage(weights, text)
            for text, v in zip(texts, rows, strict=True)
        ]

    def grade(self, question: str, texts: Sequence[str], usage: Usage | None = None) -> Grading:
        return Grading([Grade(calibrate(r), self.name) for r in self.raw(question, texts)])

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

    def grade(self, question: str, texts: Sequence[str], usage: Usage | None = None) -> Grading:
        """One request for all the texts, in the structured output mode the model server accepts; the grades'
        method names that mode when it was found out for this server ("llm (json_object)")."""
        if not texts:
            return Grading([])
        usage = usage if usage is not None else Usage()
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
        usage.add(result.usage)
        method = f"{self.name} ({result.mode})" if result.mode else self.name
        values = [getattr(result.output, f"passage_{i}") for i in range(1, len(texts) + 1)]
        backup: list[Grade] | None = None
        grades = []
        for i, value in enumerate(values):
            if isinstance(value, float) and math.isfinite(value):
                grades.append(Grade(max(-1.0, min(1.0, value)), method))
            else:
                log.warning("the LLM grader gave no number for passage %d: similarity grades it", i + 1)
                backup = backup or self.fallback.grade(question, texts).grades
                grades.append(Grade(backup[i].score, "similarity (fallback: grader gave no number)"))
        return Grading(grades, result.output.web_query.strip())

    def _fallback(self, question: str, texts: Sequence[str], why: str) -> Grading:
        log.warning("the LLM grader fell back to similarity: %s", why)
        grades = self.fallback.grade(question, texts).grades
        return Grading([Grade(g.score, f"similarity (fallback: {why})") for g in grades])
