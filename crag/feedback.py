"""What users say of their answers, and what that says of the verdict.

A **rating** is a thumbs up or down on one answer; a thumbs down may say what was wrong (``Wrong``: the badge, the
answer, the sources, a source missing) and carry a note. Each rating keeps, beside what the user said, what the answer
was made from (``Answered``): the question and the turns before it, the scope, the action and the thresholds that
decided it, the grades of the retrieved passages, the passages it cited, its answering sentence and the index
generation that answered. A rated answer is a **label**, and a scope's labels are its own test set: the evaluation
counts how often each verdict was right, re-asks the questions (``rerun``), looks whether the passages of the answers
rated up are still retrieved (``lost``), and ``crag.calibration`` fits the thresholds to them, from the stored grades,
without asking anything again.

What a rating says of the verdict (``targets``: the actions that would have been right), by the action shown:

=========  ==============================================  ==============================================
action     thumbs up                                       thumbs down
=========  ==============================================  ==============================================
Correct    right                                           wrong: Ambiguous or Incorrect would have been
Ambiguous  too cautious: Correct would have been right     "the badge" alone (the answer held): Correct;
                                                           "the badge" and another fault: Incorrect;
                                                           other faults only: right (so was Incorrect)
Incorrect  right: the documents do not answer              wrong: the documents do answer (Correct or
                                                           Ambiguous), unless only "the sources" were
                                                           wrong (the closest passages shown): right
=========  ==============================================  ==============================================
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter, ValidationError

from crag.errors import CragError
from crag.parts import quoted, quoted_texts, written
from crag.types import Action, Answer, AnswerKind, Method, Trace

if TYPE_CHECKING:
    from crag.config import Settings
    from crag.pipeline import Pipeline
    from crag.retriever import Retriever
    from crag.store import Mode

HISTORY_TURNS = 6  # earlier turns a label keeps, as the model is shown them (``crag.prompts``)
HISTORY_CHARS = 2_000  # characters of one kept turn
NOTE_CHARS = 2_000  # characters of a note
SENTENCE_CHARS = 400  # characters of the answering sentence kept
FORMAT = "crag-labels/1"  # what an export of labels says it is


class Rating(StrEnum):
    UP = "up"
    DOWN = "down"


class Wrong(StrEnum):
    """What a thumbs down says was wrong."""

    BADGE = "badge"  # the verdict: the badge under the answer
    ANSWER = "answer"  # what the answer says
    SOURCES = "sources"  # the passages it cites
    MISSING = "missing"  # a passage that answers was not among them


# What each fault is called on the page and in exports.
WRONG_WORDS = {
    Wrong.BADGE: "the badge",
    Wrong.ANSWER: "the answer",
    Wrong.SOURCES: "the sources",
    Wrong.MISSING: "a source missing",
}
THUMBS = {Rating.UP: "👍", Rating.DOWN: "👎"}


class Replay(StrEnum):
    """How the action of a stored answer follows from its grades under other thresholds."""

    FREE = "free"  # the action trigger alone decided it: any score >= upper, Correct; any >= lower, Ambiguous
    CAPPED = "capped"  # as FREE, but never Correct: a term of the question the passages lack, or a check after the
    # trigger that took a Correct down (the kept passages did not hold the question's terms, none survived refinement)
    FIXED = "fixed"  # not decided by the thresholds: a question about whole documents, a decisive near miss, no grades


@dataclass(frozen=True, kw_only=True)
class Cited:
    """A passage an answer cited: its document and pages, and the chunks it came from."""

    file: str
    pages: tuple[int, ...] = ()
    chunk_ids: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Answered:
    """What a rated answer was, kept with its rating: enough to judge it, re-ask it and fit thresholds to it."""

    question: str
    history: tuple[tuple[str, str], ...] = ()  # (role, text) of the turns before it, oldest first
    scope: tuple[str, ...] = ()  # where it was asked, sorted; empty for every document
    action: Action | None = None
    kind: AnswerKind = AnswerKind.EVIDENCE
    grades: tuple[float, ...] = ()  # the evaluator's grades of the retrieved passages, as capped, in retrieval order
    thresholds: tuple[float, float] = (-1.0, 1.0)  # (lower, upper) the action was decided with
    replay: Replay = Replay.FIXED
    cited: tuple[Cited, ...] = ()  # the documents' passages the answer cited
    sentence: str = ""  # what answers: an evidence answer's first quote, a written answer's first sentence
    generation: str = ""  # the index generation that answered ("" when not known)

    @property
    def best(self) -> float:
        return max(self.grades, default=-1.0)

    @property
    def pages(self) -> frozenset[tuple[str, int]]:
        """The cited (document, page) pairs."""
        return frozenset((c.file, page) for c in self.cited for page in c.pages)

    def replayed(self, lower: float, upper: float) -> Action | None:
        """The action these thresholds would have given, from the stored grades (``Replay`` says how)."""
        if self.replay is Replay.FIXED or self.action is None:
            return self.action
        best = self.best
        action = Action.CORRECT if best >= upper else Action.AMBIGUOUS if best >= lower else Action.INCORRECT
        return Action.AMBIGUOUS if action is Action.CORRECT and self.replay is Replay.CAPPED else action


@dataclass(frozen=True, kw_only=True)
class Label:
    """A rated answer."""

    answer_id: str
    rating: Rating
    wrong: tuple[Wrong, ...] = ()
    note: str = ""
    answered: Answered
    created: float = 0.0
    updated: float = 0.0
    message: int | None = field(default=None, compare=False)  # the chat message; None for an imported label

    @cached_property  # asked for every pair of thresholds a fit tries
    def targets(self) -> frozenset[Action]:
        return targets(self.rating, self.wrong, self.answered.action)

    def right(self, action: Action | None) -> bool:
        """Whether ``action`` would have been the right verdict for this answer, by its rating."""
        return action in self.targets


def rating_words(label: Label) -> str:
    """What the user said, on one line: "👎 · wrong: the badge, the sources · “the answer is on page 12”"."""
    parts = [THUMBS[label.rating]]
    if label.wrong:
        parts.append("wrong: " + ", ".join(WRONG_WORDS[w] for w in label.wrong))
    if label.note:
        parts.append(f"“{label.note}”")
    return " · ".join(parts)


def targets(rating: Rating, wrong: Iterable[Wrong], action: Action | None) -> frozenset[Action]:
    """The actions that would have been right for an answer shown with ``action`` and rated so (the module's table).
    None for an answer without an action: no verdict to judge."""
    correct, ambiguous, incorrect = Action.CORRECT, Action.AMBIGUOUS, Action.INCORRECT
    faults = set(wrong)
    if action is None:
        return frozenset()
    if rating is Rating.UP:
        return frozenset({incorrect} if action is incorrect else {correct})
    if action is correct:
        return frozenset({ambiguous, incorrect})
    if action is ambiguous:
        if faults == {Wrong.BADGE}:
            return frozenset({correct})
        return frozenset({incorrect} if Wrong.BADGE in faults else {ambiguous, incorrect})
    return frozenset({incorrect} if faults and faults <= {Wrong.SOURCES} else {correct, ambiguous})


def scope_key(paths: Iterable[str]) -> tuple[str, ...]:
    """A scope as labels and fitted thresholds are filed under: its paths, sorted, each once."""
    return tuple(sorted(set(paths)))


def replay_of(trace: Trace) -> Replay:
    """How this answer's action follows from its grades (``Replay``)."""
    if trace.action is None or not trace.retrieved or trace.terms.decisive:
        return Replay.FIXED
    if any(g.method is Method.DOCUMENT for g in trace.retrieved):
        return Replay.FIXED
    lower, upper = trace.thresholds
    best = max(g.score for g in trace.retrieved)
    trigger = Action.CORRECT if best >= upper else Action.AMBIGUOUS if best >= lower else Action.INCORRECT
    if trigger is Action.CORRECT and trace.action is Action.AMBIGUOUS:
        return Replay.CAPPED
    if trigger is not trace.action:
        return Replay.FIXED  # a question of several asks, or one read another way: its action is its own
    # A missing term caps the grades below Correct, unless the model showed a passage answers (``crag.pipeline``): an
    # answer that was Correct had no cap that held.
    return Replay.CAPPED if trace.terms.missing and trace.action is not Action.CORRECT else Replay.FREE


def answering_sentence(answer: Answer) -> str:
    """What answers, in one sentence: an evidence answer's first quote, a written answer's first sentence."""
    from crag.text import split_sentences

    if answer.kind is AnswerKind.EVIDENCE:
        quotes = quoted(answer.parts)
        return quoted_texts(quotes[0])[0][:SENTENCE_CHARS] if quotes else ""
    if answer.kind is AnswerKind.NO_ANSWER:
        return ""
    own = written(answer.parts)
    sentences = [s for line in own.splitlines() for s in split_sentences(line) if s.strip()]
    return sentences[0][:SENTENCE_CHARS] if sentences else ""


def answered(answer: Answer, question: str, history: Sequence[tuple[str, str]] = (), generation: str = "") -> Answered:
    """What to keep of ``answer`` with its rating. ``history``: the turns it was asked after, oldest first."""
    trace = answer.trace
    turns = tuple((role, text[:HISTORY_CHARS]) for role, text in history if text)[-HISTORY_TURNS:]
    cited = tuple(
        Cited(file=s.file, pages=s.pages, chunk_ids=s.chunk_ids) for s in answer.cited_sources if s.kind == "local"
    )
    return Answered(
        question=question,
        history=turns,
        scope=scope_key(trace.scope) if trace else (),
        action=answer.action,
        kind=answer.kind,
        grades=tuple(round(g.score, 4) for g in trace.retrieved) if trace else (),
        thresholds=trace.thresholds if trace else (-1.0, 1.0),
        replay=replay_of(trace) if trace else Replay.FIXED,
        cited=cited,
        sentence=answering_sentence(answer),
        generation=generation,
    )


def generation_of(settings: Settings) -> str:
    """The index generation that answers now ("" when none is built or the index cannot be read): what an answer
    made now was made from."""
    from crag.store import open_store

    try:
        active = open_store(settings).active()
    except (CragError, OSError, ValueError):
        return ""
    return active.id if active else ""


# ---------------------------------------------------------------------------------------------
# Labels as data: what an export of a knowledge base carries


_LABELS = TypeAdapter(list[Label])


class BadLabels(CragError):
    """Labels to import that are not an export of labels."""


def labels_json(labels: Sequence[Label]) -> dict[str, Any]:
    """Labels as JSON-able data, to keep or to carry to another copy of the app (``labels_from_json``)."""
    return {"format": FORMAT, "labels": _LABELS.dump_python(list(labels), mode="json", exclude={"message"})}


def labels_from_json(data: Any) -> list[Label]:
    """``labels_json``'s data read back. Raises ``BadLabels`` with what is wrong."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BadLabels(f"This is not an export of ratings (it should say format {FORMAT!r}): nothing was imported.")
    try:
        labels = _LABELS.validate_python(data.get("labels"))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise BadLabels(
            f"The ratings cannot be read ({where}: {first['msg']}): nothing was imported. Export them again."
        ) from None
    if any(not math.isfinite(g) for label in labels for g in label.answered.grades):
        raise BadLabels("The ratings hold grades that are not numbers: nothing was imported. Export them again.")
    return [replace(label, note=label.note[:NOTE_CHARS]) for label in labels]


# ---------------------------------------------------------------------------------------------
# The evaluation of a scope: how often each verdict was right, passages lost, questions asked again


@dataclass(frozen=True)
class Verdicts:
    """How often one action was right among the rated answers shown with it."""

    action: Action
    right: int
    total: int
    up: int
    down: int


def verdicts(labels: Sequence[Label]) -> list[Verdicts]:
    """Per action shown, in the badge's order: the answers rated, how many had the right verdict, up and down."""
    out = []
    for action in Action:
        shown = [label for label in labels if label.answered.action is action]
        out.append(
            Verdicts(
                action=action,
                right=sum(1 for label in shown if label.right(action)),
                total=len(shown),
                up=sum(1 for label in shown if label.rating is Rating.UP),
                down=sum(1 for label in shown if label.rating is Rating.DOWN),
            )
        )
    return out


def found(cited: Cited, hits: Iterable[Any]) -> bool:
    """Whether a retrieved passage is the cited one: the same chunk, or the same document on a page it cited (a
    rebuild of a changed document renames its chunks)."""
    for hit in hits:
        chunk = hit.chunk
        if set(cited.chunk_ids) & {chunk.id} or (chunk.file == cited.file and set(chunk.pages) & set(cited.pages)):
            return True
    return False


def lost(retriever: Retriever, labels: Sequence[Label], top_k: int, mode: Mode = "hybrid") -> list[Label]:
    """The answers rated up whose cited passages are no longer among the top ``top_k`` retrieved for their question
    in their scope (or whose scope the index no longer holds): after a rebuild, what users said was right and may no
    longer be found."""
    from crag.scope import Scope, UnknownScope

    out = []
    for label in labels:
        if label.rating is not Rating.UP or not label.answered.cited:
            continue
        try:
            hits = retriever.retrieve(label.answered.question, top_k, mode, Scope.of(label.answered.scope))
        except UnknownScope:
            hits = []
        if not all(found(c, hits) for c in label.answered.cited):
            out.append(label)
    return out


class Change(StrEnum):
    """What differs in an answer asked again."""

    ACTION = "action"
    PAGES = "pages"  # the cited documents and pages
    SENTENCE = "sentence"  # the answering sentence
    FAILED = "failed"  # it could not be asked again (its scope is gone, the model failed)


@dataclass(frozen=True, kw_only=True)
class Rerun:
    """A rated question asked again, against today's index and settings, beside the answer it rated."""

    label: Label
    now: Answered | None  # None when it could not be asked
    error: str = ""

    @property
    def changes(self) -> tuple[Change, ...]:
        was, now = self.label.answered, self.now
        if now is None:
            return (Change.FAILED,)
        out = []
        if now.action is not was.action:
            out.append(Change.ACTION)
        if now.pages != was.pages:
            out.append(Change.PAGES)
        if " ".join(now.sentence.split()) != " ".join(was.sentence.split()):
            out.append(Change.SENTENCE)
        return tuple(out)

    @property
    def same(self) -> bool:
        return not self.changes


def rerun(pipeline: Pipeline, label: Label, **overrides: Any) -> Rerun:
    """``label``'s question asked again, after the same turns and in the same scope; ``overrides`` are this
    question's ``Options`` (the thresholds that answer its scope now)."""
    was = label.answered
    try:
        answer = pipeline.ask(was.question, was.history, scope=list(was.scope), **overrides)
    except CragError as exc:
        return Rerun(label=label, now=None, error=str(exc))
    if not answer.complete:
        return Rerun(label=label, now=None, error=answer.error or "the answer stopped before its end")
    return Rerun(label=label, now=answered(answer, was.question, was.history))
