"""CRAG's retrieval evaluator: how well does each text answer the question, in [-1, 1]?

Two implementations behind one interface:

- ``SimilarityEvaluator``: embedding similarity plus IDF-weighted coverage of the question's words,
  calibrated to [-1, 1]. Deterministic, cheap, offline; also scores refinement strips and the
  sentences of evidence answers.
- ``LLMEvaluator``: the chat model grades all texts in ONE schema-constrained request. Its output
  is validated and clamped; a request that fails twice (or times out) falls back to the similarity
  scores, and the trace says so. A misbehaving grader never crashes a chat.

And one check that holds for both: ``check_terms`` finds the question's specific terms (names,
identifiers, numbers, rare words) that no retrieved passage mentions. Such a question is a near miss:
the documents are on its topic but do not answer it, so the action must not be Correct. ``crag.support`` turns
it around for written answers.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic_ai import Agent
from pydantic_ai.models import Model

from crag import prompts
from crag.models import Embedder, NoStructuredOutput, run_structured
from crag.text import (
    HAN_RUN,
    chinese_words,
    cjk_share,
    content_words,
    fold,
    general_frequency,
    has_han,
    language,
    lexical_tokens,
    phrase,
    phrase_forms,
    split_pairs,
    stem,
    word_forms,
)
from crag.types import TermCheck


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


class TermStats(Protocol):
    """What the index knows of words: how rare a word is in these documents, and whether a name occurs."""

    n_docs: int

    def doc_frequency(self, token: str) -> int: ...

    def mentions(self, phrase: str) -> bool:
        """Whether any passage contains this ``text.phrase``."""
        ...


StatsSource = Callable[[], "TermStats | None"]


# ---------------------------------------------------------------------------------------------
# Specific terms

# On wordfreq's Zipf scale of everyday language (3: once per million words): a word rarer than SPECIFIC is
# specific ("undoes" 2.3, "页眉" 2.3, against "explain" 4.9 or "设置" 5.0); rarer than NAME_LIKE, it is as
# good as a name ("devtools" 1.35, "tidyverse" 1.1). Chosen on the dev split of the question set (README,
# "Evaluator").
SPECIFIC_ZIPF = 3.0
NAME_LIKE_ZIPF = 1.5

# An identifier: letters and digits joined by . _ / + # - (read.csv, PDF/A, UTF-8, x86_64, C++).
_IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+#/-]*[A-Za-z0-9+#]|[A-Za-z]")
_SENTENCE_START = re.compile(r"(?:^|[.!?。！？]\s*)$")
# English capitalises everyday words too ("Chinese", "Windows"): a capitalised word is a name when it is
# also less common than this.
NAME_ZIPF = 4.5


def _identifier(word: str) -> bool:
    """Identifiers, acronyms and CamelCase: terms no document paraphrases. A bare number is not one ("Stata
    14" may be answered by a page that never writes 14), nor a hyphenated pair of words ("one-row")."""
    return (
        (any(c.isdigit() for c in word) and not word.isdigit())
        or any(c in "._/+#" for c in word[1:])
        or (any(c.isupper() for c in word[1:]) and any(c.islower() for c in word))
        or (word.isupper() and len(word) >= 2)
    )


@dataclass(frozen=True)
class _Term:
    text: str  # as written
    kind: str  # "identifier" (matched normalised), "word" (in any inflection), "han" (matched as a substring)
    strong: bool  # a name: if the documents never mention it, they do not answer the question

    @cached_property
    def forms(self) -> dict[str, set[str]]:
        """The ways a document may write it, as ``phrase``s, under what each begins with (a word's inflections
        share their start, so one look at the start rules them all out). Worked out once, matched everywhere."""
        if self.kind == "word":
            return word_forms(self.text)
        # A Chinese word is found inside a run of Chinese, which a phrase keeps whole.
        return {form: {form} for form in ({self.text} if self.kind == "han" else phrase_forms(self.text))}

    @cached_property
    def letter(self) -> re.Pattern[str] | None:
        """A capital letter alone ("R", "C") is that name only as written: ``phrase`` folds case, and would find
        it in a variable or a table's column letters ("l l r")."""
        if len(self.text) == 1 and self.text.isupper():
            return re.compile(rf"(?<![A-Za-z0-9]){self.text}(?![A-Za-z0-9])")
        return None


def specific_terms(question: str) -> list[_Term]:
    """The question's names and identifiers, and its words that are rare in everyday language.

    A capitalised word is a name when it is not everyday wording (English capitalises "Chinese" too); in a
    Chinese question every Latin word is a name, since Chinese text keeps names in Latin ("Word", "Shiny").
    """
    chinese = language(question) == "zh"
    terms: dict[str, _Term] = {}
    for match in _IDENTIFIER.finditer(question):
        word = match.group().rstrip(".-/")
        if not lexical_tokens(word) or word.isdigit() or word.lower() in terms:
            continue
        zipf = max(general_frequency(word.lower()), general_frequency(stem(word.lower())))
        capitalised = word[0].isupper() and not _SENTENCE_START.search(question[: match.start()])
        if _identifier(word) or (capitalised and zipf < NAME_ZIPF):
            terms[word.lower()] = _Term(word, "identifier", True)
        elif chinese:
            terms[word.lower()] = _Term(word, "identifier", zipf < NAME_ZIPF)
        elif zipf < SPECIFIC_ZIPF:
            terms[word.lower()] = _Term(word, "word", zipf < NAME_LIKE_ZIPF)
    for run in HAN_RUN.findall(question):
        for word in chinese_words(run):
            if len(word) > 1 and word not in terms and (zipf := general_frequency(word)) < SPECIFIC_ZIPF:
                terms[word] = _Term(word, "han", zipf < NAME_LIKE_ZIPF)
    return list(terms.values())


def _mentions(term: _Term, text: str, phrased: str) -> bool:
    """``phrased`` is the text's ``phrase``."""
    if term.kind == "han":
        return term.text in text
    if term.letter:
        return term.letter.search(fold(text)) is not None
    return any(start in phrased and any(form in phrased for form in forms) for start, forms in term.forms.items())


def _unknown(term: _Term, stats: TermStats) -> bool:
    """Whether no passage of the whole index mentions a name."""
    return not any(
        stats.mentions(start) and any(stats.mentions(form) for form in forms) for start, forms in term.forms.items()
    )


def mention_test(question: str, term: str) -> Callable[[str], bool]:
    """Whether a text mentions ``term``, one of the question's specific terms, in any of its forms."""
    found = next(t for t in specific_terms(question) if t.text == term)
    return lambda text: _mentions(found, text, phrase(text))


def check_terms(question: str, texts: Sequence[str], stats: TermStats | None = None) -> TermCheck:
    """Which of the question's specific terms the texts never mention, and which the whole index never does.

    A plain word is only expected in texts of its own script: a Chinese passage answering an English
    question does not repeat its English words. Identifiers and names are expected everywhere.
    """
    terms = specific_terms(question)
    if not terms or not texts:
        return TermCheck(tuple(t.text for t in terms))
    phrased = [phrase(text) for text in texts]
    shares = [cjk_share(text) for text in texts]
    missing, unknown = [], []
    for term in terms:
        expected = [
            i
            for i, share in enumerate(shares)
            if term.kind == "identifier" or (share > 0.2 if term.kind == "han" else share < 0.5)
        ]
        if not expected or any(_mentions(term, texts[i], phrased[i]) for i in expected):
            continue
        missing.append(term.text)
        if term.strong and stats is not None and _unknown(term, stats):
            unknown.append(term.text)
    return TermCheck(tuple(t.text for t in terms), tuple(missing), tuple(unknown))


# A name the documents never mention makes every passage score at most NEAR_MISS_SCORE: below any sensible
# lower threshold, so the action is Incorrect. A specific term that no retrieved passage mentions (but some
# other passage does) caps them below the upper threshold: Ambiguous at most, so the web is asked too.
NEAR_MISS_SCORE = -0.9


def cap_near_miss(grades: Sequence[Grade], check: TermCheck, upper: float) -> list[Grade]:
    if check.unknown:
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
# crag/bench/questions.jsonl (README, "Evaluator"), never on the test split.
MIDPOINT = 0.38
SLOPE = 12.0
DENSE_WEIGHT = 0.7  # of the raw score, when the embedder understands the question's language


def calibrate(raw: float) -> float:
    return round(2.0 / (1.0 + math.exp(-SLOPE * (raw - MIDPOINT))) - 1.0, 4)


def idf(token: str, stats: TermStats | None) -> float:
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
    weights = {}
    for word in [*content_words(question), *pairs]:
        everyday = min(1.0, max(0.1, (6.5 - general_frequency(word)) / 3.0))
        weights[word] = idf(word, stats) * everyday
    return weights


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


_graders: dict[int, Agent] = {}


def grader_agent(k: int) -> Agent:
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
                backup = backup or self.fallback.grade(question, texts).grades
                grades.append(Grade(backup[i].score, "similarity (fallback: grader gave no number)"))
        return Grading(grades, result.output.web_query.strip())

    def _fallback(self, question: str, texts: Sequence[str], why: str) -> Grading:
        grades = self.fallback.grade(question, texts).grades
        return Grading([Grade(g.score, f"similarity (fallback: {why})") for g in grades])
