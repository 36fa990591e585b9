"""`python -m crag evaluate`, in process: the ratings of each knowledge base judged, the fit proposed, applied and
reverted; nothing rated says what to do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crag.cli import main
from crag.conversations import Conversations
from crag.feedback import Rating, labels_json
from tests.test_feedback import label, separable


@pytest.fixture
def rated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, closed_port_url: str) -> Conversations:
    monkeypatch.setenv("CRAG_FILES_DIR", str(tmp_path / "Files"))
    monkeypatch.setenv("CRAG_OLLAMA_URL", closed_port_url)
    monkeypatch.setenv("CRAG_EMBED_BACKEND", "local")
    store = Conversations(tmp_path / "db" / "conversations.sqlite3")
    store.import_labels(labels_json(separable(30)))
    store.import_labels(labels_json([label(100 + i, 0.7, Rating.UP, scope=("notes",)) for i in range(3)]))
    return store


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["evaluate", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_every_rated_knowledge_base_is_judged_and_its_fit_proposed(
    rated: Conversations, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "--db", str(tmp_path / "db"), "--json")
    assert code == 0
    scopes = {tuple(s["scope"]): s for s in json.loads(out)["scopes"]}
    everything, notes = scopes[()], scopes[("notes",)]
    assert (everything["ratings"], everything["up"]) == (30, 20)
    assert everything["fit"]["verdict"] == "proposed" and len(everything["fit"]["moved"]) == 20
    assert everything["fit"]["held_out_accuracy"] > everything["fit"]["current_accuracy"]
    assert everything["thresholds"] == {"lower": -0.8, "upper": 0.55, "from": "settings"}
    assert everything["lost"] is None, "nothing is indexed: no passage to look for"
    assert (notes["fit"]["verdict"], notes["fit"]["needed"]) == ("too_few", 17)

    code, out, _ = run(capsys, "--db", str(tmp_path / "db"), "--scope", "notes")
    assert code == 0 and "17 more rated answers needed" in out


def test_a_fit_is_applied_and_reverted_from_the_command_line(
    rated: Conversations, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "db")
    code, out, _ = run(capsys, "--db", db, "--scope", "notes", "--apply")
    assert code == 0 and rated.applied(["notes"]) is None, "too few ratings: nothing applied"
    everything = [s for s in json.loads(run(capsys, "--db", db, "--apply", "--json")[1])["scopes"] if not s["scope"]][0]
    applied = rated.applied([])
    assert everything["applied"] and applied is not None
    assert everything["thresholds"]["from"] == "fitted"
    assert (everything["thresholds"]["lower"], everything["thresholds"]["upper"]) == (
        applied.thresholds.lower,
        applied.thresholds.upper,
    )
    code, out, _ = run(capsys, "--db", db, "--revert")
    assert code == 0 and rated.applied([]) is None and "taken back" in out


def test_nothing_rated_says_how_to_rate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--db", str(tmp_path / "db"))
    assert code == 0 and out == "" and "thumbs under them (or POST /feedback)" in err
