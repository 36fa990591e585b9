"""What each step of the CRAG run hands the next (see ``crag.pipeline``), and the action trigger."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TypedDict

from crag.config import Settings
from crag.overview import Overview
from crag.scope import EVERYTHING, Scope
from crag.store import Mode
from crag.types import Action, ScoredChunk, Strip, TermCheck, ThresholdsFrom, WebResult


@dataclass(frozen=True)
class Condensed:
    question: str  # what is graded and answered: the question, or the model's standalone rewrite of it
    queries: tuple[str, ...]  # what is retrieved; several are fused
    with_history: str = ""  # the question with the conversation's words, for when it is not answered alone
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Evaluation:
    graded: tuple[ScoredChunk, ...]
    terms: TermCheck
    web_query: str = ""  # an LLM grader writes it on the way

    @property
    def best(self) -> float:
        return max((g.score for g in self.graded), default=-1.0)

    def mean(self, other: Evaluation) -> Evaluation:
        """Each passage graded as the mean of two readings of a follow-up: alone, by what it adds ("删除" in
        "那怎么删除呢？"), and with the question it goes on from (installing a package with tlmgr)."""
        scores = [round((a.score + b.score) / 2, 4) for a, b in zip(self.graded, other.graded, strict=True)]
        return replace(other, graded=tuple(replace(g, score=s) for g, s in zip(other.graded, scores, strict=True)))


@dataclass(frozen=True)
class WebKnowledge:
    query: str = ""
    results: tuple[WebResult, ...] = ()
    error: str = ""
    strips: tuple[Strip, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Knowledge:
    """What the steps before generation found: the question answered, its grades, the action, the strips."""

    question: str  # the question as graded and answered: as asked, rewritten, or read with its history
    evaluation: Evaluation
    action: Action
    strips: tuple[Strip, ...]  # local and web, kept and dropped
    web: WebKnowledge
    documents: tuple[Overview, ...] = ()  # a question about whole documents: what each is (``crag.overview``)


def decide_action(scores: Sequence[float], upper: float, lower: float) -> Action:
    """The official code's ``process_flag``: any score >= upper -> Correct; else any >= lower -> Ambiguous."""
    if any(s >= upper for s in scores):
        return Action.CORRECT
    if any(s >= lower for s in scores):
        return Action.AMBIGUOUS
    return Action.INCORRECT


@dataclass(frozen=True, kw_only=True)
class Options:
    """Per-question knobs. They are arguments of ``stream``: changing one never rebuilds the pipeline."""

    top_k: int
    upper_threshold: float
    lower_threshold: float
    web: bool
    evaluator: str  # auto | llm | similarity
    retrieval_mode: Mode
    answer_mode: str  # auto | evidence | generated
    scope: Scope = EVERYTHING  # where the question is asked: folders or files under the files folder
    # Whether the chat model may be called (MCP's search: no). Without it the similarity evaluator grades, the evidence
    # is quoted, the web is not searched and no second search runs in the model's words; ``Pipeline.options`` sets
    # the rest to match, and such a question takes no conversation (a follow-up is condensed by the model).
    use_model: bool = True
    thresholds_from: ThresholdsFrom = ThresholdsFrom.SETTINGS  # where the two thresholds came from

    @classmethod
    def from_settings(cls, s: Settings) -> Options:
        return cls(
            top_k=s.top_k,
            upper_threshold=s.upper_threshold,
            lower_threshold=s.lower_threshold,
            web=s.web_search,
            evaluator=s.evaluator,
            retrieval_mode=s.retrieval_mode,
            answer_mode=s.answer_mode,
        )


class Overrides(TypedDict, total=False):
    """``Options`` fields for one question, as keywords of ``Pipeline.stream`` and ``ask``: one left out, or None,
    keeps the settings' value. A scope may be given as paths."""

    top_k: int | None
    upper_threshold: float | None
    lower_threshold: float | None
    thresholds_from: ThresholdsFrom | None
    web: bool | None
    evaluator: str | None
    retrieval_mode: Mode | None
    answer_mode: str | None
    scope: Scope | Iterable[str] | None
    use_model: bool | None
