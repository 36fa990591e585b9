"""A scope at every edge, over real PDFs in folders (``scoped_kb`` in tests/conftest.py) and the real pipeline:
``python -m crag retrieve|ask --scope``, ``POST /ask`` and ``GET /scopes``, and ``/v1`` through the official
``openai`` client, where a ``crag-kb/<folder>`` model asks one knowledge base. MCP: tests/test_mcp_servers.py.

The command line runs in this process (``crag.cli.main``, what ``python -m crag`` calls), with the settings in the
environment as a user sets them: a subprocess would spend its seconds importing the embedder, not on scopes.
``python -m crag`` itself, as a subprocess, is tested in tests/test_cli.py."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest
from fastapi.testclient import TestClient

from crag.api import create_app
from crag.config import Settings
from crag.scope import Scope, UnknownScope, resolve
from crag.store import open_store
from tests.apiclient import sse
from tests.test_api_openai import serving_app

pytestmark = pytest.mark.integration

WIDGET = "How much memory does the widget need?"
ZORBLAX = "How much memory does the Zorblax need?"
PARTS = "部件需要多少内存？"
ALPHA = {"projects/alpha/zorblax.pdf"}
PROJECTS = {"projects/gadget.pdf", "projects/beta/sprocket.pdf", *ALPHA}
COURSES = {"courses/部件.pdf", "courses/齿轮.pdf"}
SCOPES = [  # a folder, a nested folder, a single file, the top level
    (["projects"], PROJECTS),
    (["projects/alpha"], ALPHA),
    (["courses/齿轮.pdf"], {"courses/齿轮.pdf"}),
    (["(top level)"], {"widget.pdf"}),
]


def unknown_message(kb: Settings, path: str) -> str:
    """What the core says of a scope the index does not hold: every edge says the same."""
    with pytest.raises(UnknownScope) as raised:
        resolve(Scope.of([path]), open_store(kb).manifest(), kb.files_dir)
    return str(raised.value)


def cli_env(kb: Settings) -> dict[str, str]:
    return {
        "CRAG_FILES_DIR": str(kb.files_dir),
        "CRAG_CHROMA_DIR": str(kb.chroma_dir),
        "CRAG_EMBED_BACKEND": "local",
        "CRAG_LLM_BACKEND": "embedded",
        "CRAG_WEB_SEARCH": "off",
        "CRAG_OLLAMA_URL": kb.ollama_url,
    }


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    """``python -m crag *args`` in this process: its exit status, stdout and stderr."""
    from crag import cli

    def run(*args: str, env: dict[str, str], cwd: Path | None = None) -> Run:
        with monkeypatch.context() as m:
            for name, value in env.items():
                m.setenv(name, value)
            if cwd is not None:
                m.chdir(cwd)
            capsys.readouterr()
            code = cli.main(list(args))
            out, err = capsys.readouterr()
        return Run(code, out, err)

    return run


# ---------------------------------------------------------------------------------------------
# The command line


def test_cli_retrieve_takes_scopes(scoped_kb: Settings, run_cli: Callable[..., Run]) -> None:
    env = cli_env(scoped_kb)
    proc = run_cli("retrieve", WIDGET, "-k", "4", "--scope", "projects/alpha", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["scope"] == ["projects/alpha"] and len(out["results"]) == 2
    assert {r["file"] for r in out["results"]} == ALPHA

    many = ["--scope", "widget.pdf", "--scope", "courses/齿轮.pdf"]
    proc = run_cli("retrieve", PARTS, "-k", "4", *many, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert {r["file"] for r in json.loads(proc.stdout)["results"]} <= {"widget.pdf", "courses/齿轮.pdf"}

    # As a shell completes a path from the folder above the files folder.
    proc = run_cli(
        "retrieve", WIDGET, "--scope", "Files/projects/beta", "--json", env=env, cwd=scoped_kb.files_dir.parent
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["scope"] == ["projects/beta"] and {r["file"] for r in out["results"]} == {"projects/beta/sprocket.pdf"}


def test_cli_unknown_scope_exits_2_with_the_knowledge_bases(scoped_kb: Settings, run_cli: Callable[..., Run]) -> None:
    expected = unknown_message(scoped_kb, "projects/gamma")
    assert "`projects/alpha` (1 file)" in expected and "`courses` (2 files)" in expected
    for command in ("retrieve", "ask"):
        proc = run_cli(command, WIDGET, "--scope", "projects/gamma", env=cli_env(scoped_kb))
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.strip().splitlines()[-1] == f"error: {expected}"


def test_cli_ask_in_a_scope_names_it(scoped_kb: Settings, run_cli: Callable[..., Run]) -> None:
    env = cli_env(scoped_kb)
    proc = run_cli("ask", ZORBLAX, "--scope", "projects/beta", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["scope"] == ["projects/beta"] and out["action"] == "incorrect"
    assert out["answer"].startswith("The documents in `projects/beta` never mention “Zorblax”.")
    assert {s["file"] for s in out["sources"]} == {"projects/beta/sprocket.pdf"}

    proc = run_cli("ask", ZORBLAX, "--scope", "projects/alpha", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "[correct in projects/alpha] [1] projects/alpha/zorblax.pdf" in proc.stderr


# ---------------------------------------------------------------------------------------------
# The HTTP API


@pytest.fixture(scope="module")
def client(scoped_kb: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(scoped_kb), base_url="http://127.0.0.1") as c:
        yield c


@pytest.mark.parametrize(("scope", "expected"), SCOPES)
def test_ask_answers_from_the_scope_only(client: TestClient, scope: list[str], expected: set[str]) -> None:
    question = PARTS if scope[0].startswith("courses") else WIDGET
    out = client.post("/ask", json={"question": question, "scope": scope}).json()
    assert out["scope"] == scope and out["scores"] and out["sources"]
    assert {s["file"] for s in out["scores"]} <= expected and {s["file"] for s in out["sources"]} <= expected


def test_ask_streamed_in_a_scope(client: TestClient) -> None:
    body = {"question": ZORBLAX, "scope": ["projects/beta"], "stream": True}
    with client.stream("POST", "/ask", json=body) as response:
        events = sse(response.iter_lines())
    kind, done = events[-1]
    assert kind == "done" and done["scope"] == ["projects/beta"]
    assert done["answer"].startswith("The documents in `projects/beta` never mention “Zorblax”.")


def test_an_unknown_scope_is_a_400_with_the_message_of_the_cli(client: TestClient, scoped_kb: Settings) -> None:
    for stream in (False, True):
        response = client.post("/ask", json={"question": WIDGET, "scope": ["projects/gamma"], "stream": stream})
        assert response.status_code == 400
        assert response.json() == {"error": unknown_message(scoped_kb, "projects/gamma")}
    pending = client.post("/ask", json={"question": WIDGET, "scope": ["pending"]})
    assert (
        pending.status_code == 400 and "“pending” is in the files folder but not indexed yet" in pending.json()["error"]
    )


def test_scopes_lists_the_folders_with_their_counts(client: TestClient) -> None:
    out = client.get("/scopes").json()
    assert out["generation"]
    counts = {s["name"]: s["files"] for s in out["scopes"]}
    assert counts == {"(top level)": 1, "courses": 2, "projects": 3, "projects/alpha": 1, "projects/beta": 1}
    assert all(s["chunks"] > 0 and s["other"] == 0 for s in out["scopes"])


# ---------------------------------------------------------------------------------------------
# /v1, with the official openai client


def test_a_model_per_folder_asks_that_folder(scoped_kb: Settings) -> None:
    with serving_app(create_app(scoped_kb)) as url, openai.OpenAI(base_url=url, api_key="unused", timeout=120) as ai:
        ids = [m.id for m in ai.models.list()]
        assert ids[:2] == ["crag-kb", "crag-kb-noweb"]
        assert {"crag-kb/projects/alpha", "crag-kb-noweb/projects/alpha", "crag-kb/(top level)"} <= set(ids)
        assert len(ids) == 2 + 2 * 5
        assert ai.models.retrieve("crag-kb/projects/alpha").id == "crag-kb/projects/alpha"

        messages = [{"role": "user", "content": WIDGET}]
        completion = ai.chat.completions.create(model="crag-kb-noweb/projects/alpha", messages=messages)
        message = completion.choices[0].message
        assert {c["file"] for c in message.model_extra["citations"]} == ALPHA
        trace = completion.model_extra["crag"]
        assert trace["scope"] == ["projects/alpha"] and {s["file"] for s in trace["scores"]} == ALPHA

        chunks = [
            c
            for c in ai.chat.completions.create(
                model="crag-kb/(top level)", messages=[{"role": "user", "content": ZORBLAX}], stream=True
            )
            if c.choices
        ]
        last = chunks[-1]
        assert last.model_extra["crag"]["scope"] == ["(top level)"]
        assert {s["file"] for s in last.model_extra["crag"]["scores"]} == {"widget.pdf"}
        assert {c["file"] for c in last.choices[0].delta.model_extra["citations"]} <= {"widget.pdf"}

        folder = ai.chat.completions.create(model="crag-kb/projects", messages=messages)
        assert {s["file"] for s in folder.model_extra["crag"]["scores"]} <= PROJECTS
        assert {c["file"] for c in folder.choices[0].message.model_extra["citations"]} <= PROJECTS

        with pytest.raises(openai.NotFoundError) as missing:
            ai.chat.completions.create(model="crag-kb/projects/gamma", messages=messages)
        assert unknown_message(scoped_kb, "projects/gamma") in missing.value.message
