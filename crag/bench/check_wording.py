"""Check the wording sets against their PDFs and print what they hold.

    python -m crag.bench.check_wording

``paraphrase.jsonl`` asks about the test and holdout documents in words ("gaps") that the asked document never
uses in any form; ``first.jsonl`` holds a newcomer's first questions, each answered by a command or a function.
Both are out of sample. Their twins ``paraphrase-dev.jsonl`` and ``first-dev.jsonl`` ask the same kinds of question
of the dev documents, where tuning may look. Fetches the documents the sets ask about and checks, with the text
PyMuPDF extracts (``page.get_text()``):

- every line has the fields of the main question set, plus ``gap`` and ``gap_kind`` (required in the paraphrase
  sets, optional in the first questions); ids are unique and read ``p-en-01`` / ``f-zh-01`` (``pd-`` / ``fd-`` in
  the dev twins);
- each question is answerable: in-KB, in its document's language, its ``split`` the set's name, pages in range,
  and each ``must_contain`` string on a listed page (normalised as ``check_questions`` does);
- each gap is written in the question, and its document never uses it in any form (``gap_hits``);
- the counts each set promises (``PROMISES``).

Prints counts per set, language and gap kind, and exits 1 when anything is wrong.
"""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import Stemmer

from crag.bench.check_questions import KEYS, LANGS, norm, page_texts, report, squash
from crag.bench.corpus import CORPUS, default_cache_dir, fetch_corpus

HERE = Path(__file__).parent
SETS = {name: HERE / f"{name}.jsonl" for name in ("paraphrase", "first", "paraphrase-dev", "first-dev")}
PREFIX = {"paraphrase": "p", "first": "f", "paraphrase-dev": "pd", "first-dev": "fd"}
# The out-of-sample sets ask about the documents the product was never tuned on, and a first question may also ask
# a newcomer's manual that only that set uses; their dev twins ask about the dev documents, where tuning may look.
DOC_SPLITS = {
    "paraphrase": ("test", "holdout"),
    "first": ("test", "holdout", "first"),
    "paraphrase-dev": ("dev",),
    "first-dev": ("dev",),
}
GAP_KINDS = ("derived", "number", "abbreviation", "compound", "everyday", "segmentation")
OPTIONAL = ("gap", "gap_kind")


@dataclass(frozen=True)
class Promise:
    """What a set must hold at least. A set with ``per_gap_kind`` is a paraphrase set: every line has a gap, and
    about half of its questions are Chinese."""

    questions: int = 0
    per_gap_kind: int = 0
    per_lang: int = 0


PROMISES = {
    "paraphrase": Promise(questions=40, per_gap_kind=4),
    "first": Promise(per_lang=10),
    "paraphrase-dev": Promise(questions=30, per_gap_kind=3),
    "first-dev": Promise(per_lang=8),
}
PARAPHRASE_ZH_SHARE = (0.35, 0.65)  # "about half Chinese"

_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True)
class Document:
    """A document's whole extracted text, in the forms a gap is looked for in."""

    text: str
    lang: str

    @cached_property
    def squashed(self) -> str:
        return squash(self.text)

    @cached_property
    def spaceless(self) -> str:
        return norm(self.text, "zh")

    @cached_property
    def stems(self) -> set[str]:
        return set(_stem(_WORD.findall(unicodedata.normalize("NFKC", self.text).lower())))


def _stem(words: list[str]) -> list[str]:
    return Stemmer.Stemmer("english").stemWords(words)


def gap_hits(gap: str, doc: Document) -> str | None:
    """How ``doc`` uses ``gap`` in some form, or None when it never does.

    An English word is used when a word of the document has its Snowball stem, or when its letters and digits occur
    anywhere in the document's letters and digits (inside a longer word too); a phrase (anything with a space, a
    slash, a hyphen...) when its letters and digits occur so. A gap with Chinese characters is looked for in the
    text with all whitespace removed; a Latin gap in a Chinese document ("VM") is an English word or phrase.
    """
    if doc.lang == "zh" and re.search(r"[^\x00-\x7f]", gap):
        target = norm(gap, "zh")
        return f"{target!r} is in the text" if target in doc.spaceless else None
    target = squash(gap)
    if not target:
        return "the gap has no letters or digits"
    words = _WORD.findall(unicodedata.normalize("NFKC", gap).lower())
    if len(words) == 1:
        stem = _stem(words)[0]
        if stem in doc.stems:
            return f"a word with the stem {stem!r} is in the text"
    return f"{target!r} is in the text's letters and digits" if target in doc.squashed else None


def check_rows(name: str, rows: list[dict], texts: dict[str, list[str]]) -> list[str]:
    """Every problem of one set, one line each; an empty list means the set is sound."""
    problems: list[str] = []
    seen = Counter(str(r.get("id")) for r in rows)
    problems += [f"{qid}: duplicate id ({n} lines)" for qid, n in seen.items() if n > 1]
    docs = {file: Document("\n".join(pages), CORPUS[file].lang) for file, pages in texts.items()}
    for r in rows:
        problems += [f"{r.get('id')}: {p}" for p in _check_row(name, r, texts, docs)]
    return problems


def _check_row(name: str, r: dict, texts: dict[str, list[str]], docs: dict[str, Document]) -> list[str]:
    missing = [k for k in KEYS if k not in r] + [k for k in OPTIONAL if PROMISES[name].per_gap_kind and k not in r]
    extra = [k for k in r if k not in KEYS and k not in OPTIONAL]
    if missing or extra:
        return [f"fields missing {missing}, unknown {extra}"]
    lang, file = r["lang"], r["file"]
    if lang not in LANGS or not re.fullmatch(rf"{PREFIX[name]}-{lang}-\d\d", str(r["id"])):
        return [f"lang must be in {LANGS} and the id read {PREFIX[name]}-{lang}-NN"]
    if file not in CORPUS or CORPUS[file].split not in DOC_SPLITS[name] or file not in texts:
        return [f"file {file!r} is not a {'/'.join(DOC_SPLITS[name])} document"]
    out = []
    if CORPUS[file].lang != lang:
        out.append(f"a {lang} question on a {CORPUS[file].lang} document: these sets ask in the document's language")
    elif r["kind"] != lang:
        out.append(f"kind is {r['kind']!r}, {lang!r} expected")
    if (r["split"], r["in_kb"], r["near_miss"], r["missing_term"]) != (name, True, False, None):
        out.append(f"split is {name!r}, in_kb true, near_miss false and missing_term null")
    if not isinstance(r["question"], str) or not r["question"].strip():
        out.append("empty question")
    out += _check_pages(r, texts[file], CORPUS[file].lang)
    if "gap" in r or "gap_kind" in r:
        out += _check_gap(r, docs[file])
    return out


def _check_pages(r: dict, pages: list[str], lang: str) -> list[str]:
    listed, mc = r["pages"], r["must_contain"]
    if not listed or any(not isinstance(p, int) or not 1 <= p <= len(pages) for p in listed):
        return [f"pages {listed} not within 1..{len(pages)} of {r['file']}"]
    if not isinstance(mc, list) or not 1 <= len(mc) <= 3 or not all(isinstance(s, str) and s for s in mc):
        return [f"must_contain must list 1 to 3 strings, not {mc!r}"]
    return [
        f"must_contain {s!r} is not on page(s) {listed} of {r['file']}"
        for s in mc
        if not any(norm(s, lang) in norm(pages[p - 1], lang) for p in listed)
    ]


def _check_gap(r: dict, doc: Document) -> list[str]:
    gaps, kind = r.get("gap"), r.get("gap_kind")
    if kind not in GAP_KINDS:
        return [f"gap_kind must be one of {GAP_KINDS}, not {kind!r}"]
    if not isinstance(gaps, list) or not gaps or not all(isinstance(g, str) and g.strip() for g in gaps):
        return [f"gap must list the absent words, not {gaps!r}"]
    out = [f"gap {g!r} is not written in the question" for g in gaps if g not in r["question"]]
    for g in gaps:
        if hit := gap_hits(g, doc):
            out.append(f"gap {g!r} is used by {r['file']}: {hit}")
    return out


def check_counts(sets: dict[str, list[dict]]) -> list[str]:
    """What each set falls short of in its ``PROMISES``; an empty list means every set holds them."""
    problems = []

    def at_least(what: str, n: int, minimum: int) -> None:
        if n < minimum:
            problems.append(f"counts: {what} is {n}, at least {minimum} expected")

    for name, rows in sets.items():
        promise = PROMISES[name]
        at_least(f"{name} questions", len(rows), promise.questions)
        if promise.per_gap_kind:
            kinds = Counter(r.get("gap_kind") for r in rows)
            for kind in GAP_KINDS:
                at_least(f"{name} questions with a {kind} gap", kinds[kind], promise.per_gap_kind)
            # An empty set is reported by its count, not by its share.
            share = sum(r.get("lang") == "zh" for r in rows) / len(rows) if rows else 0.5
            if not PARAPHRASE_ZH_SHARE[0] <= share <= PARAPHRASE_ZH_SHARE[1]:
                problems.append(f"counts: {share:.0%} of {name} questions are Chinese, about half expected")
        for lang in LANGS:
            at_least(f"{name} questions in {lang}", sum(r.get("lang") == lang for r in rows), promise.per_lang)
    return problems


def summary(sets: dict[str, list[dict]]) -> str:
    """Counts per set x language x gap kind, then per set x document."""
    table = Counter((name, r.get("lang"), r.get("gap_kind") or "-") for name, rows in sets.items() for r in rows)
    lines = [f"{'set':<15} {'lang':<5} {'gap_kind':<13} {'count':>5}"]
    lines += [f"{s:<15} {lang!s:<5} {kind!s:<13} {n:>5}" for (s, lang, kind), n in sorted(table.items())]
    lines.append("")
    files = Counter((name, r.get("file")) for name, rows in sets.items() for r in rows)
    lines += [f"{s:<15} {file!s:<26} {n:>5}" for (s, file), n in sorted(files.items(), key=str)]
    return "\n".join(lines)


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    del argv  # no options
    sets = {name: load(path) for name, path in SETS.items()}
    splits = tuple(sorted({s for name in sets for s in DOC_SPLITS[name]}))
    texts = page_texts(fetch_corpus(default_cache_dir(), splits))
    print(summary(sets))
    problems = [p for name, rows in sets.items() for p in check_rows(name, rows, texts)]
    problems += check_counts(sets)
    return report(problems, sum(map(len, sets.values())), len(texts))


if __name__ == "__main__":
    sys.exit(main())
