"""The page's ratings: thumbs under each answer (rated, changed, removed, with what was wrong), a folded answer's line
with its badge and rating, and the Evaluate page (how often each verdict was right, Re-run, a fit applied and
reverted, the ratings as a file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crag.conversations import Conversations
from crag.feedback import Rating, Wrong, labels_json
from crag.types import ThresholdsFrom
from tests.apptest import app, ask, loaded, plain, saved, texts, use_pipeline
from tests.test_feedback import separable

EVALUATE = "ui/evaluate_page.py"


def table(at, column: str):
    """The page's table that has this column."""
    return next(frame.value for frame in at.dataframe if column in frame.value.columns)


def store_of(files: Path) -> Conversations:
    return Conversations(files.parent / "chroma_db" / "conversations.sqlite3")


def test_an_answer_is_rated_changed_explained_and_unrated_under_it(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    use_pipeline(monkeypatch, [0.9])
    at = ask(app(), "How many cores does the widget need?")
    reply = saved(files)[1].id
    [thumbs] = at.feedback
    thumbs.set_value(1).run()
    assert saved(files)[1].rating is not None and saved(files)[1].rating.rating is Rating.UP
    assert "Kept: 👍" in texts(at.caption)
    at.feedback(key=f"rate-{reply}").set_value(0).run()
    assert saved(files)[1].rating.rating is Rating.DOWN and not saved(files)[1].rating.wrong
    at.pills(key=f"wrong-{reply}").set_value([Wrong.BADGE, Wrong.SOURCES]).run()
    at.text_input(key=f"note-{reply}").set_value("It is on page 2").run()
    rated = saved(files)[1].rating
    assert rated is not None and (rated.wrong, rated.note) == ((Wrong.BADGE, Wrong.SOURCES), "It is on page 2")
    assert "Kept: 👎 · wrong: the badge, the sources · “It is on page 2”" in plain(texts(at.caption))
    at.feedback(key=f"rate-{reply}").set_value(None).run()
    assert saved(files)[1].rating is None, "clicking the thumb again takes the rating back"


def test_a_rating_that_cannot_be_kept_says_why_under_its_answer(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    """The first thumbs of an answer fail (the store is locked): the answer stays unrated and says so, under it."""
    from crag.conversations import HistoryUnavailable

    def locked(self, *args, **kwargs):
        raise HistoryUnavailable("The chats could not be saved: the database is locked. Try again.")

    use_pipeline(monkeypatch, [0.9])
    at = ask(app(), "How many cores does the widget need?")
    monkeypatch.setattr(Conversations, "rate", locked)
    at.feedback[0].set_value(1).run()
    assert saved(files)[1].rating is None
    assert "the database is locked" in texts(at.chat_message[1].error)


def test_a_folded_answer_shows_its_badge_and_rating(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    use_pipeline(monkeypatch, [0.9])
    at = ask(app(), "How many cores does the widget need?")
    at.feedback[0].set_value(1).run()
    at = ask(at, "And how much memory does the widget need?")
    at.run()
    folded = at.chat_message[1].expander[0].label
    assert folded.startswith(":green-background[:material/check_circle: Correct] 👍 The widget needs"), folded


def test_the_evaluate_page_applies_a_fit_the_chat_answers_with_it_and_it_reverts(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    use_pipeline(monkeypatch, [0.3])  # Ambiguous under the app's upper threshold (0.55)
    store = store_of(files)
    labels = separable(30)
    store.import_labels(json.loads(json.dumps(labels_json(labels))))
    at = app()
    at.switch_page(EVALUATE).run()
    assert not at.exception, at.exception
    assert [m.label for m in at.metric][:3] == ["Rated answers", "👍 / 👎", "Verdicts right"]
    assert at.metric[0].value == "30"
    assert "Proposed: lower" in texts(at.markdown)
    moved = table(at, "would be")
    assert len(moved) == 20 and set(moved["would be"]) == {"Correct", "Incorrect"}

    at.button(key="apply").click().run()
    applied = store.applied([])
    assert applied is not None and applied.labels == 30
    assert "Applied to All documents" in texts(at.success)
    assert "fitted to your ratings" in texts(at.markdown), "the page says which thresholds answer now"

    at.switch_page("ui/chat_page.py").run()
    at = ask(at, "How many cores does the widget need?")
    trace = saved(files)[1].answer.trace
    assert trace is not None and trace.thresholds_from is ThresholdsFrom.FITTED
    assert trace.thresholds == (applied.thresholds.lower, applied.thresholds.upper)
    assert "fitted to your ratings" in texts(at.chat_message[1].expander[0].caption), "the expander says so"

    at.switch_page(EVALUATE).run()
    at.button(key="revert").click().run()
    assert store.applied([]) is None and "the app's thresholds answer again" in texts(at.success)


def test_re_run_asks_the_rated_questions_again_and_says_what_changed(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    use_pipeline(monkeypatch, [0.9])
    at = ask(app(), "How many cores does the widget need?")
    at.feedback[0].set_value(1).run()
    at.switch_page(EVALUATE).run()
    assert "still retrieved" in texts(at.success)
    at.button(key="rerun").click().run()
    rows = table(at, "verdict now")
    assert list(rows["status"]) == ["same"] and list(rows["verdict now"]) == ["Correct"]


def test_the_evaluate_page_says_what_to_do_before_any_rating(monkeypatch: pytest.MonkeyPatch, files: Path) -> None:
    use_pipeline(monkeypatch, [0.9])
    at = loaded(app().switch_page(EVALUATE).run())
    assert "No answer is rated yet" in texts(at.info)
