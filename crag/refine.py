"""CRAG's knowledge refinement: decompose, score, filter, recompose.

Kept chunks (or fetched web pages) are cut into strips of a few sentences; every strip is scored
by the cheap similarity evaluator in one batch (no LLM call per strip); the best ``keep`` strips at
or above ``floor`` survive; they are put back in document order, each with its source.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from crag.evaluator import SimilarityEvaluator
from crag.ingest.chunking import join_sentences, split_sentences
from crag.types import ScoredChunk, Strip, WebResult

STRIP_CHARS = 320  # a strip is one to three sentences: about 70 tokens of English, 80 Chinese characters


def width(text: str) -> int:
    """Length in English-character equivalents: a Chinese character carries about a token, like 4 letters."""
    return len(text) + 3 * sum(1 for c in text if "\u3400" <= c <= "\u9fff")


# Text that talks to the assistant instead of about the subject: the usual shapes of prompt injection,
# in English and Chinese. Such a strip is never passed to the model (defence in depth: the prompt
# also quotes all knowledge as data and tells the model never to follow it).
INJECTION = re.compile(
    r"\b(ignore|disregard|forget|override)\b[^.!?\n]{0,40}\b(instructions?|prompts?|rules|context|question)\b"
    r"|\b(reply|respond|answer|say|output)\b[^.!?\n]{0,30}\b(only|just|single word|exactly)\b"
    r"|\byou are now\b|\bsystem prompt\b|\bnew instructions?\b|\bjailbreak\b"
    r"|(忽略|无视|忘记|忽视)[^。！？\n]{0,20}(指令|指示|提示|规则|问题)|系统提示|只(回复|回答|输出)",
    re.IGNORECASE,
)


def addresses_the_assistant(text: str) -> bool:
    return INJECTION.search(text) is not None


def decompose(text: str, limit: int = STRIP_CHARS) -> list[str]:
    """Sentences grouped into strips of at most ``limit`` characters (a longer sentence is one strip)."""
    strips: list[str] = []
    for paragraph in text.split("\n\n"):
        current = ""
        for sentence in split_sentences(paragraph.replace("\n", " ")):
            if addresses_the_assistant(sentence):
                # Alone in its strip, so dropping it costs no neighbouring fact.
                strips += [current, sentence] if current else [sentence]
                current = ""
                continue
            if current and width(current) + width(sentence) + 1 > limit:
                strips.append(current)
                current = ""
            current = join_sentences(current, sentence)
        if current:
            strips.append(current)
    return strips


def local_strips(chunks: Sequence[ScoredChunk]) -> list[Strip]:
    return [
        Strip(
            text, 0.0, False, "local", file=hit.chunk.file, pages=hit.chunk.pages, order=(i, j), chunk_id=hit.chunk.id
        )
        for i, hit in enumerate(chunks)
        for j, text in enumerate(decompose(hit.chunk.text))
    ]


def web_strips(results: Sequence[WebResult]) -> list[Strip]:
    return [
        Strip(text, 0.0, False, "web", url=r.url, title=r.title, order=(i, j))
        for i, r in enumerate(results)
        for j, text in enumerate(decompose(r.text or r.snippet))
    ]


def refine(question: str, strips: Sequence[Strip], scorer: SimilarityEvaluator, keep: int, floor: float) -> list[Strip]:
    """Every strip scored and marked kept or dropped, kept ones in document order first."""
    if not strips:
        return []
    grades = scorer.grade(question, [s.text for s in strips]).grades
    scored = [replace(s, score=g.score) for s, g in zip(strips, grades, strict=True)]
    allowed = [i for i, s in enumerate(scored) if not addresses_the_assistant(s.text)]
    ranked = sorted(allowed, key=lambda i: -scored[i].score)
    kept = {i for i in ranked[:keep] if scored[i].score >= floor}
    marked = [replace(s, kept=i in kept) for i, s in enumerate(scored)]
    return sorted((s for s in marked if s.kept), key=lambda s: s.order) + [s for s in marked if not s.kept]
