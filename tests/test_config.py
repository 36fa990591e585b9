from __future__ import annotations

from pathlib import Path

import pytest

from crag.config import load_settings, normalize_ollama_url
from crag.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent


def test_defaults() -> None:
    s = load_settings()
    assert s.files_dir == Path("Files")
    assert s.chroma_dir == Path("chroma_db")
    assert (s.llm_backend, s.embed_backend, s.parser) == ("auto", "auto", "auto")
    assert s.ollama_url == "http://127.0.0.1:11434"
    assert (s.chat_model, s.embed_model) == ("qwen3:4b", "bge-m3")
    assert s.web_search is True


def test_env_prefix_and_fixed_names(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CRAG_FILES_DIR", str(tmp_path / "pdfs"))
    monkeypatch.setenv("CRAG_CHROMA_DIR", str(tmp_path / "db"))
    monkeypatch.setenv("CRAG_LLM_BACKEND", "embedded")
    monkeypatch.setenv("CRAG_EMBED_BACKEND", "local")
    monkeypatch.setenv("CRAG_CHAT_MODEL", "qwen3:8b")
    monkeypatch.setenv("CRAG_EMBED_MODEL", "nomic-embed-text")
    monkeypatch.setenv("CRAG_PARSER", "pymupdf")
    monkeypatch.setenv("CRAG_WEB_SEARCH", "off")
    monkeypatch.setenv("CRAG_TOP_K", "8")
    s = load_settings()
    assert s.files_dir == tmp_path / "pdfs" and s.chroma_dir == tmp_path / "db"
    assert (s.llm_backend, s.embed_backend, s.parser) == ("embedded", "local", "pymupdf")
    assert (s.chat_model, s.embed_model, s.top_k) == ("qwen3:8b", "nomic-embed-text", 8)
    assert s.web_search is False


def test_dotenv_is_read(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("CRAG_WEB_SEARCH=off\nCRAG_TOP_K=3\n")
    s = load_settings()  # the autouse fixture made tmp_path the working directory
    assert s.web_search is False and s.top_k == 3


def test_ollama_host_is_honoured_unless_crag_url_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "0.0.0.0:12345")
    assert load_settings().ollama_url == "http://127.0.0.1:12345"
    monkeypatch.setenv("CRAG_OLLAMA_URL", "http://gpu-box:11434/")
    assert load_settings().ollama_url == "http://gpu-box:11434"


@pytest.mark.parametrize(
    ("raw", "url"),
    [
        ("localhost", "http://localhost:11434"),
        ("https://ollama.example", "https://ollama.example:443"),
        ("http://[::1]:9000", "http://[::1]:9000"),
        ("", "http://127.0.0.1:11434"),
    ],
)
def test_normalize_ollama_url(raw: str, url: str) -> None:
    assert normalize_ollama_url(raw) == url


def test_invalid_values_name_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAG_LLM_BACKEND", "gpt5")
    with pytest.raises(ConfigError, match="CRAG_LLM_BACKEND"):
        load_settings()


def test_thresholds_must_be_ordered() -> None:
    with pytest.raises(ConfigError, match="lower_threshold"):
        load_settings(upper_threshold=0.1, lower_threshold=0.5)


def test_streamlit_config_serves_on_loopback_without_a_file_watcher_or_forced_gc() -> None:
    """`make run` reads .streamlit/config.toml. A file watcher there watches the whole checkout (.venv, .git,
    chroma_db) and, once a build overflowed the inotify queue, its rescans kept a core busy; a full garbage
    collection after each run of the build's progress fragment (every second) took the GIL from the build."""
    import tomllib

    config = tomllib.loads((ROOT / ".streamlit/config.toml").read_text(encoding="utf-8"))
    assert config["server"]["address"] == "127.0.0.1"
    assert config["server"]["fileWatcherType"] == "none"
    assert config["runner"]["postScriptGC"] is False
