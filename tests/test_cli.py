"""`python -m crag ask` as a user runs it: a subprocess, the real embedded model, no Ollama."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_") and k != "OLLAMA_HOST"}
    full_env |= {"PYTHONPATH": str(ROOT)} | env
    return subprocess.run(
        [sys.executable, "-m", "crag", *args], capture_output=True, text=True, env=full_env, timeout=300
    )


@pytest.mark.integration
def test_ask_json_answers_from_the_embedded_model(closed_port_url: str) -> None:
    proc = run_cli("ask", "What is 2+2?", "--json", env={"CRAG_OLLAMA_URL": closed_port_url})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["backend"] == "embedded"
    assert out["answer"].strip()
    assert closed_port_url in out["backend_reason"]
    assert out["llm_calls"] == 1


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
