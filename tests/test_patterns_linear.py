"""Every regular expression of crag and ui finishes on text written to make it backtrack.

One pattern, ``(?:\\W*\\w+){1,8}\\W*$``, split a long run of letters (a Chinese clause is one) into words in more ways
than could be tried: an offline answer over an ordinary Chinese sentence took minutes. This walks every module of
both packages, collects each compiled pattern it holds (also inside tuples, lists, dicts, dataclass instances and
classes), and runs ``search`` of each over long adversarial texts in a child process. A hang is a failure; the
limit is generous and is no speed assertion.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re
import string
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path

HANG = 60  # seconds for every pattern over every text; linear rules take a few
ROOT = Path(__file__).resolve().parent.parent
# crag.bench runs on demand with its own heavy imports; a __main__ runs a command when imported.
SKIPPED = ("crag.bench",)

ISSUE_ZH = (
    "本软件包管理器自2023年起支持在所有主流操作系统上自动安装和更新依赖项以及配置文件，"
    "包括Linux、macOS、Windows、FreeBSD、OpenBSD、Solaris、AIX和HP-UX等平台。"
)
NAME = "abcdefghijklmnopqrstuvwxyz" * 2 + "abcdefgh"  # 60 letters
ISSUE_EN = (
    f"Since version 2 the installer downloads https://example.org/packages/{NAME}/archive.tar.gz and then unpacks it."
)
SIZE = 20_000
# A Chinese clause of 200 characters with a date and a version in it, then a list of a dozen names.
CLAUSE = ("软件包管理器自2023年3月起第2版在所有系统上自动安装依赖项" * 8)[:200] + "，包括" + "、".join(["Linux"] * 12)


def adversarial() -> dict[str, str]:
    """Texts that make a backtracking pattern retry: long runs of one class of characters, and runs of two classes
    that alternate, with the issue's two sentences."""
    n = SIZE
    return {
        "letters": "a" * n,
        "digits": "1" * n,
        "chinese sentence, repeated": (ISSUE_ZH * (n // len(ISSUE_ZH) + 1))[:n],
        "chinese clause with dates and numbers": (CLAUSE * (n // len(CLAUSE) + 1))[:n],
        "the issue's sentences": f"{ISSUE_ZH} {ISSUE_EN}",
        "spaces": " " * n,
        "punctuation": (string.punctuation * n)[:n],
        "chinese punctuation": ("，。？“”、：" * n)[:n],
        "words": "a " * (n // 2),
        "hyphens": "-" * n,
        "dotted": "a." * (n // 2),
        "dots": "." * n,  # a form's blank, a contents page's leaders
        "spaced dots": ". " * (n // 2),
        "dotted digits": "1." * (n // 2),
        "name characters": "a-b_c.d/" * (n // 8),
        "camel case": "Ab" * (n // 2),
        "an address without an end": "https://" + "a" * n,
        "at signs": "a@" * (n // 2),
        "lines": "a\n" * (n // 2),
        "questions and quotes": "a? “" * (n // 4),
        "tags": "<source" * (n // 7),
        "pipes and rules": "| - " * (n // 4),
        "brackets": "[" * n,
        "backslashes": "\\" * n,
    }


def module_names() -> Iterator[str]:
    import crag
    import ui

    for package in (crag, ui):
        yield package.__name__
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not info.name.startswith(SKIPPED) and not info.name.endswith("__main__"):
                yield info.name


def patterns_in(value: object, where: str, seen: set[int], depth: int = 0) -> Iterator[tuple[str, re.Pattern[str]]]:
    if id(value) in seen or depth > 5:
        return
    seen.add(id(value))
    if isinstance(value, re.Pattern):
        yield where, value
    elif isinstance(value, tuple | list | set | frozenset):
        for i, item in enumerate(value):
            yield from patterns_in(item, f"{where}[{i}]", seen, depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from patterns_in(item, f"{where}[{key!r}]", seen, depth + 1)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from patterns_in(getattr(value, field.name, None), f"{where}.{field.name}", seen, depth + 1)


def collect() -> dict[tuple[object, int], str]:
    """Every distinct compiled pattern a module of crag or ui holds at its top level, by where it was found."""
    found: dict[tuple[object, int], str] = {}
    for name in module_names():
        module = importlib.import_module(name)
        seen: set[int] = set()
        for attr, value in vars(module).items():
            if isinstance(value, types.ModuleType):
                continue
            if isinstance(value, type) and value.__module__ == name:  # a class's own attributes
                items = [(f"{name}.{attr}.{key}", item) for key, item in vars(value).items()]
            else:
                items = [(f"{name}.{attr}", value)]
            for where, item in items:
                for place, pattern in patterns_in(item, where, seen):
                    found.setdefault((pattern.pattern, pattern.flags), place)
    return found


def probe() -> None:
    """Run in the child: each pattern is named before it runs, so the one that hangs is the last line printed."""
    texts = adversarial()
    found = collect()
    for (source, _), where in found.items():
        if not isinstance(source, str):
            continue
        pattern = re.compile(source, _)
        for label, text in texts.items():
            print(f"{where} over {label}", flush=True)
            pattern.search(text)
    print(f"done: {len(found)} patterns", flush=True)


def test_every_pattern_finishes_on_adversarial_text() -> None:
    try:
        run = subprocess.run(
            [sys.executable, "-c", "from tests.test_patterns_linear import probe; probe()"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=HANG,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        last = out.strip().splitlines()[-1:] or ["(before the first pattern)"]
        raise AssertionError(f"a pattern did not finish in {HANG} s: {last[0]}") from None
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.strip().splitlines()
    assert lines[-1].startswith("done:"), run.stdout[-2000:]
    count = int(lines[-1].split()[1])
    assert count > 50, "the walk found too few patterns: a module failed to import or moved its patterns"


def test_the_walk_finds_patterns_inside_data_and_the_rules_of_each_package() -> None:
    """The walk reaches patterns held in a tuple of dataclasses (the asides) and in every package's text rules."""
    found = set(collect().values())
    assert {"crag.evidence.ASIDES[2].found", "crag.evidence.LINE", "crag.terms._NAME_RUN", "ui.text.HOST"} <= found
    assert any(where.startswith("crag.injection.") for where in found)


def test_the_walk_finds_the_patterns_built_from_word_lists() -> None:
    """Patterns built from crag/lexicons when their module is imported are module-level patterns like the others."""
    found = set(collect().values())
    assert {
        "crag.asks._SPLIT",
        "crag.followups._ELLIPTICAL",
        "crag.overview._ABOUT_EN",
        "crag.evidence.ASIDES[0].found",
    } <= found
