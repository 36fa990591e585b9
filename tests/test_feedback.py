"""Ratings of answers: stored with the chat, changed, removed, exported and imported; what a rating says of the
verdict; an older chat store migrated in place; thresholds fitted to the ratings, applied and reverted."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from crag.calibration import Thresholds, Verdict, answering, fit, moved
from crag.conversations import Conversations, NotRatable
from crag.export import conversation_markdown
from crag.feedback import (
    Answered,
    BadLabels,
    Label,
    Rating,
    Replay,
    Wrong,
    answered,
    replay_of,
    targets,
)
from crag.parts import Lead, Quote
from crag.tuning import TUNING
from crag.types import Action, Answer, AnswerKind, Method, ScoredChunk, Source, TermCheck, ThresholdsFrom, Trace
from tests.fakes import chunk

C, A, I = Action.CORRECT, Action.AMBIGUOUS, Action.INCORRECT  # noqa: E741 - the badge's letters
DEFAULTS = Thresholds(-0.8, 0.55)


def an_answer(
    scores: tuple[float, ...] = (0.9, 0.2),
    action: Action = C,
    scope: tuple[str, ...] = (),
    terms: TermCheck | None = None,
) -> Answer:
    chunks = [chunk("The widget needs two cores.", n=0), chunk("Install it first.", page=2, n=1)]
    trace = Trace(
        question="How many cores?",
        standalone_question="How many cores?",
        action=action,
        retrieved=tuple(
            ScoredChunk(chunk=c, score=s, method=Method.SIMILARITY) for c, s in zip(chunks, scores, strict=False)
        ),
        thresholds=(-0.8, 0.55),
        terms=terms or TermCheck(),
        scope=scope,
    )
    source = Source(n=1, kind="local", text=chunks[0].text, file="manual.pdf", pages=(1,), chunk_ids=("c0",))
    return Answer(
        parts=(Lead(text="From your documents:"), Quote(text="The widget needs two cores.", n=1, gap="\n")),
        backend="embedded",
        model="SmolLM2",
        sources=(source,),
        trace=trace,
        kind=AnswerKind.EVIDENCE,
    )


def a_chat(store: Conversations, scope: tuple[str, ...] = ()) -> tuple[str, int]:
    """A chat with a question before the one whose answer is rated: the chat, and the answer's message."""
    chat = store.create("cores", scope=scope)
    store.add(chat.id, "user", "What is the widget?")
    store.add(chat.id, "assistant", "A tool [1].", an_answer())
    store.add(chat.id, "user", "How many cores?")
    answer = an_answer(scope=scope)
    return chat.id, store.add(chat.id, "assistant", answer.text, answer)


# ---------------------------------------------------------------------------------------------
# Stored, changed, removed, exported


def test_a_rating_is_stored_with_what_the_answer_was(tmp_path: Path) -> None:
    store = Conversations(tmp_path / "c.sqlite3")
    chat, message = a_chat(store)
    store.update(message, an_answer().text, an_answer(), generation="gen-7")
    label = store.rate(message, Rating.UP)
    was = label.answered
    assert (label.rating, label.wrong, label.message) == (Rating.UP, (), message)
    assert was.question == "How many cores?" and was.history == (
        ("user", "What is the widget?"),
        ("assistant", "A tool [1]."),
    )
    assert was.action is C and was.grades == (0.9, 0.2) and was.thresholds == (-0.8, 0.55)
    assert was.cited[0].file == "manual.pdf" and was.pages == {("manual.pdf", 1)}
    assert was.sentence == "The widget needs two cores." and was.generation == "gen-7"
    assert was.replay is Replay.FREE
    [*_, reply] = Conversations(tmp_path / "c.sqlite3").messages(chat)  # after a restart
    assert reply.rating == label and reply.answer_id == label.answer_id


def test_a_rating_can_be_changed_and_removed(tmp_path: Path) -> None:
    store = Conversations(tmp_path / "c.sqlite3")
    chat, message = a_chat(store)
    first = store.rate(message, Rating.UP)
    changed = store.rate(message, Rating.DOWN, [Wrong.BADGE, Wrong.SOURCES, Wrong.BADGE], "  page 3,\n not 1 ")
    assert (changed.rating, changed.wrong, changed.note) == (Rating.DOWN, (Wrong.BADGE, Wrong.SOURCES), "page 3, not 1")
    assert (
        changed.answer_id == first.answer_id and changed.created == first.created and changed.updated >= first.updated
    )
    assert len(store.labels()) == 1
    again = store.rate(message, Rating.UP, [Wrong.ANSWER], "fine after all")
    assert again.wrong == (), "a thumbs up says nothing was wrong"
    assert store.unrate(message) is True and store.labels() == []
    assert store.unrate(message) is False
    assert store.messages(chat)[-1].rating is None


def test_an_answer_is_rated_by_its_id_and_an_unknown_id_says_what_to_use(tmp_path: Path) -> None:
    store = Conversations(tmp_path / "c.sqlite3")
    chat, message = a_chat(store)
    answer_id = store.messages(chat)[-1].answer_id
    assert store.rate_answer(answer_id, Rating.DOWN, [Wrong.MISSING]).message == message
    assert store.unrate_answer(answer_id) is True
    with pytest.raises(NotRatable, match="answer_id that POST /ask returned"):
        store.rate_answer("nope", Rating.UP)


def test_an_answer_that_stopped_short_cannot_be_rated(tmp_path: Path) -> None:
    store = Conversations(tmp_path / "c.sqlite3")
    chat = store.create()
    store.add(chat.id, "user", "How many cores?")
    partial = store.add(chat.id, "assistant", "The widget", complete=False)
    with pytest.raises(NotRatable, match="saved whole"):
        store.rate(partial, Rating.UP)


def test_deleting_a_chat_deletes_its_ratings(tmp_path: Path) -> None:
    store = Conversations(tmp_path / "c.sqlite3")
    chat, message = a_chat(store)
    store.rate(message, Rating.UP)
    store.delete(chat)
    assert store.labels() == []


def test_ratings_export_with_the_chat_and_import_elsewhere(tmp_path: Path) -> None:
    store = Conversations(tmp_path / "a.sqlite3")
    chat, message = a_chat(store, scope=("manuals",))
    kept = store.rate(message, Rating.DOWN, [Wrong.BADGE], "wrong page")
    store.rate(a_chat(store)[1], Rating.UP)
    markdown = conversation_markdown("cores", store.messages(chat))
    assert "Rated 👎 · wrong: the badge · “wrong page”" in markdown, "the chat's export says what the user said"

    data = json.loads(json.dumps(store.export_labels(["manuals"])))  # as a file carries it
    other = Conversations(tmp_path / "b.sqlite3")
    assert other.import_labels(data) == 1
    [imported] = other.labels(["manuals"])
    assert imported == kept and imported.message is None, "the same label, without a chat to point to"
    assert other.import_labels(data) == 0, "importing it again changes nothing"
    newer = replace(kept, rating=Rating.UP, wrong=(), updated=kept.updated + 10)
    assert other.import_labels({**data, "labels": [json.loads(json.dumps(data["labels"][0])) | _dump(newer)]}) == 1
    assert other.labels(["manuals"])[0].rating is Rating.UP, "a newer rating replaces an older one"
    assert other.labels() and other.list() == [], "labels come without chats"


def _dump(label: Label) -> dict:
    return {"rating": label.rating.value, "wrong": [w.value for w in label.wrong], "updated": label.updated}


@pytest.mark.parametrize(
    ("data", "why"),
    [
        ([], "not an export of ratings"),
        ({"format": "something/else", "labels": []}, "not an export of ratings"),
        ({"format": "crag-labels/1", "labels": [{"answer_id": "x"}]}, "cannot be read"),
    ],
)
def test_an_import_that_is_no_export_of_ratings_imports_nothing(tmp_path: Path, data: object, why: str) -> None:
    store = Conversations(tmp_path / "c.sqlite3")
    with pytest.raises(BadLabels, match=why):
        store.import_labels(data)
    assert store.labels() == []


# ---------------------------------------------------------------------------------------------
# A store written by the version before ratings opens and migrates in place

# The schema of the chat store as bbb1a33 wrote it, verbatim (its older stores were migrated to it).
OLD_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    scope TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    content TEXT NOT NULL,
    answer TEXT,
    complete INTEGER NOT NULL DEFAULT 1,
    error TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    stop TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages (conversation, id);
"""


def test_an_older_store_opens_keeps_its_chats_and_takes_ratings(tmp_path: Path) -> None:
    from pydantic import TypeAdapter

    path = tmp_path / "conversations.sqlite3"
    with sqlite3.connect(path) as db:
        db.executescript(OLD_SCHEMA)
        db.execute("INSERT INTO conversations VALUES ('old', 'cores', 1, 2, '[\"manuals\"]')")
        stored = TypeAdapter(Answer).dump_json(an_answer(scope=("manuals",))).decode()
        db.execute(
            "INSERT INTO messages (conversation, role, content, created) VALUES ('old', 'user', 'How many cores?', 1)"
        )
        db.execute(
            "INSERT INTO messages (conversation, role, content, answer, created) "
            "VALUES ('old', 'assistant', 'Two.', ?, 2)",
            (stored,),
        )
    store = Conversations(path)
    assert [c.title for c in store.list()] == ["cores"], "the old chat is listed: it is the page's"
    question, reply = store.messages("old")
    assert reply.answer == an_answer(scope=("manuals",)) and reply.answer_id == "" and reply.rating is None
    label = store.rate(reply.id, Rating.UP)
    assert label.answered.scope == ("manuals",) and label.answered.question == "How many cores?"
    assert store.messages("old")[1].answer_id == label.answer_id, "it got an id when first rated"
    reopened = Conversations(path)  # migrated once: opening it again changes nothing
    assert reopened.labels(["manuals"]) == [label]
    assert not reopened.recovered and not any("damaged" in p.name for p in tmp_path.iterdir())


# ---------------------------------------------------------------------------------------------
# Answers of the HTTP API


def test_api_answers_are_kept_apart_and_the_oldest_unrated_ones_go(tmp_path: Path, monkeypatch) -> None:
    import crag.conversations

    monkeypatch.setattr(crag.conversations, "API_KEPT", 2)
    store = Conversations(tmp_path / "c.sqlite3")
    history = [("user", "What is the widget?"), ("assistant", "A tool [1].")]
    first = store.record("How many cores?", history, an_answer(), "gen-1")
    label = store.rate_answer(first, Rating.UP)
    assert label.answered.history == tuple(history) and label.answered.generation == "gen-1"
    ids = [store.record(f"Question {n}?", [], an_answer()) for n in range(3)]
    assert store.list() == [], "not in the page's sidebar"
    with pytest.raises(NotRatable):
        store.rate_answer(ids[0], Rating.UP)  # past the two kept unrated
    store.rate_answer(ids[2], Rating.DOWN)
    assert store.rate_answer(first, Rating.UP).answer_id == first, "a rated one is kept"


# ---------------------------------------------------------------------------------------------
# What a rating says of the verdict


@pytest.mark.parametrize(
    ("rating", "wrong", "action", "right"),
    [
        (Rating.UP, (), C, {C}),
        (Rating.UP, (), A, {C}),  # the answer held: Ambiguous was too cautious
        (Rating.UP, (), I, {I}),  # rightly refused
        (Rating.DOWN, (), C, {A, I}),
        (Rating.DOWN, (Wrong.SOURCES,), C, {A, I}),
        (Rating.DOWN, (Wrong.BADGE,), A, {C}),  # the answer held, its badge did not
        (Rating.DOWN, (Wrong.BADGE, Wrong.ANSWER), A, {I}),
        (Rating.DOWN, (Wrong.ANSWER,), A, {A, I}),
        (Rating.DOWN, (), I, {C, A}),  # the documents do answer
        (Rating.DOWN, (Wrong.MISSING,), I, {C, A}),
        (Rating.DOWN, (Wrong.SOURCES,), I, {I}),  # only the closest passages shown were wrong
        (Rating.UP, (), None, set()),
    ],
)
def test_what_a_rating_says_of_the_verdict(rating: Rating, wrong: tuple, action: Action | None, right: set) -> None:
    assert targets(rating, wrong, action) == right


def test_how_a_stored_action_replays_under_other_thresholds() -> None:
    free = an_answer((0.6, 0.1), C).trace
    assert free is not None and replay_of(free) is Replay.FREE
    demoted = replace(free, action=A)  # Correct by its grades, taken down after the trigger
    assert replay_of(demoted) is Replay.CAPPED
    missing = replace(an_answer((0.54,), A).trace, terms=TermCheck(("R",), ("R",)))  # type: ignore[arg-type]
    assert replay_of(missing) is Replay.CAPPED
    # A word the passages miss, the cap lifted by the model's shown answer: Correct, nothing held it.
    shown = replace(free, terms=TermCheck(("widescreen",), ("widescreen",)))
    assert replay_of(shown) is Replay.FREE
    decisive = replace(free, action=I, terms=TermCheck(("X",), ("X",), ("X",), decisive=True))
    assert replay_of(decisive) is Replay.FIXED
    document = replace(free, retrieved=tuple(replace(g, method=Method.DOCUMENT) for g in free.retrieved))
    assert replay_of(document) is Replay.FIXED
    was = answered(replace(an_answer(), trace=demoted), "How many cores?")
    assert was.replayed(-0.8, 0.3) is A and was.replayed(0.7, 0.8) is I, "capped: never Correct, still Incorrect"


# ---------------------------------------------------------------------------------------------
# The fit


def label(n: int, best: float, rating: Rating, wrong: tuple[Wrong, ...] = (), scope: tuple[str, ...] = ()) -> Label:
    action = C if best >= DEFAULTS.upper else A if best >= DEFAULTS.lower else I
    was = Answered(
        question=f"Question {n}?",
        scope=scope,
        action=action,
        grades=(best, best - 0.3),
        thresholds=(-0.8, 0.55),
        replay=Replay.FREE,
    )
    return Label(answer_id=f"a{n:03d}", rating=rating, wrong=wrong, answered=was, created=float(n))


def separable(n: int = 30) -> list[Label]:
    """Answers graded between 0.25 and 0.5 hold (thumbs up, Ambiguous under the defaults: too cautious), those below 0
    do not (thumbs down on the badge and the answer: they should have been Incorrect), those above 0.55 hold."""
    out = []
    for i in range(n):
        if i % 3 == 0:
            out.append(label(i, 0.25 + 0.25 * (i / n), Rating.UP))
        elif i % 3 == 1:
            out.append(label(i, -0.6 + 0.6 * (i / n), Rating.DOWN, (Wrong.BADGE, Wrong.ANSWER)))
        else:
            out.append(label(i, 0.6 + 0.3 * (i / n), Rating.UP))
    return out


def test_the_minimum_of_ratings_is_enforced() -> None:
    labels = separable(TUNING.calibration.min_labels - 1)
    assert fit(labels, DEFAULTS).verdict is Verdict.TOO_FEW and fit(labels, DEFAULTS).needed == 1
    one_sided = [replace(x, rating=Rating.UP, wrong=()) for x in separable(30)]
    assert fit(one_sided, DEFAULTS).verdict is Verdict.ONE_SIDED
    fixed = [replace(x, answered=replace(x.answered, replay=Replay.FIXED)) for x in separable(30)]
    assert fit(fixed, DEFAULTS).verdict is Verdict.TOO_FEW, "answers the thresholds do not decide are not counted"


def test_labels_that_say_something_propose_thresholds_that_beat_the_defaults_held_out() -> None:
    labels = separable(30)
    found = fit(labels, DEFAULTS)
    assert found.verdict is Verdict.PROPOSED and found.proposed is not None
    assert found.held_out_accuracy > found.current_accuracy + TUNING.calibration.margin
    assert 0.1 < found.proposed.upper <= 0.25 and found.proposed_accuracy == 1.0
    # Held but shown Ambiguous: now Correct. Shown Ambiguous while the badge and the answer were wrong: now Incorrect.
    assert {(m.label.answer_id, m.before, m.after) for m in found.moved} == {
        (x.answer_id, A, C if x.rating is Rating.UP else I) for i, x in enumerate(labels) if i % 3 != 2
    }
    assert all(m.right_after and not m.right_before for m in found.moved)
    assert found.moved == moved(labels, DEFAULTS, found.proposed)


def test_labels_that_carry_no_signal_propose_no_change() -> None:
    # Ratings alternate along the grades: no pair of thresholds separates the good answers from the bad ones.
    labels = [label(i, -0.7 + 1.6 * i / 40, Rating.UP if i % 2 else Rating.DOWN) for i in range(40)]
    found = fit(labels, DEFAULTS)
    assert found.verdict is Verdict.NO_SUPPORT and found.proposed is None and found.moved == ()
    assert found.decided == 40 and found.held_out_accuracy <= found.current_accuracy + TUNING.calibration.margin


def test_an_applied_fit_answers_its_scope_and_reverts_exactly(tmp_path: Path) -> None:
    store = Conversations(tmp_path / "c.sqlite3")
    found = fit(separable(30), DEFAULTS, ("manuals",))
    assert found.proposed is not None
    assert answering(DEFAULTS, store.applied(["manuals"])) == (DEFAULTS, ThresholdsFrom.SETTINGS)
    first = store.apply_thresholds(["manuals"], found.proposed, DEFAULTS, 30, found.held_out_accuracy, 0.6)
    assert answering(DEFAULTS, store.applied(["manuals"])) == (found.proposed, ThresholdsFrom.FITTED)
    assert store.applied([]) is None, "only the scope it was fitted to"
    assert answering(DEFAULTS, first, chosen=Thresholds(-0.5, 0.5)) == (Thresholds(-0.5, 0.5), ThresholdsFrom.CHOSEN)
    second = store.apply_thresholds(["manuals"], Thresholds(0.0, 0.3), found.proposed, 30, 0.9, 0.8)
    assert store.applied(["manuals"]) == second
    assert store.revert_thresholds(["manuals"]) == second and store.applied(["manuals"]) == first
    assert store.revert_thresholds(["manuals"]) == first and store.applied(["manuals"]) is None
    assert answering(DEFAULTS, store.applied(["manuals"])) == (DEFAULTS, ThresholdsFrom.SETTINGS)
    assert store.revert_thresholds(["manuals"]) is None


def test_crag_ask_answers_with_the_thresholds_fitted_to_its_scope(settings) -> None:
    """``crag ask`` reads the fit as the page does: for its scope only, and the settings' without a store."""
    from crag.conversations import chats_file, thresholds_for

    assert thresholds_for(settings, ["manuals"]) == {} and not chats_file(settings).exists(), "no store made to be read"
    Conversations(chats_file(settings)).apply_thresholds(["manuals"], Thresholds(-0.5, 0.25), DEFAULTS, 30, 0.9, 0.6)
    assert thresholds_for(settings, ["manuals"]) == {
        "lower_threshold": -0.5,
        "upper_threshold": 0.25,
        "thresholds_from": ThresholdsFrom.FITTED,
    }
    assert thresholds_for(settings, []) == {}


def test_an_answer_says_whose_thresholds_decided_it(settings) -> None:
    from tests.fakes import pipeline

    fake = pipeline(settings, [chunk("The widget needs two cores.")], [0.9])
    assert fake.options().thresholds_from is ThresholdsFrom.SETTINGS
    assert fake.options(upper_threshold=settings.upper_threshold).thresholds_from is ThresholdsFrom.SETTINGS
    assert fake.options(upper_threshold=0.3).thresholds_from is ThresholdsFrom.CHOSEN
    fitted = fake.options(upper_threshold=0.3, lower_threshold=-0.2, thresholds_from=ThresholdsFrom.FITTED)
    assert fitted.thresholds_from is ThresholdsFrom.FITTED
    trace = fake.ask("How many cores?", upper_threshold=0.3).trace
    assert trace is not None and trace.thresholds_from is ThresholdsFrom.CHOSEN and trace.thresholds == (-0.8, 0.3)


def test_the_fit_replays_every_pair_of_thresholds_as_each_answer_does() -> None:
    """The fit's table of right verdicts (every pair of thresholds, every answer at once) says what each answer's own
    replay says, whatever its rating, faults, action and how its action follows from its grades."""
    from itertools import product

    from crag.calibration import pairs, right_count, right_table

    kinds = list(product(Rating, [(), (Wrong.BADGE,), (Wrong.SOURCES,), (Wrong.BADGE, Wrong.ANSWER)], Replay))
    labels = []
    for n, (rating, wrong, replay) in enumerate(kinds * 3):
        made = label(n, round(-1 + (n * 0.137) % 2, 3), rating, wrong)
        labels.append(replace(made, answered=replace(made.answered, replay=replay, action=list(Action)[n % 3])))
    candidates = pairs(DEFAULTS)[::7]
    table = right_table(labels, candidates)
    for row, t in zip(table, candidates, strict=True):
        assert list(row) == [x.right(x.answered.replayed(t.lower, t.upper)) for x in labels]
        assert int(row.sum()) == right_count(labels, t)
