"""Answer quality, out of sample: does the default offline answer hold the key fact, say "not in your
documents" when the documents do not answer, and cite only what it quotes?

    python -m crag.bench.answers [--split test|dev|holdout|paraphrase|first|paraphrase-dev|first-dev|newcomer|all]
                                 [--db DIR] [--out DIR] [--calibrate] [--written]
    python -m crag.bench.answers --rows answers-*.json ...   # the figures below, again, from stored rows

The knowledge base is every corpus PDF, dev and test documents together, as in a user's folder. The holdout
split (``holdout.jsonl``, a fresh set written later by someone who never ran the app) asks about two more
documents, which join the others in its knowledge base. The paraphrase set (``paraphrase.jsonl``: each question
holds a word its document never uses) and the first questions (``first.jsonl``: what a newcomer asks first) are
asked of a knowledge base of all eleven documents. Their dev twins (``paraphrase-dev.jsonl``, ``first-dev.jsonl``)
ask the same kinds of question of the dev documents, in a knowledge base of the dev and test documents: they are in
sample, the ones to tune on. The newcomer set (``newcomer.jsonl``) asks two long manuals nobody here had used
(``gnuplot.pdf``, ``ctex.pdf``) how-to, whole-document, two-part, cross-lingual and out-of-scope questions, in a
knowledge base of those two and the dev and test documents. The backend is the embedded one with web search off, so
answers are evidence answers: quoted sentences.
Thresholds and the evaluator's constants were fitted on the dev split only (``--calibrate`` refits and
prints them); the test split's documents and questions were never used to tune anything, so its figures
are the out-of-sample ones. Measured per question:

- key fact: one of the question's ``must_contain`` strings is in the answer (in-KB questions);
- the action: Incorrect is right for out-of-scope questions, wrong for in-KB ones;
- citations: every [n] of the text names a source, every source shown as cited is cited by the text, and
  every quoted sentence is found in the source it cites;
- time to first token (the benchmark's own clock, not asserted anywhere);
- the spread of the grades per language: how far apart the best and worst of the top-k are, and how many sit at
  the top of the scale (>= 0.95), where they can no longer tell an answer from a passage on the same topic.

Cross-lingual questions are reported apart (``cross``) and left out of the ``same_language`` figures.

Every run also reports ``correct_without_key_fact``: the share of in-KB answers whose action is Correct (a green
badge) but whose quotes lack the key fact, per kind (en, zh, cross) and overall. A set whose lines have a
``category`` (the newcomer set) is also reported per category and question language (``by_category``): the key fact
(in-KB), a whole-document question's pass (the answer names what the document is, one of its ``must_contain``
strings, and cites a source from that file), a two-part question's both-parts rate (every part's key fact quoted),
and an out-of-scope question's Incorrect rate.

``--written`` has the embedded model write the answers instead (the opt-in "generated" mode), and counts the
answers that state names or numbers none of their sources mention (``unsupported``), which the app flags.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import unicodedata
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

from crag import parts
from crag.bench.corpus import default_cache_dir, fetch_corpus
from crag.bench.model import MODELS, llama_server
from crag.bench.model import fetch as fetch_model
from crag.bench.retrieval import HOLDOUT, NEWCOMER, QUESTIONS, Question, load_questions
from crag.calibration import grid
from crag.config import Settings, load_settings
from crag.evidence import flatten
from crag.ingest import sync
from crag.pipeline import Pipeline
from crag.refine import injection_reason
from crag.sections import Section, ask_words, sections
from crag.steps import decide_action
from crag.store import open_store
from crag.support import claims
from crag.terms import Vocabulary, mentions
from crag.text import language, split_sentences
from crag.types import Action, Answer, AnswerKind, Source, cited

EMBEDDED_CONTEXT = Settings.model_fields["embedded_context"].default  # the server's window: the embedded model's


def norm(text: str) -> str:
    """NFKC, lower case, no whitespace: how ``must_contain`` strings are matched (as the checker does)."""
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text).lower())


def has_key_fact(answer: str, strings: Sequence[str]) -> bool:
    return any(norm(s) in norm(answer) for s in strings)


def quoted(answer: Answer) -> str:
    """What the answer says of its own: the quotes of an evidence answer, or all of a written one."""
    if answer.kind is AnswerKind.EVIDENCE:
        return "\n".join(text for part in parts.quoted(answer.parts) for text in parts.quoted_texts(part))
    return answer.text


def citation_problems(answer: Answer) -> list[str]:
    """What is wrong with the answer's citations; empty when every shown citation is one the text made."""
    problems = []
    numbers = {s.n for s in answer.sources}
    if missing := cited(answer.text) - numbers:
        problems.append(f"cites {sorted(missing)}, which are not sources")
    if any(s.n not in cited(answer.text) for s in answer.cited_sources):
        problems.append("shows a source as cited that the text does not cite")
    written = parts.written(answer.parts) if answer.kind is AnswerKind.GENERATED else ""
    problems += _citations_without_terms(written, answer.sources)
    if answer.kind is not AnswerKind.NO_ANSWER:
        # Pipes aside: a source joins its strips, and a table among them makes its other strips' pipes look like
        # table markup, which a quote of those strips alone keeps.
        by_n = {s.n: norm(flatten(s.text)).replace("|", "") for s in answer.sources}
        said = [(text, part.n) for part in parts.quoted(answer.parts) for text in parts.quoted_texts(part)]
        for quote, n in said:
            for sentence in split_sentences(quote.replace("［", "[").replace("］", "]")):
                if norm(sentence).replace("|", "") not in by_n.get(n, ""):
                    problems.append(f"quoted sentence not in source [{n}]: {sentence[:60]}")
    return problems


def _citations_without_terms(written: str, given: Sequence[Source]) -> list[str]:
    """A written sentence's citations of a source that holds none of the names and numbers the sentence states."""
    problems = []
    sources = {s.n: f"{s.text}\n{s.file} {s.title} {s.url} {s.section}" for s in given}
    for sentence in (s for line in written.splitlines() for s in split_sentences(line)):
        terms, numbers = claims(sentence)
        for n in cited(sentence) & set(sources):
            where = Vocabulary([sources[n]])
            if (terms or numbers) and not (
                any(mentions(t, where) for t in terms) or any(x in sources[n] for x in numbers)
            ):
                problems.append(f"[{n}] holds none of what it is cited for: {sentence[:60]}")
    return problems


def build(settings: Settings, pdfs: dict[str, Path]) -> None:
    """Index the corpus unless ``settings.chroma_dir`` already holds it."""
    settings.files_dir.mkdir(parents=True, exist_ok=True)
    for name, path in pdfs.items():
        target = settings.files_dir / name
        if not target.exists():
            target.write_bytes(path.read_bytes())
    store = open_store(settings)
    manifest = {m.file for m in store.manifest()} if store.active() else set()
    if manifest != set(pdfs):
        from crag.retriever import index_embedder

        sync(settings, index_embedder(settings))


def injection_filter(settings: Settings) -> dict[str, Any]:
    """How many real sentences of the corpus the prompt-injection filter would drop, with the PDF rules and
    with the stricter web rules. The corpus holds no injection, so every drop is a fact lost."""
    reader = open_store(settings).reader()
    assert reader is not None, "the benchmark builds its index first"
    sentences = list(
        dict.fromkeys(
            s for c in reader.chunks for paragraph in c.text.split("\n\n") for s in split_sentences(paragraph)
        )
    )
    dropped = {kind: [s for s in sentences if injection_reason(s, kind)] for kind in ("local", "web")}
    return {
        "sentences": len(sentences),
        "dropped_with_pdf_rules": len(dropped["local"]),
        "dropped_with_web_rules": len(dropped["web"]),
        "examples": [s[:200] for s in dropped["web"][:10]],
    }


def in_question_language(question: str, answer: str) -> bool:
    """The answer is in the question's language, by the rule the app answers by (Chinese characters against Latin
    words: a Chinese answer naming commands is still Chinese, which a share of letters would miss)."""
    return language(answer) == language(question)


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


def section_spans(pipeline: Pipeline) -> dict[str, list[tuple[str, int, int]]]:
    """Each file's sections as (title, first page, last page): a section runs to the page the next one starts on."""
    reader = pipeline.retriever.current()
    spans: dict[str, list[tuple[str, int, int]]] = {}
    if reader is None:
        return spans
    by_file: dict[str, list[Section]] = {}
    for s in sections(reader.chunks, reader.manifest):
        by_file.setdefault(s.file, []).append(s)
    for file, found in by_file.items():
        starts = sorted({s.page for s in found})
        for s in found:
            later = [p for p in starts if p > s.page]
            spans.setdefault(file, []).append((ask_words(s.title), s.page, later[0] if later else 10**6))
    return spans


def suggestion_hit(answer: Answer, q: Question, spans: dict[str, list[tuple[str, int, int]]]) -> bool | None:
    """Whether a section offered under the answer holds an answering page of the question (None: no in-KB question)."""
    if not q.in_kb:
        return None
    for s in answer.suggestions:
        held = [(first, last) for title, first, last in spans.get(s.file, []) if title == s.title and first == s.page]
        if s.file == q.file and any(first <= p <= last for first, last in held for p in q.pages):
            return True
    return False


def run_questions(pipeline: Pipeline, questions: Sequence[Question], progress: bool = False) -> list[dict[str, Any]]:
    """One row per question; ``progress`` prints a line per question on stderr (a written run takes many minutes)."""
    rows = []
    spans = section_spans(pipeline)
    for i, q in enumerate(questions, 1):
        with pipeline.stream(q.question, web=False) as stream:
            for _ in stream:
                pass
        answer = stream.finished
        trace = answer.trace
        assert trace is not None, "the pipeline's answers carry their trace"
        row_action = trace.action.value if trace.action else None  # always one here
        rows.append(
            {
                "id": q.id,
                "split": q.split,
                "kind": q.kind,
                "in_kb": q.in_kb,
                "near_miss": q.near_miss,
                "action": row_action,
                "scores": [round(g.score, 4) for g in trace.retrieved],
                "graded_by": sorted({g.graded_by for g in trace.retrieved}),
                "missing_terms": list(trace.terms.missing),
                "answer_kind": answer.kind.value,
                # An evidence answer holds the fact only in what it quotes, not in a FAQ question shown before a quote.
                "lang": q.lang,
                "gap_kind": q.gap_kind,
                "key_fact": has_key_fact(quoted(answer), q.must_contain) if q.in_kb else None,
                "hit@5": any(g.chunk.file == q.file and set(g.chunk.pages) & set(q.pages) for g in trace.retrieved)
                if q.in_kb
                else None,
                "citation_problems": citation_problems(answer),
                "unsupported": list(trace.unsupported),
                "first_token_s": trace.timings.get("first_token"),
                "total_s": trace.timings.get("total"),
                "rewrite_s": trace.timings.get("rewrite"),  # searching again in the documents' words
                "cites": sorted(cited(answer.text)),
                "file": q.file,
                "category": q.category or None,
                # The files of the sources the text cites: a whole-document answer must quote its document.
                "cited_files": sorted({s.file for s in answer.sources if s.n in cited(answer.text) and s.file}),
                # A whole-document answer names what the document is, in its own words or in a quote.
                "names_document": has_key_fact(answer.text, q.must_contain) if q.category == "document" else None,
                "parts_found": [has_key_fact(quoted(answer), part["must_contain"]) for part in q.parts] or None,
                # A written answer's own sentences: the quotes under it are in their documents' language.
                "in_question_language": in_question_language(q.question, stream.written or answer.text),
                "grounding": asdict(stream.grounding),  # what holding the model's answer to its sources did
                # The model's own sentences, without the quotes under them.
                "key_fact_written": has_key_fact(stream.written, q.must_contain) if stream.written else None,
                "notes": list(trace.notes),
                "answer": answer.text,
                "read_s": trace.timings.get("read"),  # the model's reading of the question
                "expansions": [asdict(e) for e in trace.expansions],
                "verdicts": [
                    {
                        "verdict": g.verdict.value if g.verdict else None,
                        "quoted": bool(g.answering),
                        "model": g.from_model,
                        "similarity": g.similarity,
                    }
                    for g in trace.retrieved
                ],
                "suggestions": [[s.title, s.file, s.page] for s in answer.suggestions],
                "suggestion_hit": suggestion_hit(answer, q, spans),
            }
        )
        if progress:
            print(f"{i}/{len(questions)} {q.id}: {row_action}, {trace.timings.get('total')} s", file=sys.stderr)
    return rows


def _rate(rows: Sequence[dict], test) -> float | None:
    return round(sum(1 for r in rows if test(r)) / len(rows), 3) if rows else None


def summarize(rows: Sequence[dict]) -> dict[str, Any]:
    in_kb = [r for r in rows if r["in_kb"]]
    oos = [r for r in rows if not r["in_kb"]]
    correct = sorted(r["first_token_s"] for r in rows if r["action"] == "correct" and r["first_token_s"])
    out: dict[str, Any] = {
        "questions": len(rows),
        "in_kb": {
            "n": len(in_kb),
            "key_fact": _rate(in_kb, lambda r: r["key_fact"]),
            "incorrect": _rate(in_kb, lambda r: r["action"] == "incorrect"),
            "correct": _rate(in_kb, lambda r: r["action"] == "correct"),
            "retrieval_hit@5": _rate(in_kb, lambda r: r["hit@5"]),
        },
        "out_of_scope": {
            "n": len(oos),
            "incorrect": _rate(oos, lambda r: r["action"] == "incorrect"),
            "correct": _rate(oos, lambda r: r["action"] == "correct"),
            "near_miss_incorrect": _rate([r for r in oos if r["near_miss"]], lambda r: r["action"] == "incorrect"),
            "unrelated_incorrect": _rate([r for r in oos if not r["near_miss"]], lambda r: r["action"] == "incorrect"),
        },
        # The LLM grader falls back to similarity when the model fails or times out: its figures hold only this share.
        "graded_by_llm": _rate(rows, lambda r: any(m.startswith("llm") for m in r.get("graded_by", []))),
        "answers_with_citation_problems": sum(1 for r in rows if r["citation_problems"]),
        "median_first_token_s_correct": round(statistics.median(correct), 3) if correct else None,
        "median_first_token_s": _median([r["first_token_s"] for r in rows]),
        "median_total_s": _median([r.get("total_s") for r in rows]),
    }
    if written := [r for r in rows if r["answer_kind"] == "generated"]:
        out["written"] = {
            "n": len(written),
            "flagged_unsupported": _rate(written, lambda r: r["unsupported"]),
            "in_kb_flagged": _rate([r for r in written if r["in_kb"]], lambda r: r["unsupported"]),
            "out_of_scope_flagged": _rate([r for r in written if not r["in_kb"]], lambda r: r["unsupported"]),
            "in_kb_uncited": _rate([r for r in written if r["in_kb"]], lambda r: not r["cites"]),
            "in_question_language": _rate(written, lambda r: r["in_question_language"]),
            "in_kb_key_fact_own_sentences": _rate([r for r in written if r["in_kb"]], lambda r: r["key_fact_written"]),
        }
    if asked := [r for r in rows if r.get("grounding", {}).get("written")]:
        # Answers the model wrote, before grounding: how many stayed written, and what grounding cut or cited.
        g = [r["grounding"] for r in asked]
        out["grounding"] = {
            "n": len(asked),
            "kept_written": _rate(asked, lambda r: r["answer_kind"] == "generated"),
            "in_kb_kept_written": _rate([r for r in asked if r["in_kb"]], lambda r: r["answer_kind"] == "generated"),
            "out_of_scope_kept_written": _rate(
                [r for r in asked if not r["in_kb"]], lambda r: r["answer_kind"] == "generated"
            ),
            "sentences_stated": sum(x["stated"] for x in g),
            "sentences_kept": sum(x["grounded"] for x in g),
            "citations_attached": sum(x["attached"] for x in g),
            "cut_invented": sum(1 for x in g if x["invented"]),
            "cut_unbacked": sum(x["unbacked"] for x in g),
            "cut_other_language": sum(x["other_language"] for x in g),
            "cut_repeated": sum(x["repeated"] for x in g),
        }
    groups = {kind: [r for r in in_kb if r["kind"] == kind] for kind in ("en", "zh", "cross")}
    groups["same_language"] = groups["en"] + groups["zh"]
    groups |= {f"gap:{g}": [r for r in in_kb if r.get("gap_kind") == g] for g in GAP_KINDS}
    for name, group in groups.items():
        if group:
            out["in_kb"][name] = {
                "n": len(group),
                "key_fact": _rate(group, lambda r: r["key_fact"]),
                "incorrect": _rate(group, lambda r: r["action"] == "incorrect"),
            }
    out["grade_spread"] = grade_spread(rows)
    out["suggestions"] = suggestion_figures(rows)
    out["correct_without_key_fact"] = correct_without_key_fact(rows)
    if categories := by_category(rows):
        out["by_category"] = categories
    return out


def suggestion_figures(rows: Sequence[dict]) -> dict[str, Any]:
    """The sections offered under answers not Correct: how often, and how often one holds the answering page, for the
    in-KB answers without their key fact (and the how-to ones among them), which a user would ask again."""
    unsure = [r for r in rows if r["action"] != "correct"]
    wrong = [r for r in rows if r["in_kb"] and not r["key_fact"] and r.get("suggestion_hit") is not None]
    howto = [r for r in wrong if r.get("category") == "howto"]
    return {
        "not_correct": len(unsure),
        "offered": _rate(unsure, lambda r: r.get("suggestions")),
        "wrong": len(wrong),
        "hit@3_wrong": _rate(wrong, lambda r: r["suggestion_hit"]),
        "howto_wrong": len(howto),
        "hit@3_howto_wrong": _rate(howto, lambda r: r["suggestion_hit"]),
    }


def correct_without_key_fact(rows: Sequence[dict]) -> dict[str, Any]:
    """Per kind (en, zh, cross) and overall: of the in-KB answers, the share whose action is Correct but whose quotes
    lack the key fact; a green badge on an answer that does not hold it. Reads the rows of any run, old or new."""
    in_kb = [r for r in rows if r["in_kb"]]
    groups = {kind: [r for r in in_kb if r["kind"] == kind] for kind in ("en", "zh", "cross")} | {"all": in_kb}
    out = {}
    for name, group in groups.items():
        if group:
            count = sum(1 for r in group if r["action"] == "correct" and not r["key_fact"])
            out[name] = {"n": len(group), "count": count, "rate": round(count / len(group), 3)}
    return out


CATEGORIES = ("howto", "document", "two-part", "cross", "out-of-scope")


def document_pass(row: dict) -> bool:
    """A whole-document answer names what the document is and quotes it: one of its ``must_contain`` strings is in
    the answer, and the answer cites a source from that file."""
    return bool(row.get("names_document")) and row.get("file") in row.get("cited_files", [])


def both_parts(row: dict) -> bool:
    """A two-part answer holds a key fact of every part."""
    return bool(row.get("parts_found")) and all(row["parts_found"])


def category_figures(rows: Sequence[dict]) -> dict[str, Any]:
    """One category's figures: the key fact and the actions for in-KB questions, the whole-document pass and the
    both-parts rate where they apply, and the Incorrect rate of out-of-scope ones."""
    in_kb = [r for r in rows if r["in_kb"]]
    out: dict[str, Any] = {"n": len(rows)}
    if in_kb:
        out["key_fact"] = _rate(in_kb, lambda r: r["key_fact"])
        out["correct"] = _rate(in_kb, lambda r: r["action"] == "correct")
        out["correct_without_key_fact"] = _rate(in_kb, lambda r: r["action"] == "correct" and not r["key_fact"])
    if documents := [r for r in in_kb if r.get("category") == "document"]:
        out["document_pass"] = _rate(documents, document_pass)
        out["names_document"] = _rate(documents, lambda r: r.get("names_document"))
        out["cites_document"] = _rate(documents, lambda r: r.get("file") in r.get("cited_files", []))
    if two := [r for r in in_kb if r.get("category") == "two-part"]:
        out["both_parts"] = _rate(two, both_parts)
        out["one_part_or_more"] = _rate(two, lambda r: any(r.get("parts_found") or ()))
    out["incorrect"] = _rate(rows, lambda r: r["action"] == "incorrect")
    return out


def by_category(rows: Sequence[dict]) -> dict[str, Any]:
    """Per category (rows without one are left out), overall and per language of the question."""
    out = {}
    for category in CATEGORIES:
        group = [r for r in rows if r.get("category") == category]
        if group:
            out[category] = category_figures(group)
            for lang in ("en", "zh"):
                if part := [r for r in group if r.get("lang") == lang]:
                    out[category][lang] = category_figures(part)
    return out


def stored_figures(path: Path) -> dict[str, Any]:
    """The figures added since a stored run was made, from its rows (``--rows``)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    rows = data["rows"]
    out = {"file": str(path), "split": data.get("split"), "run": data.get("run")}
    out["correct_without_key_fact"] = correct_without_key_fact(rows)
    if categories := by_category(rows):
        out["by_category"] = categories
    return out


# The wording sets, each with the corpus splits its knowledge base holds: the out-of-sample sets ask documents of
# every split; their dev twins ask the dev documents, with the test documents as distractors.
WORDING_SETS = {
    "paraphrase": ("dev", "test", "holdout", "first"),
    "first": ("dev", "test", "holdout", "first"),
    "paraphrase-dev": ("dev", "test"),
    "first-dev": ("dev", "test"),
}
NEWCOMER_SPLITS = ("dev", "test", "newcomer")  # newcomer.jsonl's two manuals, with the dev and test ones as distractors
GAP_KINDS = ("derived", "number", "abbreviation", "compound", "everyday", "segmentation")
SATURATED = 0.95


def grade_spread(rows: Sequence[dict]) -> dict[str, Any]:
    """Per language of the question, for in-KB questions: the median distance between the best and the worst of the
    top-k grades, and the share of questions with two grades or more at the top of the scale."""
    out = {}
    for lang in ("en", "zh"):
        graded = [r["scores"] for r in rows if r["in_kb"] and r.get("lang") == lang and len(r["scores"]) > 1]
        if graded:
            out[lang] = {
                "n": len(graded),
                "median_spread": round(statistics.median(max(s) - min(s) for s in graded), 3),
                "saturated": _rate(graded, lambda s: sum(x >= SATURATED for x in s) >= 2),
            }
    return out


def fit_thresholds(rows: Sequence[dict]) -> dict[str, float]:
    """Thresholds on a 0.05 grid, from the rows' scores. No out-of-scope question may be Correct (it would be
    answered from the wrong passages under a green badge); then the fewest wrong actions (an in-KB question
    called Incorrect, an out-of-scope one not called Incorrect); then the most in-KB Correct."""
    values = grid()  # the grid a knowledge base's own ratings are fitted on (``crag.calibration``)

    def key(t: tuple[float, float]) -> tuple[int, int, int]:
        actions = [(r["in_kb"], decide_action(r["scores"], *t)) for r in rows]
        oos_correct = sum(1 for kb, a in actions if not kb and a is Action.CORRECT)
        wrong = sum(1 for kb, a in actions if (a is Action.INCORRECT) == kb)
        kb_correct = sum(1 for kb, a in actions if kb and a is Action.CORRECT)
        return (-oos_correct, -wrong, kb_correct)

    pairs = [(up, lo) for up in values for lo in values if lo <= up]
    best = max(key(t) for t in pairs)
    tied = sorted(t for t in pairs if key(t) == best)
    upper, lower = tied[len(tied) // 2]  # the middle of the tied range: the farthest from both of its edges
    return {"upper_threshold": upper, "lower_threshold": lower}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m crag.bench.answers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=["dev", "test", "holdout", *WORDING_SETS, "newcomer", "all"], default="test")
    parser.add_argument("--db", type=Path, help="keep the index here between runs (default: a temporary folder)")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--calibrate", action="store_true", help="fit the thresholds on the dev split and print them")
    parser.add_argument("--written", action="store_true", help="the model writes the answers (else: evidence answers)")
    parser.add_argument(
        "--model", choices=sorted(MODELS), help="run this benchmark model in process (fetched first if need be)"
    )
    parser.add_argument(
        "--server",
        action="store_true",
        help="run --model behind llama-cpp-python's OpenAI-compatible server on loopback (the openai backend)",
    )
    parser.add_argument(
        "--grader",
        choices=["llm", "similarity"],
        default="similarity",
        help="the retrieval evaluator (similarity: what auto picks on the embedded backend)",
    )
    parser.add_argument(
        "--rows", type=Path, nargs="+", help="print the newer figures of stored answers-*.json files; run nothing"
    )
    return parser.parse_args(argv)


def select_questions(args: argparse.Namespace) -> tuple[list[Question], tuple[str, ...]]:
    """The questions of ``--split`` and the corpus splits their knowledge base holds."""
    if args.calibrate:
        return [q for q in load_questions() if q.split == "dev"], ("dev", "test")
    if args.split == "holdout":
        return load_questions(HOLDOUT), ("dev", "test", "holdout")
    if args.split == "newcomer":
        return load_questions(NEWCOMER), NEWCOMER_SPLITS
    if args.split in WORDING_SETS:
        return load_questions(QUESTIONS.with_name(f"{args.split}.jsonl")), WORDING_SETS[args.split]
    return [q for q in load_questions() if args.split == "all" or q.split == args.split], ("dev", "test")


def run_name(args: argparse.Namespace, settings: Settings) -> str:
    """Model, grader and answer kind, so that runs of one split do not overwrite each other."""
    model = args.model or (settings.embedded_gguf.stem if settings.embedded_gguf else "smollm2-135m")
    served = "-server" if args.server else ""
    return f"{model}{served}-{args.grader}-{'written' if args.written else 'evidence'}"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.rows:
        print(json.dumps([stored_figures(path) for path in args.rows], ensure_ascii=False, indent=1))
        return 0
    questions, splits = select_questions(args)
    gguf = fetch_model(args.model) if args.model else None
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as running:
        root = args.db or Path(tmp)
        backend: dict[str, Any] = {"llm_backend": "embedded", **({"embedded_gguf": gguf} if gguf else {})}
        if args.server and gguf:  # as a user with a model server runs it
            server = running.enter_context(llama_server(gguf, args.model, Path(tmp), n_ctx=EMBEDDED_CONTEXT))
            backend = {"llm_backend": "openai", "openai_base_url": server.url, "chat_model": args.model}
        settings = load_settings(
            files_dir=root / "Files",
            chroma_dir=root / "db",
            parser="pymupdf",
            embed_backend="local",
            web_search=False,
            answer_mode="generated" if args.written else "evidence",
            evaluator=args.grader,
            **backend,
        )
        build(settings, fetch_corpus(default_cache_dir(), splits))
        pipeline = Pipeline.from_settings(settings)
        rows = run_questions(pipeline, questions, progress=True)
        summary = summarize(rows) | {"injection_filter": injection_filter(settings)}
    run = run_name(args, settings)
    results = {"split": "dev" if args.calibrate else args.split, "run": run, "summary": summary, "rows": rows}
    if args.calibrate:
        results["calibrated"] = fit_thresholds(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"answers-{results['split']}-{run}.json").write_text(
        json.dumps(results, ensure_ascii=False, indent=1), encoding="utf-8"
    )
    print(json.dumps({k: v for k, v in results.items() if k != "rows"}, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
