"""The README and docs/ stay true to the repository: links resolve, and the settings page matches crag/config.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from crag.config import Settings

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
CONFIGURATION = ROOT / "docs" / "configuration.md"

FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
ROW = re.compile(r"^\|\s*`(CRAG_[A-Z_]+)`\s*\|\s*([^|]+?)\s*\|", re.MULTILINE)


def prose(path: Path) -> str:
    """The Markdown outside code blocks and code spans, where a link is a link."""
    return CODE.sub("", FENCE.sub("", path.read_text(encoding="utf-8")))


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = anchor(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def relative_links(path: Path) -> list[str]:
    return [t for t in LINK.findall(prose(path)) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        file, _, fragment = target.partition("#")
        where = (page.parent / file).resolve() if file else page
        if not where.exists():
            broken.append(f"{target}: no such file")
        elif fragment and where.suffix == ".md" and fragment not in anchors(where):
            broken.append(f"{target}: no heading with this anchor")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_the_link_checker_sees_a_broken_link_and_a_broken_anchor(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## Passages (chunking)\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "See [it](other.md#passages-chunking), [gone](missing.md), [bad](other.md#nowhere), "
        "<https://example.org> and `[code](not-a-link.md)`.\n\n```\n[fenced](also-not.md)\n```\n",
        encoding="utf-8",
    )
    assert relative_links(page) == ["other.md#passages-chunking", "missing.md", "other.md#nowhere"]
    assert anchors(tmp_path / "other.md") == {"other-page", "passages-chunking"}


def test_the_readme_is_short_and_starts_with_the_two_commands() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move details into docs/"
    opening = "\n".join(lines[:40])
    assert "make run" in opening and "make test" in opening
    assert "docs/images/" in opening, "the screenshot shows near the top"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_each_page_opens_with_a_paragraph_that_says_what_it_covers(page: Path) -> None:
    blocks = [b.strip() for b in page.read_text(encoding="utf-8").split("\n\n") if b.strip()]
    assert blocks[0].startswith("# "), "a page starts with its title"
    assert re.match(r"[A-Z]", blocks[1]), f"{page.name}: the title is followed by a paragraph, not {blocks[1][:40]!r}"


def documented_defaults() -> dict[str, str]:
    return {name: default.strip("`") for name, default in ROW.findall(CONFIGURATION.read_text(encoding="utf-8"))}


def shown(default: object) -> str:
    """A setting's default as the settings page writes it."""
    if default is None:
        return "unset"
    if isinstance(default, bool):
        return "on" if default else "off"
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)


def test_every_setting_is_documented_with_its_default() -> None:
    documented = documented_defaults()
    expected = {f"CRAG_{name.upper()}": shown(field.default) for name, field in Settings.model_fields.items()}
    missing = sorted(set(expected) - set(documented))
    assert not missing, f"docs/configuration.md has no row for {missing}"
    wrong = {name: (documented[name], value) for name, value in expected.items() if documented[name] != value}
    assert not wrong, f"docs/configuration.md gives these defaults wrong (documented, actual): {wrong}"
    assert "OLLAMA_HOST" in CONFIGURATION.read_text(encoding="utf-8")


def test_every_setting_documented_exists() -> None:
    names = set(re.findall(r"\bCRAG_[A-Z][A-Z_]*[A-Z]\b", CONFIGURATION.read_text(encoding="utf-8")))
    unknown = sorted(names - {f"CRAG_{name.upper()}" for name in Settings.model_fields})
    assert not unknown, f"docs/configuration.md documents settings crag/config.py does not have: {unknown}"
