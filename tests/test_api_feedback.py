"""Rating answers through the HTTP API: /ask returns an answer_id, POST /feedback rates it, rates it again or takes it
back; a
setting stops keeping answers; thresholds fitted to a scope answer its questions."""

from __future__ import annotations

from pathlib import Path

from crag.calibration import Thresholds
from crag.config import Settings
from crag.conversations import Conversations
from crag.types import ThresholdsFrom
from tests.apiclient import DOC, QUESTION, make_client, sse
from tests.fakes import chunk, pipeline


def chats(settings: Settings) -> Conversations:
    return Conversations(settings.chroma_dir / "conversations.sqlite3")


def test_an_answer_of_ask_is_rated_changed_and_unrated_by_its_id(settings: Settings) -> None:
    fake = pipeline(settings, [chunk(DOC)], [0.9], backend="embedded")
    with make_client(settings, fake) as client:
        history = [{"role": "user", "content": "What is the widget?"}, {"role": "assistant", "content": "A tool."}]
        answer_id = client.post("/ask", json={"question": QUESTION, "history": history}).json()["answer_id"]
        up = client.post("/feedback", json={"answer_id": answer_id, "rating": "up"})
        assert up.status_code == 200, up.text
        assert up.json() == {
            "answer_id": answer_id,
            "rating": "up",
            "wrong": [],
            "note": "",
            "question": QUESTION,
            "scope": [],
            "action": "correct",
            "verdict_right": True,
        }
        down = client.post(
            "/feedback", json={"answer_id": answer_id, "rating": "down", "wrong": ["badge"], "note": "page 3"}
        ).json()
        assert (down["rating"], down["wrong"], down["note"], down["verdict_right"]) == (
            "down",
            ["badge"],
            "page 3",
            False,
        )
        [label] = chats(settings).labels()
        assert label.answered.history == (("user", "What is the widget?"), ("assistant", "A tool."))
        assert label.answered.grades == (0.9,) and label.answered.cited[0].file == "manual.pdf"
        remove = {"answer_id": answer_id, "rating": None}
        assert client.post("/feedback", json=remove).json() == remove | {"removed": True}
        assert client.post("/feedback", json=remove).json() == remove | {"removed": False}
        assert chats(settings).labels() == []


def test_an_unknown_answer_or_rating_says_what_to_send(settings: Settings) -> None:
    with make_client(settings) as client:
        missing = client.post("/feedback", json={"answer_id": "f" * 32, "rating": "up"})
        assert missing.status_code == 404 and "answer_id that POST /ask returned" in missing.json()["error"]
        assert client.post("/feedback", json={"answer_id": "nope", "rating": None}).status_code == 404
        bad = client.post("/feedback", json={"answer_id": "x", "rating": "meh"})
        assert bad.status_code == 422 and "rating" in bad.json()["error"]
        wrong = client.post("/feedback", json={"answer_id": "x", "rating": "down", "wrong": ["colour"]})
        assert wrong.status_code == 422


def test_a_streamed_answer_ends_with_its_id(settings: Settings) -> None:
    with (
        make_client(settings) as client,
        client.stream("POST", "/ask", json={"question": QUESTION, "stream": True}) as r,
    ):
        events = sse(r.iter_lines())
        answer_id = events[-1][1]["answer_id"]
        assert events[-1][0] == "done" and answer_id
        assert client.post("/feedback", json={"answer_id": answer_id, "rating": "up"}).status_code == 200


def test_answers_are_not_kept_when_the_setting_is_off(settings: Settings) -> None:
    off = settings.model_copy(update={"api_store_answers": False})
    with make_client(off) as client:
        assert client.post("/ask", json={"question": QUESTION}).json()["answer_id"] is None
    assert not (settings.chroma_dir / "conversations.sqlite3").exists() or chats(settings).labels() == []


def test_thresholds_applied_to_a_scope_answer_its_questions(settings: Settings, tmp_path: Path) -> None:
    fake = pipeline(settings, [chunk(DOC)], [0.3], backend="embedded")  # Ambiguous under the settings' 0.55
    store = chats(settings)
    with make_client(settings, fake) as client:
        assert client.post("/ask", json={"question": QUESTION}).json()["action"] == "ambiguous"
        store.apply_thresholds([], Thresholds(-0.5, 0.25), Thresholds(-0.8, 0.55), 20, 0.9, 0.6)
        fitted = client.post("/ask", json={"question": QUESTION}).json()
        assert fitted["action"] == "correct"
        kept = next(m for c in _api_chats(store) for m in store.messages(c) if m.answer_id == fitted["answer_id"])
        assert kept.answer is not None and kept.answer.trace is not None
        assert kept.answer.trace.thresholds == (-0.5, 0.25)
        assert kept.answer.trace.thresholds_from is ThresholdsFrom.FITTED
        store.revert_thresholds([])
        assert client.post("/ask", json={"question": QUESTION}).json()["action"] == "ambiguous"


def _api_chats(store: Conversations) -> list[str]:
    import sqlite3

    with sqlite3.connect(store.path) as db:
        return [row[0] for row in db.execute("SELECT id FROM conversations WHERE origin = 'api'")]
