"""The tuning object: one frozen instance, every field said what it does and where its value came from, a leaf."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from crag.tuning import TUNING, Tuning

SOURCE = Path(__file__).resolve().parent.parent / "crag" / "tuning.py"


def test_tuning_is_frozen_and_one_instance() -> None:
    assert Tuning() == TUNING
    with pytest.raises(dataclasses.FrozenInstanceError):
        TUNING.evidence.margin = 1.0  # type: ignore[misc]


def test_every_field_is_documented_with_where_it_came_from() -> None:
    tree = ast.parse(SOURCE.read_text(encoding="utf-8"))
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name != "Tuning"):
        body = cls.body
        for i, node in enumerate(body):
            if isinstance(node, ast.AnnAssign):
                doc = body[i + 1] if i + 1 < len(body) else None
                assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant), f"{cls.name}: undocumented"
                text = " ".join(str(doc.value.value).split())
                assert "hand-set" in text.lower() or "split" in text, f"{cls.name}.{node.target.id}: no provenance"  # type: ignore[attr-defined]


def test_tuning_imports_nothing_from_crag() -> None:
    tree = ast.parse(SOURCE.read_text(encoding="utf-8"))
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)] + [
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    ]
    assert not [m for m in imported if m and m.startswith("crag")]
