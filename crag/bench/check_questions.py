"""Check ``questions.jsonl`` against the corpus PDFs and print what the set holds.

    python -m crag.bench.check_questions [--holdout | --newcomer]

Fetches the corpus (``fetch_corpus(default_cache_dir())``) and checks, with the text PyMuPDF extracts
(``page.get_text()``):

- every line has the fields of ``Question``, with valid values, and ids are unique;
- an in-KB question names a corpus file and pages in range, its ``kind`` matches the languages, its
  ``split`` is its document's, and each ``must_contain`` string is on one of the listed pages;
- an out-of-scope question has no file, pages or strings; a near-miss names a ``missing_term`` that
  the question writes verbatim and that no corpus PDF contains, even without spaces or punctuation;
- the counts the set promises (totals, out-of-scope, near-misses, the dev/test split).

``--holdout`` checks ``holdout.jsonl`` line by line the same way, against all nine PDFs (a near-miss term must be
in none of them), without the main set's counts.

``--newcomer`` checks ``newcomer.jsonl`` the same way against its knowledge base (the dev, test and newcomer PDFs),
and also each line's ``category`` and, for a two-part question, that every part's strings are on its own pages;
then the counts per category that the set promises (``NEWCOMER_PROMISES``).

Matching is on normalised text: NFKC (which also undoes the ``fi``/``fl`` ligatures), lower case, and
whitespace collapsed to one space, or removed entirely for a Chinese document (Chinese text has no
spaces, and PyMuPDF inserts some at line ends and around Latin words).
Prints a table of counts and exits 1 when anything is wrong.
"""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from collections import Counter
from dataclasses import fields
from pathlib import Path

from crag.bench.corpus import CORPUS, default_cache_dir, fetch_corpus

QUESTIONS = Path(__file__).with_name("questions.jsonl")
HOLDOUT = Path(__file__).with_name("holdout.jsonl")
NEWCOMER = Path(__file__).with_name("newcomer.jsonl")
# The fields of crag.bench.retrieval.Question, in file order. That module is not imported at the top
# because it loads the whole retrieval stack; main() compares the two when it can import it.
KEYS = [
    "id", "lang", "kind", "question", "file", "pages", "in_kb",
    "must_contain", "near_miss", "missing_term", "split",
]  # fmt: skip
LANGS = ("en", "zh")
KINDS = ("en", "zh", "cross")
SPLITS = ("dev", "test", "holdout")
MAIN_SPLITS = ("dev", "test")  # questions.jsonl; holdout.jsonl is the holdout split
NEWCOMER_SPLITS = ("dev", "test", "newcomer")  # newcomer.jsonl's knowledge base: its manuals among distractors
ROW_SPLITS = (*SPLITS, "newcomer")
CATEGORIES = ("howto", "document", "two-part", "cross", "out-of-scope")
# What newcomer.jsonl must hold at least, per category (see README.md, "Newcomer questions").
NEWCOMER_PROMISES = {"total": 30, "howto": 8, "document": 6, "two-part": 6, "cross": 4, "out-of-scope": 6}

# What the set must hold at least (see README.md, "Question set").
MIN_TOTAL = 180
MIN_DOCUMENTS = 6
MIN_OUT_OF_SCOPE = 50
MIN_NEAR_MISS = 26
MIN_TEST_IN_KB = 50
MIN_TEST_IN_KB_PER_LANG = 20
MIN_TEST_OUT_OF_SCOPE = 24
MIN_NEAR_MISS_PER_SPLIT = 12
NEAR_MISS_ZH_SHARE = (0.35, 0.65)  # "about half Chinese"


def norm(text: str, lang: str) -> str:
    """NFKC, lower case; whitespace collapsed (English) or removed (Chinese)."""
    text = unicodedata.normalize("NFKC", text).lower()
    return re.sub(r"\s+", "", text) if lang == "zh" else re.sub(r"\s+", " ", text).strip()


def squash(text: str) -> str:
    """Letters and digits only: catches a term written with other spaces, hyphens or dots."""
    return re.sub(r"[\W_]+", "", unicodedata.normalize("NFKC", text).lower())


def page_texts(paths: dict[str, Path]) -> dict[str, list[str]]:
    import pymupdf

    out = {}
    for name, path in paths.items():
        with pymupdf.open(path) as doc:
            out[name] = [page.get_text() for page in doc]
    return out


def check(rows: list[dict], texts: dict[str, list[str]], counts: bool = True) -> list[str]:
    """Every problem found, one line each; an empty list means the set is sound."""
    seen: Counter[str] = Counter(str(r.get("id")) for r in rows)
    problems = [f"{qid}: duplicate id ({n} lines)" for qid, n in seen.items() if n > 1]
    corpus = Corpus(texts)
    for r in rows:
        problems += [f"{r.get('id')!s}: {message}" for message in row_problems(r, corpus)]
    return problems + (check_counts(rows) if counts else [])


class Corpus:
    """The corpus' page texts, normalised for each language and squashed, to look strings up in."""

    def __init__(self, texts: dict[str, list[str]]) -> None:
        self.texts = texts
        self.normalised = {
            name: {lang: [norm(t, lang) for t in pages] for lang in LANGS} for name, pages in texts.items()
        }
        self.squashed = {name: [squash(t) for t in pages] for name, pages in texts.items()}

    def occurrences(self, term: str) -> list[str]:
        """Where a term occurs, as "file pN": in either language's normalisation, or squashed."""
        return [
            f"{name} p{i + 1}"
            for name in self.texts
            for i in range(len(self.texts[name]))
            if norm(term, "en") in self.normalised[name]["en"][i]
            or norm(term, "zh") in self.normalised[name]["zh"][i]
            or (squash(term) and squash(term) in self.squashed[name][i])
        ]


def row_problems(r: dict, corpus: Corpus) -> list[str]:
    """The problems of one line of the set."""
    missing = [k for k in KEYS if k not in r]
    extra = [k for k in r if k not in KEYS]
    if missing or extra:
        return [f"fields missing {missing}, unknown {extra}"]
    lang, kind, split = r["lang"], r["kind"], r["split"]
    if lang not in LANGS or kind not in KINDS or split not in ROW_SPLITS:
        return [f"lang/kind/split must be in {LANGS}/{KINDS}/{ROW_SPLITS}, not {lang}/{kind}/{split}"]
    problems = [] if isinstance(r["question"], str) and r["question"].strip() else ["empty question"]
    if r["in_kb"] is True:
        return problems + in_kb_problems(r, corpus)
    if r["in_kb"] is False:
        return problems + out_of_scope_problems(r, corpus)
    return [*problems, f"in_kb must be true or false, not {r['in_kb']!r}"]


def in_kb_problems(r: dict, corpus: Corpus) -> list[str]:
    lang, kind, split, mc, name, pages = r["lang"], r["kind"], r["split"], r["must_contain"], r["file"], r["pages"]
    if name not in CORPUS:
        return [f"file {name!r} is not in the corpus"]
    doc, count = CORPUS[name], len(corpus.texts[name])
    if not pages or any(not isinstance(p, int) or not 1 <= p <= count for p in pages):
        return [f"pages {pages} not within 1..{count} of {name}"]
    problems = []
    want_kind = "cross" if lang != doc.lang else lang
    if kind != want_kind:
        problems.append(f"kind is {kind!r}, but a {lang} question on a {doc.lang} document is {want_kind!r}")
    if split != doc.split:
        problems.append(f"split is {split!r}, but {name} is a {doc.split} document")
    if r["near_miss"] is not False or r["missing_term"] is not None:
        problems.append("an in-KB question has near_miss false and missing_term null")
    if not isinstance(mc, list) or not 1 <= len(mc) <= 3 or not all(isinstance(s, str) and s for s in mc):
        return [*problems, f"must_contain must list 1 to 3 strings, not {mc!r}"]
    for s in mc:
        target = norm(s, doc.lang)
        if not any(target in corpus.normalised[name][doc.lang][p - 1] for p in pages):
            problems.append(f"must_contain {s!r} is not on page(s) {pages} of {name}")
    return problems


def out_of_scope_problems(r: dict, corpus: Corpus) -> list[str]:
    problems = []
    if r["file"] is not None or r["pages"] != [] or r["must_contain"] != []:
        problems.append("an out-of-scope question has file null, pages [] and must_contain []")
    if r["kind"] != r["lang"]:
        problems.append(f"an out-of-scope question's kind is its lang ({r['lang']!r}), not {r['kind']!r}")
    term = r["missing_term"]
    if r["near_miss"] is True:
        if not isinstance(term, str) or not term.strip():
            return [*problems, "a near-miss names its missing_term"]
        if term not in r["question"]:
            problems.append(f"missing_term {term!r} is not written in the question")
        if hits := corpus.occurrences(term):
            problems.append(f"missing_term {term!r} does occur in the corpus: {', '.join(hits[:5])}")
    elif r["near_miss"] is False:
        if term is not None:
            problems.append("missing_term is null unless near_miss is true")
    else:
        problems.append(f"near_miss must be true or false, not {r['near_miss']!r}")
    return problems


def check_counts(rows: list[dict]) -> list[str]:
    problems = []

    def at_least(what: str, n: int, minimum: int) -> None:
        if n < minimum:
            problems.append(f"counts: {what} is {n}, at least {minimum} expected")

    in_kb = [r for r in rows if r.get("in_kb") is True]
    oos = [r for r in rows if r.get("in_kb") is False]
    near = [r for r in oos if r.get("near_miss") is True]
    plain = [r for r in oos if r.get("near_miss") is False]
    test_kb = [r for r in in_kb if r.get("split") == "test"]
    at_least("total", len(rows), MIN_TOTAL)
    at_least("out-of-scope", len(oos), MIN_OUT_OF_SCOPE)
    at_least("near-miss", len(near), MIN_NEAR_MISS)
    at_least("test in-KB", len(test_kb), MIN_TEST_IN_KB)
    for lang in LANGS:
        at_least(f"test in-KB in {lang}", sum(r.get("lang") == lang for r in test_kb), MIN_TEST_IN_KB_PER_LANG)
    at_least("test out-of-scope", sum(r.get("split") == "test" for r in oos), MIN_TEST_OUT_OF_SCOPE)
    for split in MAIN_SPLITS:
        at_least(f"{split} near-miss", sum(r.get("split") == split for r in near), MIN_NEAR_MISS_PER_SPLIT)
    if near:
        share = sum(r.get("lang") == "zh" for r in near) / len(near)
        if not NEAR_MISS_ZH_SHARE[0] <= share <= NEAR_MISS_ZH_SHARE[1]:
            problems.append(f"counts: {share:.0%} of near-misses are Chinese, about half expected")
    dev_plain = sum(r.get("split") == "dev" for r in plain)
    if abs(2 * dev_plain - len(plain)) > 1:
        problems.append(f"counts: {dev_plain} of {len(plain)} plainly unrelated questions are dev, half expected")

    used = {r.get("file") for r in in_kb}
    at_least("documents with questions", len(used & set(CORPUS)), MIN_DOCUMENTS)
    for name, doc in CORPUS.items():
        if name not in used and doc.split in MAIN_SPLITS:
            problems.append(f"counts: no question on {name}")
    for split in MAIN_SPLITS:
        langs = {doc.lang for doc in CORPUS.values() if doc.split == split}
        if langs != set(LANGS):
            problems.append(f"counts: the {split} documents are in {sorted(langs)}, English and Chinese expected")
    return problems


def summary(rows: list[dict]) -> str:
    """Counts per split x kind x in_kb x near_miss, then per document."""
    table = Counter((r.get("split"), r.get("kind"), r.get("in_kb"), r.get("near_miss")) for r in rows)
    lines = [f"{'split':<6} {'kind':<6} {'in_kb':<6} {'near_miss':<10} {'count':>5}"]
    for (split, kind, in_kb, near), n in sorted(table.items(), key=lambda kv: tuple(map(str, kv[0]))):
        lines.append(f"{split!s:<6} {kind!s:<6} {in_kb!s:<6} {near!s:<10} {n:>5}")
    lines.append(f"{'total':<31} {len(rows):>5}")
    lines.append("")
    lines.append(f"{'document':<26} {'lang':<5} {'split':<7} {'pages':>5} {'in-KB':>6} {'en q':>5} {'zh q':>5}")
    for name, doc in CORPUS.items():
        qs = [r for r in rows if r.get("file") == name]
        en = sum(r.get("lang") == "en" for r in qs)
        lines.append(f"{name:<26} {doc.lang:<5} {doc.split:<7} {doc.pages:>5} {len(qs):>6} {en:>5} {len(qs) - en:>5}")
    oos = [r for r in rows if r.get("in_kb") is False]
    for split in [s for s in SPLITS if any(r.get("split") == s for r in oos)]:
        part = [r for r in oos if r.get("split") == split]
        near = [r for r in part if r.get("near_miss")]
        lines.append(
            f"out-of-scope {split}: {len(part)} ({len(near)} near-miss: "
            f"{sum(r.get('lang') == 'en' for r in near)} en, {sum(r.get('lang') == 'zh' for r in near)} zh)"
        )
    return "\n".join(lines)


def check_newcomer(rows: list[dict], texts: dict[str, list[str]], counts: bool = True) -> list[str]:
    """``check`` for newcomer.jsonl: each line without its ``category`` and ``parts``, then those two, then the
    counts per category."""
    seen: Counter[str] = Counter(str(r.get("id")) for r in rows)
    problems = [f"{qid}: duplicate id ({n} lines)" for qid, n in seen.items() if n > 1]
    corpus = Corpus(texts)
    for r in rows:
        base = {k: v for k, v in r.items() if k not in ("category", "parts")}
        found = row_problems(base, corpus) + newcomer_problems(r, corpus)
        if r.get("split") != "newcomer":
            found.append(f"split is {r.get('split')!r}, not 'newcomer'")
        problems += [f"{r.get('id')!s}: {message}" for message in found]
    return problems + (newcomer_counts(rows) if counts else [])


def newcomer_problems(r: dict, corpus: Corpus) -> list[str]:
    """A newcomer line's category, and a two-part question's parts, each string on its own part's pages."""
    category, parts = r.get("category"), r.get("parts")
    if category not in CATEGORIES:
        return [f"category must be one of {CATEGORIES}, not {category!r}"]
    problems = []
    if (category == "out-of-scope") != (r.get("in_kb") is False):
        problems.append("a question is out-of-scope exactly when in_kb is false")
    if category == "cross" and r.get("kind") != "cross":
        problems.append("a cross question asks a document in the other language (kind 'cross')")
    if category in ("howto", "two-part", "document") and r.get("kind") not in KINDS:
        problems.append(f"kind {r.get('kind')!r} is not one of {KINDS}")
    if category == "document" and 1 not in (r.get("pages") or []):
        problems.append("a whole-document question lists the document's first page, which says what it is")
    if category != "two-part":
        return problems + (["only a two-part question has parts"] if parts is not None else [])
    if not isinstance(parts, list) or len(parts) < 2:
        return [*problems, f"a two-part question lists two parts or more, not {parts!r}"]
    for i, part in enumerate(parts, 1):
        problems += [f"part {i}: {message}" for message in part_problems(part, corpus)]
    first = parts[0] if isinstance(parts[0], dict) else {}
    if r.get("file") != first.get("file"):
        problems.append("the question's file is its first part's")
    return problems


def part_problems(part: object, corpus: Corpus) -> list[str]:
    if not isinstance(part, dict) or set(part) != {"file", "pages", "must_contain"}:
        return [f"a part has exactly file, pages and must_contain, not {part!r}"]
    name, pages, mc = part["file"], part["pages"], part["must_contain"]
    if name not in CORPUS or name not in corpus.texts:
        return [f"file {name!r} is not in the corpus"]
    count, lang = len(corpus.texts[name]), CORPUS[name].lang
    if not pages or any(not isinstance(p, int) or not 1 <= p <= count for p in pages):
        return [f"pages {pages} not within 1..{count} of {name}"]
    if not isinstance(mc, list) or not 1 <= len(mc) <= 3 or not all(isinstance(s, str) and s for s in mc):
        return [f"must_contain must list 1 to 3 strings, not {mc!r}"]
    return [
        f"must_contain {s!r} is not on page(s) {pages} of {name}"
        for s in mc
        if not any(norm(s, lang) in corpus.normalised[name][lang][p - 1] for p in pages)
    ]


def newcomer_counts(rows: list[dict]) -> list[str]:
    """The counts newcomer.jsonl promises: per category, how-to in both languages, cross-lingual both ways."""
    problems = []
    by = Counter(r.get("category") for r in rows)
    for what, minimum in NEWCOMER_PROMISES.items():
        n = len(rows) if what == "total" else by[what]
        if n < minimum:
            problems.append(f"counts: {what} is {n}, at least {minimum} expected")
    for category in ("howto", "document", "out-of-scope"):
        langs = {r.get("lang") for r in rows if r.get("category") == category}
        if langs != set(LANGS):
            problems.append(f"counts: the {category} questions are in {sorted(map(str, langs))}, en and zh expected")
    cross = {r.get("lang") for r in rows if r.get("category") == "cross"}
    if cross != set(LANGS):
        problems.append(f"counts: cross-lingual questions are asked in {sorted(map(str, cross))}, both ways expected")
    manuals = {name for name, doc in CORPUS.items() if doc.split == "newcomer"}
    if missing := manuals - {r.get("file") for r in rows}:
        problems.append(f"counts: no question on {sorted(missing)}")
    return problems


def newcomer_summary(rows: list[dict]) -> str:
    """Counts per category x language of the question x kind."""
    table = Counter((r.get("category"), r.get("lang"), r.get("kind")) for r in rows)
    lines = [f"{'category':<13} {'lang':<5} {'kind':<6} {'count':>5}"]
    for (category, lang, kind), n in sorted(table.items(), key=lambda kv: tuple(map(str, kv[0]))):
        lines.append(f"{category!s:<13} {lang!s:<5} {kind!s:<6} {n:>5}")
    lines.append(f"{'total':<26} {len(rows):>5}")
    return "\n".join(lines)


def check_loader(path: Path) -> list[str]:
    """The benchmark's own loader must accept every line and know every field."""
    try:
        from crag.bench.retrieval import Question, load_questions
    except ImportError as exc:  # the app around it is broken or half-installed: not this file's fault
        print(f"note: load_questions not tried, crag.bench.retrieval does not import ({exc})")
        return []
    # The fields after these are optional ones of the other sets (gap, gap_kind, category, parts).
    if [f.name for f in fields(Question)][: len(KEYS)] != KEYS:
        return [f"Question's fields {[f.name for f in fields(Question)]} do not start with this checker's {KEYS}"]
    try:
        load_questions(path)
    except (TypeError, KeyError) as exc:
        return [f"load_questions rejects the file: {exc!r}"]
    return []


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if "--newcomer" in args:
        return main_newcomer()
    holdout = "--holdout" in args
    path = HOLDOUT if holdout else QUESTIONS
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    texts = page_texts(fetch_corpus(default_cache_dir(), SPLITS if holdout else MAIN_SPLITS))
    print(summary(rows))
    problems = check(rows, texts, counts=not holdout) + check_loader(path)
    return report(problems, len(rows), len(texts))


def report(problems: list[str], questions: int, pdfs: int) -> int:
    """Print the problems found, or that there are none; the exit status."""
    print()
    if problems:
        print(f"{len(problems)} problem(s):")
        print("\n".join(f"  {p}" for p in problems))
        return 1
    print(f"OK: {questions} questions checked against {pdfs} PDFs.")
    return 0


def main_newcomer() -> int:
    rows = [json.loads(line) for line in NEWCOMER.read_text(encoding="utf-8").splitlines() if line.strip()]
    texts = page_texts(fetch_corpus(default_cache_dir(), NEWCOMER_SPLITS))
    print(newcomer_summary(rows))
    problems = check_newcomer(rows, texts) + check_loader(NEWCOMER)
    return report(problems, len(rows), len(texts))


if __name__ == "__main__":
    sys.exit(main())
