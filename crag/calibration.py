"""Thresholds fitted to a knowledge base's own ratings.

The action trigger turns the best grade of an answer's passages into its verdict: Correct at or above the upper
threshold, Incorrect below the lower one, Ambiguous between. The defaults were fitted on the benchmark's documents; a
user's documents may grade otherwise. With ``TUNING.calibration.min_labels`` rated answers in a scope, thumbs up and
down both among them, ``fit`` looks for the two thresholds that give the most answers their right verdict (what a
rating says is right: ``crag.feedback``), replaying each answer's stored grades (no question is asked again).

A fit is judged on answers it was not fitted on: the answers are split into ``TUNING.calibration.folds`` folds, and
each fold is judged by the thresholds fitted on the others. Only when those held-out verdicts beat the current
thresholds' by ``TUNING.calibration.margin`` (and ``min_gain`` answers) is the fit on every answer proposed; otherwise
the labels do not support a change. Nothing changes until the user applies a fit to the scope
(``Conversations.apply_thresholds``), and a revert restores exactly what answered before.
"""

from __future__ import annotations

import logging
import math
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from crag.errors import CragError
from crag.feedback import Label, Rating, Replay
from crag.tuning import TUNING
from crag.types import Action, ThresholdsFrom

if TYPE_CHECKING:
    from crag.config import Settings


class AppliedFits(Protocol):
    """Where the fits applied to scopes are kept (``crag.conversations.Conversations``)."""

    def applied(self, scope: Sequence[str]) -> Applied | None: ...


log = logging.getLogger(__name__)

_CAL = TUNING.calibration


@dataclass(frozen=True)
class Thresholds:
    lower: float
    upper: float

    def __str__(self) -> str:
        return f"lower {self.lower:.2f}, upper {self.upper:.2f}"


@dataclass(frozen=True, kw_only=True)
class Applied:
    """A fit applied to a scope: its thresholds answer the scope's questions until it is reverted."""

    id: int
    scope: tuple[str, ...]
    thresholds: Thresholds
    before: Thresholds  # what answered the scope when it was applied, for the record
    labels: int  # rated answers it was fitted on
    held_out: float  # its held-out verdict accuracy
    current: float  # the accuracy of the thresholds it replaced, on the same answers
    applied: float  # when (seconds since the epoch)


def grid() -> list[float]:
    """The values a threshold is fitted on: [-1, 1] in steps of ``TUNING.calibration.step``."""
    steps = round(2 / _CAL.step)
    return [round(-1 + _CAL.step * i, 4) for i in range(steps + 1)]


def pairs(current: Thresholds | None = None) -> list[Thresholds]:
    """Every (lower, upper) of the grid with lower <= upper, and the current pair. The lower threshold stays above
    the grade a decisive near miss is capped at, so that no fit answers from documents that never mention a term."""
    values = grid()
    out = [Thresholds(lo, up) for up in values for lo in values if TUNING.near_miss.score < lo <= up]
    return out + ([current] if current is not None and current not in out else [])


# ---------------------------------------------------------------------------------------------
# The fit


class Verdict(StrEnum):
    """What a fit says."""

    TOO_FEW = "too_few"  # fewer rated answers than the minimum, among those the thresholds decide
    ONE_SIDED = "one_sided"  # only thumbs up, or only thumbs down: nothing to separate
    NO_SUPPORT = "no_support"  # held out, the fit does not beat the current thresholds by the margin
    PROPOSED = "proposed"


@dataclass(frozen=True)
class Moved:
    """A rated answer whose verdict the proposed thresholds change."""

    label: Label
    before: Action
    after: Action

    @property
    def right_before(self) -> bool:
        return self.label.right(self.before)

    @property
    def right_after(self) -> bool:
        return self.label.right(self.after)


@dataclass(frozen=True, kw_only=True)
class Fit:
    scope: tuple[str, ...]
    verdict: Verdict
    labels: int  # rated answers in the scope
    decided: int  # of them, those whose action the thresholds decide (the fit's test set)
    up: int
    down: int
    current: Thresholds
    current_right: int  # of ``decided``, right under the current thresholds
    held_out_right: int = 0  # of ``decided``, right under thresholds fitted without them (cross-validated)
    proposed: Thresholds | None = None  # fitted on every answer; only with Verdict.PROPOSED
    proposed_right: int = 0  # of ``decided``, right under ``proposed``
    moved: tuple[Moved, ...] = ()  # the answers whose verdict ``proposed`` changes

    @property
    def needed(self) -> int:
        """Rated answers still needed before a fit."""
        return max(0, _CAL.min_labels - self.decided)

    @property
    def current_accuracy(self) -> float:
        return self.current_right / self.decided if self.decided else 0.0

    @property
    def held_out_accuracy(self) -> float:
        return self.held_out_right / self.decided if self.decided else 0.0

    @property
    def proposed_accuracy(self) -> float:
        return self.proposed_right / self.decided if self.decided else 0.0


def right_count(labels: Sequence[Label], thresholds: Thresholds) -> int:
    """How many of ``labels`` these thresholds give their right verdict, replayed from the stored grades."""
    return sum(1 for label in labels if label.right(label.answered.replayed(thresholds.lower, thresholds.upper)))


def right_table(labels: Sequence[Label], candidates: Sequence[Thresholds]) -> Any:
    """Whether each pair of ``candidates`` (rows) gives each label (columns) its right verdict: ``right_count``'s
    replay (``Answered.replayed``) for every pair and label at once, as a boolean array."""
    import numpy as np  # with the first fit, not with the first page

    def column(values: list[Any]) -> Any:
        return np.array(values)[None, :]

    best = column([label.answered.best for label in labels])
    capped = column([label.answered.replay is Replay.CAPPED for label in labels])
    fixed = column([label.answered.replay is Replay.FIXED or label.answered.action is None for label in labels])
    stays = column([label.right(label.answered.action) for label in labels])
    ok = {action: column([action in label.targets for label in labels]) for action in Action}
    lower = np.array([t.lower for t in candidates])[:, None]
    upper = np.array([t.upper for t in candidates])[:, None]
    correct = (best >= upper) & ~capped
    ambiguous = ~correct & (best >= lower)
    incorrect = ~correct & ~ambiguous
    right = (correct & ok[Action.CORRECT]) | (ambiguous & ok[Action.AMBIGUOUS]) | (incorrect & ok[Action.INCORRECT])
    return np.where(fixed, stays, right)


def nearest_best(counts: Any, candidates: Sequence[Thresholds], current: Thresholds) -> Thresholds:
    """Of the pairs with the most right verdicts (``counts``, one per candidate), the nearest to ``current``."""
    best = counts.max()
    tied = [t for t, n in zip(candidates, counts, strict=True) if n == best]
    return min(tied, key=lambda t: (abs(t.lower - current.lower) + abs(t.upper - current.upper), t.upper, t.lower))


def best_fit(labels: Sequence[Label], current: Thresholds) -> Thresholds:
    """The thresholds that give the most of ``labels`` their right verdict; of those tied, the nearest to
    ``current`` (the labels say nothing to move further)."""
    candidates = pairs(current)
    return nearest_best(right_table(labels, candidates).sum(axis=1), candidates, current)


def held_out(labels: Sequence[Label], current: Thresholds) -> int:
    """How many of ``labels`` get their right verdict from thresholds fitted on the other folds (k-fold, the
    answers dealt to the folds in the order they were rated)."""
    candidates = pairs(current)
    table = right_table(labels, candidates)
    folds = min(_CAL.folds, len(labels))
    right = 0
    for k in range(folds):
        test = [i for i in range(len(labels)) if i % folds == k]
        train = [i for i in range(len(labels)) if i % folds != k]
        chosen = candidates.index(nearest_best(table[:, train].sum(axis=1), candidates, current))
        right += int(table[chosen, test].sum())
    return right


def fit(labels: Sequence[Label], current: Thresholds, scope: tuple[str, ...] = ()) -> Fit:
    """What the ratings of one scope say of its thresholds (``current``: those that answer it now)."""
    decided = sorted(
        (label for label in labels if label.answered.replay is not Replay.FIXED and label.targets),
        key=lambda label: (label.created, label.answer_id),
    )
    up = sum(1 for label in decided if label.rating is Rating.UP)
    base: dict[str, Any] = {
        "scope": scope,
        "labels": len(labels),
        "decided": len(decided),
        "up": up,
        "down": len(decided) - up,
        "current": current,
        "current_right": right_count(decided, current),
    }
    if len(decided) < _CAL.min_labels:
        return Fit(verdict=Verdict.TOO_FEW, **base)
    if not 0 < up < len(decided):
        return Fit(verdict=Verdict.ONE_SIDED, **base)
    kept = held_out(decided, current)
    proposed = best_fit(decided, current)
    gain = max(_CAL.min_gain, math.ceil(_CAL.margin * len(decided) - 1e-9))
    if kept - base["current_right"] < gain or proposed == current:
        return Fit(verdict=Verdict.NO_SUPPORT, held_out_right=kept, **base)
    return Fit(
        verdict=Verdict.PROPOSED,
        held_out_right=kept,
        proposed=proposed,
        proposed_right=right_count(decided, proposed),
        moved=moved(decided, current, proposed),
        **base,
    )


def moved(labels: Sequence[Label], before: Thresholds, after: Thresholds) -> tuple[Moved, ...]:
    """The answers whose replayed verdict differs between two pairs of thresholds."""
    out = []
    for label in labels:
        was = label.answered.replayed(before.lower, before.upper)
        now = label.answered.replayed(after.lower, after.upper)
        if was is not None and now is not None and was is not now:
            out.append(Moved(label, was, now))
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Which thresholds answer a question


def answering(
    settings: Thresholds, applied: Applied | None, chosen: Thresholds | None = None
) -> tuple[Thresholds, ThresholdsFrom]:
    """The thresholds that answer a question, and whose they are: those chosen for it (the page's Answer settings,
    when moved from the settings'), else a fit applied to its scope, else the settings'."""
    if chosen is not None and chosen != settings:
        return chosen, ThresholdsFrom.CHOSEN
    if applied is not None:
        return applied.thresholds, ThresholdsFrom.FITTED
    return settings, ThresholdsFrom.SETTINGS


def overrides(thresholds: Thresholds, source: ThresholdsFrom) -> dict[str, Any]:
    """``answering``'s outcome as ``Pipeline.stream`` keywords."""
    return {"lower_threshold": thresholds.lower, "upper_threshold": thresholds.upper, "thresholds_from": source}


def fitted_overrides(store: AppliedFits, settings: Settings, scope: Sequence[str]) -> dict[str, Any]:
    """The thresholds a fit applied to ``scope`` answers with, as ``Pipeline.stream`` keywords: {} without one (the
    settings' answer). Every edge asks this way (the page, the API, MCP, ``crag ask``): the same scope gets the same
    thresholds. A store that cannot be read leaves the settings' thresholds, and the log says why."""
    from crag.scope import Scope

    try:
        applied = store.applied(Scope.of(scope).paths)
    except (CragError, sqlite3.Error) as exc:
        log.warning("the thresholds fitted to %s could not be read: %s", list(scope), exc)
        return {}
    if applied is None:
        return {}
    return overrides(*answering(Thresholds(settings.lower_threshold, settings.upper_threshold), applied))
