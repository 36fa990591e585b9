"""A build started while the app loads its models: both finish, in a process that has imported neither yet.

Two threads importing pydantic-ai for the first time at once met inside its circular imports, and Python gave each a
half-made module: the models failed to load and the build's thread died, its job "running" for good.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crag.config import load_settings
from crag.jobs import Builds
from tests.conftest import ROOT

# The page's loader and the job runner, started at once in a process that has imported neither pydantic-ai nor
# the parsers: what a user meets who clicks Rebuild as soon as the page shows.
RACE = """
import json, sys, time
from crag.config import load_settings
from crag.jobs import Builds
from ui.state import Loading

settings = load_settings(files_dir=sys.argv[1], chroma_dir=sys.argv[2], ollama_url=sys.argv[3], web_search=False)

def embedder_for(rebuild):
    from crag.retriever import index_embedder
    return index_embedder(settings, rebuild)

loading = Loading("key", settings)
builds = Builds(settings, embedder_for, lambda embedder: None)
loading.start()
job = builds.start(rebuild=False)
loading.done.wait(300)
deadline = time.monotonic() + 300
while builds.get(job.id).state == "running" and time.monotonic() < deadline:
    time.sleep(0.1)
end = builds.get(job.id)
print(json.dumps({"load_error": loading.error, "state": end.state, "error": end.error, "detail": end.detail}))
"""


@pytest.mark.integration
def test_a_build_started_while_the_models_load_finishes_and_so_do_the_models(
    tmp_path: Path, closed_port_url: str
) -> None:
    (tmp_path / "Files").mkdir()
    args = [str(tmp_path / "Files"), str(tmp_path / "chroma_db"), closed_port_url]
    run = subprocess.run(
        [sys.executable, "-c", RACE, *args], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert run.returncode == 0, run.stderr[-3000:]
    outcome = json.loads(run.stdout.strip().splitlines()[-1])
    assert outcome["load_error"] == "", outcome
    assert outcome["state"] == "done", outcome


def test_a_build_whose_code_cannot_be_imported_fails_its_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, closed_port_url: str
) -> None:
    """Never a job "running" for good: whatever stops the build's thread fails its job, with a message."""
    import crag

    monkeypatch.delattr(crag, "ingest", raising=False)
    monkeypatch.setitem(sys.modules, "crag.ingest", None)  # `from crag import ingest` raises ImportError
    settings = load_settings(files_dir=tmp_path / "Files", chroma_dir=tmp_path / "db", ollama_url=closed_port_url)
    builds = Builds(settings, lambda rebuild: None, lambda embedder: None)
    job = builds.start(rebuild=False)
    for _ in range(600):
        if builds.get(job.id).state != "running":
            break
        time.sleep(0.05)
    end = builds.get(job.id)
    assert end.state == "failed" and "crag.ingest" in end.detail and "previous knowledge base" in end.error, end
