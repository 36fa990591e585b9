"""`python -m crag ask` as a user runs it: a subprocess, the real embedded model, no Ollama."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str, env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_") and k != "OLLAMA_HOST"}
    full_env |= {"PYTHONPATH": str(ROOT)} | env
    return subprocess.run(
        [sys.executable, "-m", "crag", *args], capture_output=True, text=True, env=full_env, timeout=300, cwd=cwd
    )


@pytest.mark.integration
@pytest.mark.slow
def test_ask_json_answers_from_the_embedded_model(closed_port_url: str) -> None:
    proc = run_cli("ask", "What is 2+2?", "--json", env={"CRAG_OLLAMA_URL": closed_port_url})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["backend"] == "embedded"
    assert closed_port_url in out["backend_reason"]
    # No knowledge base and no web: the answer says so instead of inventing, without a model call.
    assert out["answer"].startswith("Your knowledge base has nothing indexed yet: build it")
    assert "Web search is unavailable: offline" in out["answer"]
    assert out["hint"] == "Build the knowledge base: `python -m crag index`.", "what to do, in the command line's words"
    assert out["action"] == "incorrect" and out["sources"] == [] and out["llm_calls"] == 0
    assert out["kind"] == "no_answer"


@pytest.mark.integration
@pytest.mark.slow
def test_ask_json_contract_with_a_knowledge_base(tmp_path: Path, closed_port_url: str) -> None:
    from tests.pdfs import manual_pdf

    files, db = tmp_path / "Files", tmp_path / "db"
    files.mkdir()
    manual_pdf(files / "widget.pdf")
    assert run_cli("index", "--files", str(files), "--db", str(db), "--json", env={}).returncode == 0
    env = {"CRAG_OLLAMA_URL": closed_port_url}
    proc = run_cli("ask", "How much memory does the widget need?", "--db", str(db), "--no-web", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert {
        "answer",
        "action",
        "backend",
        "scores",
        "refined_context",
        "sources",
        "web_query",
        "llm_calls",
        "timings",
    } <= set(out)
    assert out["action"] in ("correct", "ambiguous") and out["backend"] == "embedded"
    assert out["scores"][0]["file"] == "widget.pdf" and -1 <= out["scores"][0]["score"] <= 1
    assert out["sources"][0] | {"snippet": ""} == {
        "n": 1,
        "kind": "local",
        "cited": True,
        "file": "widget.pdf",
        "pages": out["sources"][0]["pages"],
        "url": None,
        "title": None,
        # The headings above the passage: the two chapters say the same but for their number, so either may come first.
        "section": "{0} Chapter {0}: widget".format(*out["sources"][0]["pages"]),
        "snippet": "",
    }
    assert "eight hundred megabytes" in out["refined_context"] and "eight hundred megabytes" in out["answer"]
    assert out["kind"] == "evidence" and out["cited"] == [s["n"] for s in out["sources"]]
    assert out["web_query"] is None and out["llm_calls"] == 0
    assert {"retrieve", "grade", "generate", "first_token", "total"} <= set(out["timings"])


def test_ollama_backend_that_is_down_exits_with_one_line(closed_port_url: str) -> None:
    proc = run_cli(
        "ask", "What is 2+2?", "--json", env={"CRAG_OLLAMA_URL": closed_port_url, "CRAG_LLM_BACKEND": "ollama"}
    )
    assert proc.returncode != 0
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert closed_port_url in lines[0] and "ollama serve" in lines[0]


def test_invalid_setting_exits_with_one_line() -> None:
    proc = run_cli("ask", "hi", env={"CRAG_TOP_K": "many"})
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "CRAG_TOP_K" in proc.stderr


@pytest.mark.integration
@pytest.mark.slow
def test_index_and_retrieve_json_contract(tmp_path: Path) -> None:
    from tests.pdfs import manual_pdf

    files, db = tmp_path / "Files", tmp_path / "db"
    files.mkdir()
    manual_pdf(files / "widget.pdf")
    (files / "broken.pdf").write_bytes(b"")
    proc = run_cli("index", "--files", str(files), "--db", str(db), "--parser", "pymupdf", "--json", env={})
    assert proc.returncode == 0, proc.stderr  # usable index, even though one file failed
    out = json.loads(proc.stdout)
    assert set(out) == {"files", "total_chunks", "pages_per_second"}
    by_file = {f["file"]: f for f in out["files"]}
    assert set(by_file["widget.pdf"]) == {"file", "status", "pages", "chunks", "seconds", "error"}
    assert by_file["widget.pdf"]["status"] == "indexed" and by_file["widget.pdf"]["pages"] == 2
    assert by_file["broken.pdf"]["status"] == "failed" and "empty" in by_file["broken.pdf"]["error"]
    assert out["total_chunks"] == by_file["widget.pdf"]["chunks"] > 0

    proc = run_cli("retrieve", "How much memory is needed?", "-k", "2", "--db", str(db), "--json", env={})
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)["results"]
    assert 1 <= len(results) <= 2
    assert set(results[0]) == {"file", "pages", "section", "text", "score"}
    assert results[0]["file"] == "widget.pdf" and all(isinstance(p, int) for p in results[0]["pages"])


@pytest.mark.reliability
def test_index_while_another_build_runs_is_refused(tmp_path: Path) -> None:
    from crag.store import Store

    with Store(tmp_path / "db").build_lock():
        proc = run_cli("index", "--files", str(tmp_path), "--db", str(tmp_path / "db"), "--json", env={})
    assert proc.returncode == 2
    assert "already running" in proc.stderr


# ---------------------------------------------------------------------------------------------
# `python -m crag serve`


def test_serve_binds_loopback_by_default_and_warns_otherwise(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    import uvicorn

    from crag import cli

    runs = []
    monkeypatch.setattr(uvicorn, "run", lambda app, host, port, **kw: runs.append((app, host, port, kw["factory"])))
    assert cli.main(["serve"]) == 0
    assert runs == [("crag.api:app_from_environment", "127.0.0.1", 8000, True)]
    assert "warning" not in capsys.readouterr().err
    assert cli.main(["serve", "--host", "0.0.0.0", "--port", "9000"]) == 0
    err = capsys.readouterr().err
    assert runs[-1][1:3] == ("0.0.0.0", 9000) and "warning: 0.0.0.0 is not a loopback address" in err
    assert "CRAG_API_TOKEN is NOT set" in err


@pytest.mark.parametrize(
    ("host", "loopback"), [("127.0.0.1", True), ("localhost", True), ("::1", True), ("0.0.0.0", False), ("x", False)]
)
def test_is_loopback(host: str, loopback: bool) -> None:
    from crag.config import is_loopback

    assert is_loopback(host) is loopback
