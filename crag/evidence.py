"""Evidence answers: the sentences of the refined knowledge that answer the question, quoted with [n].

Without a real chat model (the embedded backend), no model writes prose that the user must trust.
The answer is the evidence itself: the best few strips of refinement (a strip is a few whole sentences),
quoted verbatim in document order with the number of their source, under a short lead line in the
question's language. Chinese, English and mixed documents work alike: nothing is translated or rewritten.

Strips are chosen by the score refinement gave them, in the context of their section, and by whether they hold
what the question asks for: its own names, or a fact (a number, a command, an identifier). Sentence by sentence,
the best match to a question is often the document restating the problem ("a file exported from a spreadsheet
drops trailing fields"); the answer is the sentence after it, in the same strip. A long strip is quoted from the
sentences that hold the fact, never cut inside a sentence. Page furniture and asides (footnotes, licence text,
contact lines, version and date lines) are left out unless the question asks for them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from crag.blocks import (
    BREAK,
    Code,
    Faq,
    Table,
    code_text,
    held_open,
    is_block,
    is_code,
    joined,
    opens,
    table_rows,
)
from crag.lexicons import alternation
from crag.parts import Lead, Part
from crag.quotes import LEADS as LEADS
from crag.quotes import SCOPED_LEADS as SCOPED_LEADS
from crag.quotes import passage_parts, spaced
from crag.terms import Vocabulary, is_identifier, mentions, specific_terms
from crag.text import (
    ASKS,
    EN_STOP,
    ENDED,
    NOTE,
    content_words,
    drop_glyphs,
    join_lines,
    lexical_tokens,
    split_sentences,
    width,
)
from crag.tuning import TUNING
from crag.types import Action, Source, Strip

HEADING_WIDTH = 160  # a FAQ question shown before its answer's quote: one line, about 40 Chinese characters
# The work all the quoting of one answer may do (trimming asides, finding each strip's best run, weighing what it
# holds), counted in characters of the sentences it reads (``TUNING.evidence``): a second wall behind linear text
# rules, so that no text keeps a thread busy for minutes. Counted in work, not time, so that a question is quoted
# the same on a busy machine as on an idle one. Past it, the remaining strips are quoted as they are.
QUOTE_BUDGET = TUNING.evidence.quote_work

# A rule starts at the first of its spaces (never inside a run of them: each start would scan the run again).
TABLE_RULE = re.compile(r"(?:(?!\s)|(?<!\s))\|?\s*+-{3,}+\s*+(?:\|\s*+-{3,}+\s*+)*+\|?")
TABLE_MARKUP = re.compile(r"<br\s*/?>|\|")
# A Markdown table (pymupdf4llm's): a line that opens a row, or the rule under the header. Elsewhere a pipe is the
# document's own: "gzip -dc R-x.y.z.tar.gz | tar -xf -", "make check[-devel|all]", "tlmgr update <-all|pkgs>".
TABLE = re.compile(r"^\s*\||\|\s*:?-{3,}", re.MULTILINE)
# Bold from the layout parser ("**foreign** Functions for reading ..."): shown as asterisks inside a quote. Only
# markers around a word go; R's power operator ("2 ** 3") stays.
BOLD = re.compile(r"\*\*(\S(?:[^*]*?\S)?)\*\*")


def flatten(text: str) -> str:
    """A table's markup (pipes, rules, <br>) as plain spaces, bold markers and glyphs that are not text dropped,
    whitespace collapsed. A text that holds no table keeps its pipes: a quote must not change a command."""
    # A <br> is the parser's line break inside a table cell, never the document's text, even in a piece of a cell
    # that lost its row ("…并在新<br>版本的…").
    text = BOLD.sub(r"\1", drop_glyphs(text))
    text = join_lines(BREAK.split(text), dehyphenate=False) if BREAK.search(text) else text
    if TABLE.search(text):
        text = TABLE_MARKUP.sub(" ", TABLE_RULE.sub(" ", text))
    return " ".join(text.split())


def pieces(text: str) -> list[str]:
    """A strip's sentences, table markup flattened, the questions marked as ``Faq``: a question ends a quote
    and is never quoted, but it is shown before the passage it heads, so the reader sees what it answers. Code and
    tables (paragraphs that keep their line breaks, see ``crag.blocks``) are one piece each, a ``Code`` or a
    ``Table``."""
    out: list[str] = []
    for paragraph in text.split("\n\n"):
        if (rows := table_rows(paragraph)) is not None:
            out.append(Table.of(rows))
        elif is_code(paragraph):
            out.append(Code(code_text(paragraph)))
        else:
            out += [Faq(s) if ASKS.search(s) else s for s in split_sentences(flatten(paragraph))]
    return [p for p in out if p.strip()]


def readable(text: str) -> bool:
    """Words, not debris: a table of contents' dot leaders (". . . . . 12") or a rule says nothing, so it is
    never quoted. Letters, digits and Chinese characters must be at least half of what is not a space."""
    chars = [c for c in text if not c.isspace()]
    return bool(chars) and sum(c.isalnum() for c in chars) >= TUNING.evidence.readable * len(chars)


def worth_quoting(parts: Sequence[str]) -> bool:
    """Enough words to say something: prose that is no debris, a table whose cells say something, or code (whose
    operators are no debris) with a name or a number in it."""
    prose = joined([p for p in parts if not is_block(p)])
    cells = " ".join(flatten(p) for p in parts if isinstance(p, Table))
    code = " ".join(p for p in parts if isinstance(p, Code))
    said = f"{prose} {cells} {code}".strip()
    return width(said) >= TUNING.evidence.min_width and (readable(f"{prose} {cells}") or any(c.isalnum() for c in code))


def headed_parts(parts: Sequence[str]) -> list[tuple[str, list[str]]]:
    """Runs of pieces between questions, each a passage to quote whole, with the question just before it
    ("" when none); debris too short to say anything is left out. A sentence is never dropped from inside a
    passage: that would change what it says."""
    out: list[tuple[str, list[str]]] = []
    current: list[str] = []
    heading = ""
    for part in [*parts, Faq("")]:
        if not isinstance(part, Faq):
            current.append(part)
            continue
        if current and worth_quoting(current):
            out.append((heading, current))
        # A question run together with the text before it (no full stop between them) is no heading.
        current, heading = [], str(part) if width(part) <= HEADING_WIDTH else ""
    return out


def headed_passages(parts: Sequence[str]) -> list[tuple[str, str]]:
    return [(heading, joined(run)) for heading, run in headed_parts(parts)]


def passages(parts: Sequence[str]) -> list[str]:
    return [text for _, text in headed_passages(parts)]


# ---------------------------------------------------------------------------------------------
# What a quote leaves out, unless the question asks for it


@dataclass(frozen=True)
class Aside:
    """A kind of sentence that is page furniture or an aside, not an answer: found by ``found``, wanted only when the
    question matches ``wanted``."""

    name: str
    found: re.Pattern[str]
    wanted: re.Pattern[str]


# The words of each rule are lexicons (``crag/lexicons/*.txt``); what is structure (an address, a year, a date,
# the count of words) stays here. A question asks for an aside when it holds a word of the aside's ``-asked`` list.
_LICENCE = alternation("licence")
_CONTACT_LABEL = alternation("contact-labels")
_VERSION_WORD = alternation("version-words")
_MONTH = alternation("months")
_REQUIREMENT = alternation("version-requirement")
_HAN = "\u3400-\u4dbf\u4e00-\u9fff"  # Chinese characters, counted in a version line


def _wanted(name: str) -> re.Pattern[str]:
    return re.compile(alternation(f"{name}-asked"), re.IGNORECASE)


ASIDES = (
    Aside(
        "licence",
        re.compile(rf"{_LICENCE}|\bcopyright\s*(?:©|\(c\)|\d{{4}})|©\s*\d{{4}}", re.IGNORECASE),
        _wanted("licence"),
    ),
    Aside(
        "contact",
        # An address is looked for from the start of its run of characters only: from every one, a long word
        # would be scanned again and again.
        re.compile(
            rf"(?<![\w.+-])[\w.+-]++@(?!{alternation('example-domains')})[\w-]++(?:\.[\w-]++)+|{_CONTACT_LABEL}\s*:",
            re.IGNORECASE,
        ),
        _wanted("contact"),
    ),
    # A line of at most eight words (and eight Chinese characters, a Chinese clause being one word) that names a
    # version or a date ("Version 1.0.8, 13 July 2019.", "最后更新：2023年3月1日"), but not one that says what version
    # is required ("Use version 4 or later."). Each word is taken whole (possessive ``*+``,
    # ``++``): with a plain ``\W*`` that may match nothing, a long run of letters (a Chinese clause is one) splits into
    # words in more ways than can be tried before the count fails.
    Aside(
        "version",
        re.compile(
            rf"^(?=.*(?:{_VERSION_WORD}\s*\d|\b\d{{4}}[-/.]\d{{1,2}}|\d{{4}}\s*年|{_MONTH}\s*\d))"
            rf"(?!.*{_REQUIREMENT})(?!(?:[^{_HAN}]*+[{_HAN}]){{{TUNING.evidence.stamp_han + 1}}})"
            rf"(?:\W*+\w++){{1,{TUNING.evidence.stamp_words}}}+\W*+$",
            re.IGNORECASE,
        ),
        _wanted("version"),
    ),
)
FOOTNOTE_WANTED = _wanted("footnote")
# Words a sentence cannot end on: a quote ending in one was cut ("…include the > repeat expr statement and the").
UNFINISHED = re.compile(rf"\b(?:{'|'.join(sorted(EN_STOP))})\s*$", re.IGNORECASE)


def aside(sentence: str, question: str) -> str:
    """The kind of aside a sentence is (``licence``, ``contact``, ``version``), or "" when it is none or the question
    asks for what it is (a copyright line is also a date line)."""
    kinds = [a for a in ASIDES if a.found.search(sentence)]
    return "" if any(a.wanted.search(question) for a in kinds) else next((a.name for a in kinds), "")


def cut_short(sentence: str) -> bool:
    """A sentence that stops before its end: no full stop, and its last word is one no sentence ends on."""
    return not is_block(sentence) and not ENDED.search(sentence) and UNFINISHED.search(sentence) is not None


def left_out(sentence: str, question: str) -> bool:
    """Whether a sentence at either end of a quote is left out: an aside, or a sentence its chunk cut short."""
    return not is_block(sentence) and bool(aside(sentence, question) or cut_short(sentence))


def closed(parts: Sequence[str]) -> list[str]:
    """The pieces of a quote without an end its chunk cut inside an expression: an unfinished last sentence that opens a
    bracket or a quotation ("To read it, call read.table(file, header") goes, and code goes back to the last line
    after which no more are open than before it. [] when nothing else is left."""
    kept = list(parts)
    while kept and not is_block(kept[-1]) and not ENDED.search(kept[-1]) and opens(joined(kept[:-1]), kept[-1]):
        kept.pop()
    if kept and isinstance(kept[-1], Code) and opens(joined(kept[:-1]), kept[-1]):
        before, lines = joined(kept[:-1]), kept[-1].split("\n")
        cut = next((n for n in range(len(lines) - 1, 0, -1) if not opens(before, "\n".join(lines[:n]))), 0)
        kept[-1] = Code("\n".join(lines[:cut])) if cut else kept[-1]
    return kept


# ---------------------------------------------------------------------------------------------
# What holds the answer

# A command or an identifier: \\includegraphics, read.table(), --all, x86_64, \\begin{tabular}. A call is looked
# for from the start of its run of name characters (".libPaths()" too), each run once.
FACT = re.compile(r"\\[A-Za-z]{2,}|(?<![\w.])\.*+\w[\w.]*+\(\)|(?<![\w-])--?[A-Za-z][\w-]+|\d")
WORDS = re.compile(r"\S+")
SPACE = re.compile(r"\s+")


def holds_fact(sentence: str) -> bool:
    """A number, a command or an identifier: what a "how" or "how many" question is answered with."""
    return FACT.search(sentence) is not None or any(is_identifier(w) for w in WORDS.findall(sentence))


def answer_weight(sentence: str, question: str) -> float:
    """How much of what the question asks a sentence holds, in [0, 1]: the share of the question's specific terms
    it mentions in any form (its content words when it has none), and a fact."""
    terms = specific_terms(question)
    here = Vocabulary([sentence])
    if terms:
        share = sum(mentions(t, here) for t in terms) / len(terms)
    else:
        words = content_words(question)
        present = set(lexical_tokens(sentence))
        share = sum(w in sentence if not w.isascii() else w in present for w in words) / len(words) if words else 0
    return (share + holds_fact(sentence)) / 2


def quotable(strip: Strip, question: str) -> Strip | None:
    """The strip as it is quoted: a footnote or an aside left out unless asked for, a sentence cut short dropped
    from its end, a long strip narrowed to its best run of sentences. None when nothing worth quoting is left."""
    return _quotable(strip, pieces(strip.text), question)


def _quotable(strip: Strip, whole: Sequence[str], question: str) -> Strip | None:
    """``quotable``, of a strip already cut into its ``pieces``."""
    if NOTE.match(strip.text) and not FOOTNOTE_WANTED.search(question):
        return None
    sentences = list(whole)
    while sentences and left_out(sentences[0], question):
        sentences = sentences[1:]
    while sentences and left_out(sentences[-1], question):
        sentences = sentences[:-1]
    sentences = closed(sentences)
    if not sentences:
        return None
    if sum(width(x) for x in sentences) > TUNING.evidence.quote_window:
        sentences = best_run(sentences, question)
    text = joined(sentences)
    return replace(strip, text=text) if text != strip.text else strip


def best_run(sentences: Sequence[str], question: str) -> list[str]:
    """The run of neighbouring sentences, at most ``quote_window`` wide (``TUNING.evidence``; or one sentence), that
    holds the most of what the question asks; the earliest of equals. A FAQ's question stays with the answer after
    it. A run never ends inside a bracket or a quotation that a later sentence closes: it ends a sentence earlier
    (when every run would, the runs are taken as they come)."""
    weights = [answer_weight(x, question) for x in sentences]
    found = _best(sentences, weights, held_open(sentences)) or _best(sentences, weights, [False] * len(sentences))
    assert found is not None  # with no bracket held open, the first sentences make a run
    start, end = found
    if start and isinstance(sentences[start - 1], Faq):
        start -= 1
    return list(sentences[start:end])


def _best(sentences: Sequence[str], weights: Sequence[float], inside: Sequence[bool]) -> tuple[int, int] | None:
    best, best_weight = None, -1.0
    for start in range(len(sentences)):
        end, size = start, 0
        while end < len(sentences) and (end == start or size + width(sentences[end]) <= TUNING.evidence.quote_window):
            size += width(sentences[end])
            end += 1
        while end > start + 1 and inside[end - 1]:
            end -= 1
        if not inside[end - 1] and sum(weights[start:end]) > best_weight:
            best, best_weight = (start, end), sum(weights[start:end])
    return best


def select(
    strips: Sequence[Strip], question: str = "", notes: list[str] | None = None, budget: int | None = None
) -> list[Strip]:
    """The best kept strips to quote, within the budget, in document order: by their score, lifted by what they hold
    of the question's names and a fact, within ``TUNING.evidence.margin`` of the best. A strip that says nothing new
    is left out: neighbouring chunks share their edges, so one sentence may come in two, or one chunk may end in the
    first half of a sentence that the next holds whole.

    Trimming and weighing the strips may do ``budget`` units of ``work`` (``QUOTE_BUDGET``); a strip whose work would
    pass it is quoted as it is, ranked by its score alone, and ``notes`` says so."""
    budget = QUOTE_BUDGET if budget is None else budget
    rank, untrimmed = _weighed([s for s in strips if s.kept], question, budget)
    if untrimmed and notes is not None:
        notes.append(
            f"quoting ran out of its work budget ({budget:,} characters' worth): {untrimmed} strip(s) are quoted as "
            "they are, asides and all, ranked by their score alone"
        )
    ranked = sorted(rank, key=lambda s: -rank[s])
    chosen: list[tuple[Strip, list[str], int]] = []  # with its sentences and its width
    for strip in ranked:
        if len(chosen) == TUNING.evidence.max_strips or (
            chosen and rank[strip] < rank[ranked[0]] - TUNING.evidence.margin
        ):
            break
        quotable_text = passages(pieces(strip.text))
        sentences = [s for text in quotable_text for s in split_sentences(text)]  # flattened: whitespace collapsed
        size = sum(width(p) for p in quotable_text)
        if not size or _within(sentences, [s for _, said, _ in chosen for s in said]):
            continue
        # A strip chosen before whose every sentence this one holds (whole or as the rest of a cut one) goes.
        kept = [c for c in chosen if not _within(c[1], sentences)]
        if kept and sum(size for _, _, size in kept) + size > TUNING.evidence.max_width:
            continue
        chosen = [*kept, (strip, sentences, size)]
    return sorted((strip for strip, _, _ in chosen), key=lambda s: (s.kind != "local", s.order))


def work(sentences: Sequence[str]) -> int:
    """The work of quoting these sentences, in characters read: each rule over a sentence reads it in steps linear in
    its length (``tests/test_patterns_linear.py``), and each sentence costs ``sentence_work`` more (its weighing)."""
    return sum(len(s) + TUNING.evidence.sentence_work for s in sentences)


def _weighed(strips: Sequence[Strip], question: str, budget: int) -> tuple[dict[Strip, float], int]:
    """The strips as quoted, each with its rank: its score lifted by what it holds of the question. Those whose
    ``work`` would take the work done past ``budget`` are taken as they are, by their score; how many, second."""
    rank: dict[Strip, float] = {}
    untrimmed = done = 0
    for strip in strips:
        # Its characters are counted first: cutting it into sentences reads them.
        whole = pieces(strip.text) if done + len(strip.text) <= budget else None
        if whole is None or done + work(whole) > budget:
            rank[strip] = strip.score
            untrimmed += 1
            continue
        done += work(whole)
        if q := _quotable(strip, whole, question):
            rank[q] = q.score + TUNING.evidence.answer_weight * max(
                (answer_weight(x, question) for x in pieces(q.text)), default=0
            )
    return rank, untrimmed


def _within(sentences: Sequence[str], said: Sequence[str]) -> bool:
    """Whether each sentence is one of those said or a piece of one."""
    return all(any(s in other for other in said) for s in sentences)


def _number(strip: Strip, sources: Sequence[Source]) -> int | None:
    for s in sources:
        if (strip.kind == "local" and strip.chunk_id in s.chunk_ids) or (strip.kind == "web" and strip.url == s.url):
            return s.n
    return None


def evidence_parts(
    quoted: Sequence[Strip], sources: Sequence[Source], language: str, action: Action, scope: Sequence[str] = ()
) -> list[Part]:
    """A lead line per kind of source, then the passages: each quoted whole with its [n], after the document's
    question when the passage answers one (a FAQ). ``quoted``: the strips ``select`` chose; ``scope``: the folders or
    files the question was asked in, which the lead names. Empty when none holds a sentence worth quoting."""
    parts: list[Part] = []
    chosen = [(strip, n) for strip in quoted if (n := _number(strip, sources)) is not None]
    source_text = {s.n: _squeezed(flatten(s.text)) for s in sources}
    for kind in ("local", "web"):
        group = [(strip, n) for strip, n in chosen if strip.kind == kind]
        if not group:
            continue
        lead = "closest" if kind == "local" and action is not Action.CORRECT else kind
        if scope and kind == "local":
            parts.append(Lead(text=SCOPED_LEADS[(language, lead)].format(places=", ".join(scope))))
        else:
            parts.append(Lead(text=LEADS[(language, lead)]))
        parts += [
            part
            for n, _, pieces_ in _runs(group, source_text)
            for faq, run in headed_parts(pieces_)
            for part in passage_parts(faq, run, n)
        ]
    return spaced(parts)


def _runs(group: Sequence[tuple[Strip, int]], source_text: dict[int, str]) -> list[tuple[int, Strip, list[str]]]:
    """Neighbouring strips of one source, read as one passage when their text runs on in the source."""
    runs: list[tuple[int, Strip, list[str]]] = []
    for strip, n in group:
        # A footnote is quoted on its own line: run on, "…解决³原文是…" reads as one sentence.
        last = runs[-1] if runs else None
        follows = last is not None and last[0] == n and last[1].order[1] + 1 == strip.order[1]
        # Only text that runs on in the source reads as one quote: a strip trimmed at the joint does not.
        joint = last is not None and follows and _runs_on(last[2], pieces(strip.text), source_text[n])
        if last is not None and joint and not NOTE.match(strip.text) and not NOTE.match(last[1].text):
            runs[-1] = (n, strip, last[2] + pieces(strip.text))
        else:
            runs.append((n, strip, pieces(strip.text)))
    return runs


def _squeezed(text: str) -> str:
    return SPACE.sub("", text)


def _runs_on(before: Sequence[str], after: Sequence[str], source: str) -> bool:
    """Whether the last sentence quoted before and the first after are neighbours in the source (which a source
    without text cannot tell)."""
    return not (before and after and source) or _squeezed(flatten(f"{before[-1]}\n{after[0]}")) in source
