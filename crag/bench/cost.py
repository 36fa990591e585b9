"""CRAG cost, side by side in one run: our pipeline against a faithful seed-style baseline.

Both use the same retriever, the same index and the same embedded model (llama.cpp in-process).
The baseline does what the usual CRAG implementations do:

- it grades the k chunks one after another, one LLM call each;
- it scores every strip of the kept knowledge with its own LLM call;
- it rewrites the question for the web (one call), then generates.

Ours grades with the cheap similarity evaluator (or one LLM call for all k), scores strips without
the LLM, and rewrites only when the action needs the web. Web search is replaced by an offline
searcher that returns nothing, in both, so the run needs no network and compares model work only.
The same model writes the answer in both ("ours"); "ours-evidence" is what the embedded backend does
by default: it quotes the evidence and calls no model at all.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Unpack

from pydantic import BaseModel
from pydantic_ai import Agent, NativeOutput

from crag import prompts
from crag.models import LlamaCppChat
from crag.pipeline import Pipeline
from crag.refine import local_strips, number_sources
from crag.steps import Overrides, decide_action
from crag.types import WebResult
from crag.websearch import Searcher


class OfflineSearcher(Searcher):
    """Searches nothing, instantly: the benchmark measures model work, not the network."""

    def search(self, query: str, max_results: int = 5) -> list[WebResult]:
        return []


class OneScore(BaseModel):
    score: float


class Query(BaseModel):
    query: str


SEED_GRADER = "Score from -1 to 1 how well the document answers the question. 1 = answers it, -1 = unrelated."


@dataclass(frozen=True, kw_only=True)
class Run:
    calls: int
    prompt_tokens: int
    completion_tokens: int
    first_token_s: float
    total_s: float
    action: str


def _measure(chat: LlamaCppChat, fn) -> Run:
    before = (chat.calls, chat.prompt_tokens, chat.completion_tokens)
    start = time.perf_counter()
    first, action = fn(start)
    total = time.perf_counter() - start
    return Run(
        calls=chat.calls - before[0],
        prompt_tokens=chat.prompt_tokens - before[1],
        completion_tokens=chat.completion_tokens - before[2],
        first_token_s=round(first, 3),
        total_s=round(total, 3),
        action=action,
    )


def ours(pipeline: Pipeline, chat: LlamaCppChat, question: str, **options: Unpack[Overrides]) -> Run:
    def run(start: float) -> tuple[float, str]:
        first = None
        with pipeline.stream(question, **options) as stream:
            for _ in stream:
                first = first if first is not None else time.perf_counter() - start
        action = stream.finished.action
        assert action is not None, "the pipeline's answers carry their trace"
        return first or 0.0, action.value

    return _measure(chat, run)


def seed_style(pipeline: Pipeline, chat: LlamaCppChat, question: str) -> Run:
    s = pipeline.settings
    grader = Agent(pipeline.model, output_type=NativeOutput(OneScore), instructions=SEED_GRADER, retries=1)
    writer = Agent(pipeline.model, instructions=prompts.ANSWER)

    def score(text: str) -> float:
        try:
            out = grader.run_sync(f"Question: {question}\n\nDocument:\n{text[:1200]}").output.score
        except Exception:  # noqa: BLE001 - the baseline's junk counts as irrelevant, as in its code
            return -1.0
        return max(-1.0, min(1.0, out))

    def run(start: float) -> tuple[float, str]:
        hits = pipeline.retriever.retrieve(question, s.top_k, s.retrieval_mode)
        scores = [score(h.chunk.text) for h in hits]  # one call per chunk, one after another
        action = decide_action(scores, s.upper_threshold, s.lower_threshold)
        kept = [h for h, sc in zip(hits, scores, strict=True) if sc >= s.lower_threshold]
        strips = local_strips(kept)
        strip_scores = [score(st.text) for st in strips]  # one call per strip
        ranked = sorted(range(len(strips)), key=lambda i: -strip_scores[i])[:8]
        chosen = [replace(strips[i], kept=True) for i in sorted(ranked)]
        with contextlib.suppress(Exception):  # a failed rewrite does not stop the baseline
            Agent(pipeline.model, output_type=NativeOutput(Query), retries=1).run_sync(
                f"Rewrite as a short web search query: {question}"
            )
        sources = number_sources(chosen, [])
        first = None
        with writer.run_stream_sync(
            prompts.answer_prompt(question, sources), model_settings={"max_tokens": s.max_answer_tokens}
        ) as result:
            for _ in result.stream_text(delta=True, debounce_by=None):
                first = first if first is not None else time.perf_counter() - start
        return first or 0.0, action.value

    return _measure(chat, run)


def compare(
    pipeline: Pipeline, chat: LlamaCppChat, questions: Sequence[tuple[str, bool]], llm_grader: bool = True
) -> dict:
    """Per question and in sum: ours (similarity grader), ours (one-call LLM grader), ours quoting the
    evidence (the embedded default), seed-style. Options choose each variant: the pipeline is built once."""
    variants: dict[str, Overrides] = {
        "ours": {"answer_mode": "generated", "evaluator": "similarity"},
        "ours-evidence": {"answer_mode": "evidence", "evaluator": "similarity"},
    }
    if llm_grader:
        variants["ours-llm-grader"] = {"answer_mode": "generated", "evaluator": "llm"}
    rows = []
    for q, in_kb in questions:
        row: dict = {"question": q, "in_kb": in_kb}
        for name, options in variants.items():
            row[name] = ours(pipeline, chat, q, **options).__dict__
        row["seed-style"] = seed_style(pipeline, chat, q).__dict__
        rows.append(row)
    summary = _summary(rows, [*variants, "seed-style"])
    in_kb_summary = _summary([r for r in rows if r["in_kb"]], [*variants, "seed-style"])
    return {
        "rows": rows,
        "summary": summary,
        "baseline_over_ours": _ratios(summary, variants),
        "in_kb_summary": in_kb_summary,
        "in_kb_baseline_over_ours": _ratios(in_kb_summary, variants),
    }


def _summary(rows: list[dict], names: list[str]) -> dict:
    keys = ("calls", "prompt_tokens", "completion_tokens", "first_token_s", "total_s")
    return (
        {name: {k: round(statistics.mean(r[name][k] for r in rows), 3) for k in keys} for name in names} if rows else {}
    )


def _ratios(summary: dict, variants) -> dict:
    if not summary:
        return {}
    base = summary["seed-style"]
    keys = ("calls", "prompt_tokens", "first_token_s", "total_s")
    return {n: {k: round(base[k] / summary[n][k], 2) if summary[n][k] else None for k in keys} for n in variants}


def offline_pipeline(pipeline: Pipeline) -> Pipeline:
    """The same pipeline with the offline searcher."""
    return replace(pipeline, searcher=OfflineSearcher(), fetch=lambda results, n, timeout: list(results))
