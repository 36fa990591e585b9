"""Plain data that flows between the core and its edges (CLI, UI, API)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from enum import StrEnum
from functools import cached_property
from typing import Annotated, Literal

from pydantic import AliasChoices, Field

from crag.errors import Remedy
from crag.parts import QUOTED, Part, Suggestion, Written, plain
from crag.parts import suggestions as suggested
from crag.tuning import TUNING

# Layout block types, shared by every parser. Headers, footers and page numbers are kept as
# blocks so a parser's output is complete, and dropped by the chunker; footnotes are text that it places.
BLOCK_TYPES = ("text", "title", "table", "equation", "list", "caption", "footnote", "header", "footer", "image", "code")


@dataclass(kw_only=True, frozen=True)
class Block:
    """One layout block of a page, in reading order."""

    type: str  # one of BLOCK_TYPES
    text: str  # plain text; tables as markdown (PyMuPDF) or HTML (MinerU); equations as LaTeX
    page: int  # 1-based
    bbox: tuple[float, float, float, float]  # PDF points, origin top-left: x0, y0, x1, y1
    order: int  # reading order within the page, from 0
    level: int = 0  # heading level of a title (1 is the top), 0 for other blocks


@dataclass(kw_only=True, frozen=True)
class ParsedPDF:
    """A parser's output for one file."""

    blocks: tuple[Block, ...]
    pages: int
    parser: str  # "pymupdf" | "mineru"
    parser_version: str
    warnings: tuple[str, ...] = ()
    ocr_pages: int = 0  # pages read with OCR (scans), their text recognised from the page's image


@dataclass(frozen=True, kw_only=True)
class Chunk:
    """A retrievable piece of a document, with everything needed to cite and highlight it."""

    id: str
    text: str
    file: str  # path relative to the files folder
    pages: tuple[int, ...]  # 1-based; a chunk may span two pages
    section: str = ""  # heading path, " > "-joined
    bboxes: tuple[tuple[int, float, float, float, float], ...] = ()  # (page, x0, y0, x1, y1)
    block_types: tuple[str, ...] = ()
    parser: str = ""
    parser_version: str = ""
    file_hash: str = ""


class Method(StrEnum):
    """Who graded a passage for the retrieval evaluator."""

    LLM = "llm"  # the chat model
    SIMILARITY = "similarity"  # the similarity scorer, chosen as the evaluator
    FALLBACK = "fallback"  # the similarity scorer, in place of an LLM grader that gave no grade
    DOCUMENT = "document"  # none: a whole document's opening, asked about as such (``crag.overview``)

    @property
    def trusted(self) -> bool:
        """Whether a grade of this kind says that a passage answers, not only that it is on the question's topic: the
        chat model's, in whatever structured output mode its server needed. A similarity grade, also in place of a
        model's that failed, is held to the question's terms before it makes the action Correct."""
        return self is Method.LLM


class Verdict(StrEnum):
    """What the LLM grader says a passage does for the question."""

    ANSWERS = "answers"
    PARTLY = "partly"
    NO = "no"


def graded_by(method: Method | None, detail: str = "") -> str:
    """Who graded, in words: "llm", "llm (json_object)" (the structured output mode), "similarity", or
    "similarity (fallback: <why>)"; "" for a score no evaluator gave."""
    if method is None:
        return ""
    if method is Method.FALLBACK:
        return f"similarity (fallback: {detail})"
    return f"{method} ({detail})" if detail else str(method)


def method_of(graded: str) -> tuple[Method | None, str]:
    """``graded_by`` read back: the method and its detail, from the words a stored chat's trace may hold."""
    name, _, rest = graded.partition(" (")
    detail = rest.removesuffix(")")
    if name == "similarity" and detail.startswith("fallback: "):
        return Method.FALLBACK, detail.removeprefix("fallback: ")
    return (Method(name), detail) if name in Method.__members__.values() else (None, "")


def trusted_grade(method: Method | None, verdict: Verdict | None, answering: str) -> bool:
    """Whether a grade says that a passage answers or does not (``Method.trusted``), not only that it is on the topic.
    A model's partial verdict ("partly", or "answers" with no sentence of the passage to show for it) rests on the
    similarity grade, and is held to the question's terms as that grade is. A grade stored before verdicts is the
    model's own."""
    if method is None or not method.trusted:
        return False
    return verdict is None or verdict is Verdict.NO or (verdict is Verdict.ANSWERS and bool(answering))


@dataclass(frozen=True, kw_only=True)
class ScoredChunk:
    """A chunk with a score: a retrieval score, or the evaluator's relevance in [-1, 1]."""

    chunk: Chunk
    score: float
    method: Method | None = None  # who graded it; None for a retrieval score
    # With Method.LLM the structured output mode it was asked in, when found out; with FALLBACK why the LLM gave none.
    # Words to show: whether the grade is trusted is its method's (``trusted``), whatever they say.
    detail: str = ""
    anchor: str = ""  # the question's term it was searched for, when the first search missed that term
    # Found only with the words of the question before (a follow-up), not by the question's. A stored chat's
    # JSON may name it "context": it loads the same.
    from_history: Annotated[bool, Field(validation_alias=AliasChoices("from_history", "context"))] = False
    # Found only by the model's words for the question (its hypothetical answer, its keywords), not by the question's
    from_model: bool = False
    verdict: Verdict | None = None  # the LLM grader's: answers, partly, or not
    answering: str = ""  # the sentence the LLM grader quoted as the one that answers
    similarity: float | None = None  # beside the LLM grader's verdict: the similarity grade a partial one rests on

    @property
    def graded_by(self) -> str:
        return graded_by(self.method, self.detail)

    @property
    def trusted(self) -> bool:
        """Whether its grade says it answers (``Method.trusted``); a retrieval score says nothing of the kind."""
        return trusted_grade(self.method, self.verdict, self.answering)


class Action(StrEnum):
    """The CRAG action trigger's verdict on the retrieved knowledge (arXiv:2401.15884)."""

    CORRECT = "correct"
    AMBIGUOUS = "ambiguous"
    INCORRECT = "incorrect"

    @property
    def verdict(self) -> str:
        """What the action says of the passages retrieved from the documents, in words no reader takes for a
        verdict on the answer: the retrieval evaluator grades the passages, never what is written from them."""
        return {"correct": "relevant", "ambiguous": "partly relevant", "incorrect": "not relevant"}[self.value]


@dataclass(frozen=True)
class WebResult:
    """One web search hit; ``text`` is the page's main text when it was fetched, else empty."""

    title: str
    url: str
    snippet: str
    text: str = ""


class Drop(StrEnum):
    """Why refinement dropped a strip."""

    INJECTION = "injection"  # it looks like prompt injection (``crag.injection``)
    BELOW_FLOOR = "below_floor"  # it scored below the floor
    NOT_AMONG_BEST = "not_among_best"  # others scored better


@dataclass(frozen=True, kw_only=True)
class Strip:
    """A few sentences of knowledge, scored and kept or dropped by refinement."""

    text: str
    score: float
    kept: bool
    kind: str  # "local" | "web"
    file: str = ""
    pages: tuple[int, ...] = ()
    url: str = ""
    title: str = ""
    order: tuple[int, int] = (0, 0)  # (source position, strip position): document order
    chunk_id: str = ""  # the chunk a local strip came from
    reason: str = ""  # why a dropped strip was dropped, in words
    # Why, as a kind; a strip kept all the same as one of the closest passages keeps it
    drop: Drop | None = None
    # The heading path of its chunk, or its web page's title: what the strip is about. A stored chat's JSON may
    # name it "context": it loads the same.
    section: Annotated[str, Field(validation_alias=AliasChoices("section", "context"))] = ""

    @property
    def scored_text(self) -> str:
        """What relevance is judged on: a strip in a section "How do I clean up my workspace?" is about that."""
        return f"{self.section}\n{self.text}" if self.section else self.text


@dataclass(frozen=True, kw_only=True)
class Source:
    """A numbered source the answer may cite as [n]."""

    n: int
    kind: Literal["local", "web"]
    text: str  # the refined knowledge taken from it
    file: str = ""
    pages: tuple[int, ...] = ()
    url: str = ""
    title: str = ""
    chunk_ids: tuple[str, ...] = ()
    bboxes: tuple[tuple[int, float, float, float, float], ...] = ()
    section: str = ""  # the headings above the passage, "2.2 Uninstalling > 2.2.3 With tlmgr"

    @property
    def snippet(self) -> str:
        return self.text if len(self.text) <= 300 else self.text[:297].rstrip() + "..."


@dataclass(frozen=True)
class TermCheck:
    """The question's specific terms (names, identifiers, numbers, rare words) and which the passages lack.

    A question whose specific term no retrieved passage mentions is not answered by them, however close
    the topic: "PDF/A" against a Ghostscript guide that never mentions it.
    """

    terms: tuple[str, ...] = ()  # as the question writes them
    missing: tuple[str, ...] = ()  # in none of the retrieved passages
    unknown: tuple[str, ...] = ()  # in no passage of the whole knowledge base (a subset of missing)
    decisive: bool = False  # the question is about what the documents lack: the action is Incorrect

    def ceiling(self, upper: float) -> float:
        """The highest grade this near miss leaves the passages: ``TUNING.near_miss.score`` when it is decisive,
        just below ``upper`` (Ambiguous at most) when a term is missing, no cap otherwise."""
        if self.decisive:
            return TUNING.near_miss.score
        return upper - 0.01 if self.missing else math.inf


class ThresholdsFrom(StrEnum):
    """Where the thresholds an answer was decided with came from."""

    SETTINGS = "settings"  # the app's settings (CRAG_UPPER_THRESHOLD, CRAG_LOWER_THRESHOLD)
    CHOSEN = "chosen"  # chosen for this question: the page's Answer settings, or an argument
    FITTED = "fitted"  # fitted to the ratings of the scope's answers, and applied to that scope (``crag.calibration``)


@dataclass(frozen=True, kw_only=True)
class Expansion:
    """The model's words for one ask, searched beside the question's own: a short answer as the documents would write
    it, and the keywords the answering passage would hold (HyDE). Empty, with ``error``, when the model gave none."""

    ask: str  # the ask as the model read it, standing alone
    answer: str = ""
    keywords: tuple[str, ...] = ()
    error: str = ""  # why the question's own words were searched alone: the model failed or ran out of time

    @property
    def queries(self) -> tuple[str, ...]:
        """What is searched: the hypothetical answer, and the keywords together."""
        return tuple(q for q in (self.answer, " ".join(self.keywords)) if q.strip())


@dataclass(frozen=True, kw_only=True)
class Trace:
    """How an answer was made, for the expander in the UI and for ``ask --json``."""

    question: str
    standalone_question: str
    action: Action | None = None
    retrieved: tuple[ScoredChunk, ...] = ()  # scored by the evaluator, in retrieval order
    thresholds: tuple[float, float] = (-1.0, 1.0)  # (lower, upper) the action was decided with
    thresholds_from: ThresholdsFrom | None = None  # where they came from; None in answers stored before it was kept
    terms: TermCheck = TermCheck()
    strips: tuple[Strip, ...] = ()
    web_query: str = ""
    web_results: tuple[WebResult, ...] = ()
    web_error: str = ""
    notes: tuple[str, ...] = ()
    hint: str = ""  # what the user could do for a better answer, shown under it
    remedy: Remedy | None = None  # what the user must do for any answer, which each edge says in its own words
    # What a written answer states (names, identifiers, numbers) that neither its sources nor the question mention
    unsupported: tuple[str, ...] = ()
    # Where the question was asked: folders and files relative to the files folder; empty for every document
    scope: tuple[str, ...] = ()
    expansions: tuple[Expansion, ...] = ()  # the model's words each ask was searched with too
    timings: dict[str, float] = field(default_factory=dict)
    llm_calls: int = 0
    llm_calls_before_answer: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def refined_context(self) -> str:
        return "\n".join(s.text for s in self.strips if s.kept)


class AnswerKind(StrEnum):
    """How the answer's text was made."""

    EVIDENCE = "evidence"  # sentences quoted from the sources, each with its [n]; no model wrote it
    GENERATED = "generated"  # written by the chat model from the sources
    NO_ANSWER = "no_answer"  # no usable knowledge: a fixed message says so and why


# What an answer that no model wrote says of itself, on the page and in an export.
NOT_WRITTEN = {
    AnswerKind.EVIDENCE: "quoted from the sources: no model wrote this",
    AnswerKind.NO_ANSWER: "no usable knowledge: no model was asked to improvise",
}


CITATION = re.compile(r"\[(\d+(?:\s*[,，]\s*\d+)*)\]")


def cited(text: str) -> set[int]:
    """The source numbers a text cites as [n] (also [1, 2] and [1][2])."""
    return {int(n) for group in CITATION.findall(text) for n in re.split(r"[,，]", group)}


def citations(parts: Sequence[Part]) -> set[int]:
    """The sources an answer cites: those its model's sentences cite, and those of what it quotes. A heading, an
    outline or a note holds a document's words or the app's: a "[2]" there ("Appendix [2]") cites nothing."""
    numbers: set[int] = set()
    for part in parts:
        if isinstance(part, Written):
            numbers |= set(part.cited) or cited(part.text)
        elif isinstance(part, QUOTED):
            numbers.add(part.n)
    return numbers


@dataclass(frozen=True, kw_only=True)
class Answer:
    """One answer: its parts (``crag.parts``), its numbered sources and how it was made."""

    parts: tuple[Part, ...]
    backend: str
    model: str
    sources: tuple[Source, ...] = ()
    trace: Trace | None = None
    complete: bool = True
    error: str = ""
    kind: AnswerKind = AnswerKind.GENERATED

    @cached_property
    def text(self) -> str:
        """The answer's text (``crag.parts.plain``): what the CLI prints, what a chat keeps, what is exported."""
        return plain(self.parts).strip()

    @property
    def suggestions(self) -> tuple[Suggestion, ...]:
        """Sections whose titles are closest to a question not answered for sure, to ask again in the documents'
        words (its ``Suggestions`` part)."""
        return suggested(self.parts)

    @property
    def action(self) -> Action | None:
        return self.trace.action if self.trace else None

    @property
    def cited_sources(self) -> tuple[Source, ...]:
        """The sources the text cites. Only these are shown as citations; a number that names no
        source cites nothing."""
        numbers = citations(self.parts)
        return tuple(s for s in self.sources if s.n in numbers)

    @property
    def uncited(self) -> bool:
        """A written answer that cites none of the sources it was given: they are shown as given, not cited."""
        return bool(self.sources) and not self.cited_sources


# ---------------------------------------------------------------------------------------------
# Builds

PARSE_SHARE = 0.8  # of a file's slot on a progress bar; embedding takes the rest


@dataclass(kw_only=True, frozen=True)
class Progress:
    """Where a build is, for progress bars: stage, file i/N, page j/M (chunk j/M while embedding).
    Stage "ocr" is parsing too: page j of M is being read with OCR. Stage "finished": file i is done, and
    ``result`` says how (indexed, or failed and why), while the build goes on with the next."""

    stage: str  # "scanning" | "parsing" | "ocr" | "embedding" | "finished" | "writing" | "done"
    file: str = ""
    file_index: int = 0
    file_count: int = 0
    page: int = 0
    page_count: int = 0
    result: FileResult | None = None  # with stage "finished"
    # The whole build so far, for its time left (``crag.jobs.Pace``); 0 where not known (a build's first steps).
    pages_total: int = 0  # pages of the files it reads, less those of files that failed before they were read
    pages_read: int = 0
    passages: int = 0  # passages made (chunked) so far, from ``pages_chunked`` pages
    pages_chunked: int = 0
    embedded: int = 0  # passages embedded so far
    embed_seconds: float = 0.0  # the time spent embedding them

    @property
    def fraction(self) -> float:
        """Share of the build done, never going back: parsing fills most of a file's slot, embedding the rest."""
        if self.stage == "done":
            return 1.0
        if self.stage == "writing":
            return 0.99
        if not self.file_count:
            return 0.0
        within = self.page / self.page_count if self.page_count else 0.0
        if self.stage == "parsing":
            done = PARSE_SHARE * within
        elif self.stage == "ocr":  # reported as page j starts, so j - 1 pages are done
            done = PARSE_SHARE * (self.page - 1) / self.page_count if self.page_count else 0.0
        elif self.stage == "embedding":
            done = PARSE_SHARE + (1 - PARSE_SHARE) * within
        elif self.stage == "finished":
            done = 1.0
        else:
            done = 0.0
        return min(0.99, (max(self.file_index - 1, 0) + done) / self.file_count)  # 1.0 is for "done"


OnProgress = Callable[[Progress], None]


@dataclass(kw_only=True, frozen=True)
class FileResult:
    """What a build did with one file; the index's manifest is one of these per file."""

    file: str
    status: str  # indexed | unchanged | removed | failed | skipped
    pages: int = 0
    chunks: int = 0
    seconds: float = 0.0
    error: str = ""
    warnings: tuple[str, ...] = ()
    hash: str = ""
    parser: str = ""
    parser_version: str = ""
    # What the file looked like when it was hashed: a file with the same size and modification time is not
    # read again. 0 when not known (older manifests, a file changed just before the build): it is hashed.
    size: int = 0
    mtime_ns: int = 0
    ocr_pages: int = 0  # of ``pages``, those read with OCR (a scan); 0 in manifests of older builds
    # The PDF's own title and bookmarks (level, heading, page), for questions about the whole document
    # (``crag.overview``); empty when it has none, and in manifests of older builds.
    title: str = ""
    outline: tuple[tuple[int, str, int], ...] = ()
    # Imported from an archive without its PDF, which the files folder does not hold: a sync keeps its passages
    # rather than count it removed, until its PDF is in the folder (then it is a file like any other) or a full
    # rebuild, which indexes the folder alone. Sources from it name the file and page, without the page's image.
    detached: bool = False

    @classmethod
    def from_json(cls, data: dict) -> FileResult:
        """A manifest entry as written by an older or newer build: unknown keys ignored."""
        known = {f.name for f in fields(cls)}
        return cls(
            **{k: v for k, v in data.items() if k in known}
            | {"warnings": tuple(data.get("warnings", ())), "outline": tuple(map(tuple, data.get("outline", ())))}
        )
