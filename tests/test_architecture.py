"""The structure's promises, checked on the source: one-way imports, small files, one home per heavy library."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "crag"
# Heavy integrations live in one module each, so each is swapped or upgraded in one place; plumbing libraries
# (httpx, tenacity, filelock) may be used anywhere.
HEAVY = ("chromadb", "ddgs", "mineru_vl_utils", "llama_cpp", "bm25s")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside a function."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


SOURCES = sorted(CORE.rglob("*.py"))
MODULES = {module_name(p): p for p in SOURCES}


def graph() -> dict[str, set[str]]:
    """crag module -> the crag modules it imports (a package import counts as its __init__)."""
    return {name: {m for m in imports(path) if m in MODULES and m != name} for name, path in MODULES.items()}


def test_no_import_cycle_in_the_core() -> None:
    edges = graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                # A package's __init__ re-exporting its own submodules is the package, not a cycle.
                cycle = path[path.index(nxt) :] + [nxt]
                if not all(m.startswith(cycle[0] + ".") or m == cycle[0] for m in cycle):
                    cycles.append(cycle)
            elif state.get(nxt) is None:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for name in sorted(edges):
        if state.get(name) is None:
            visit(name, [name])
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("library", HEAVY)
def test_each_heavy_library_has_one_home(library: str) -> None:
    users = sorted(
        name
        for name, path in MODULES.items()
        if any(m == library or m.startswith(library + ".") for m in imports(path))
    )
    assert len(users) == 1, f"{library} is imported by {users}"


def test_the_core_never_imports_streamlit() -> None:
    assert [n for n, p in MODULES.items() if any(m.split(".")[0] == "streamlit" for m in imports(p))] == []


def test_no_source_file_is_over_450_lines() -> None:
    files = [*SOURCES, *(ROOT / "ui").glob("*.py"), *(ROOT / "tests").glob("*.py"), *(ROOT / "scripts").glob("*.py")]
    long = {str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text(encoding="utf-8").splitlines())) > 450}
    assert long == {}


def test_edges_import_the_core_never_each_other() -> None:
    """The CLI, the HTTP API and the UI each stand on the core."""
    edges = graph()
    assert "crag.api" not in {m.rsplit(".", 1)[0] for m in edges["crag.cli"]} | edges["crag.cli"]
    assert not any(m == "crag.cli" for m in edges.get("crag.api", set()))
