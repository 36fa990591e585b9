"""The asks of a question: "How do I set the margins, and how do I change the font?" is two questions.

Searched as one, a question of two asks finds the passages of the ask its words weigh more, and the answer leaves the
other out. Split, each ask is searched, graded and answered on its own (``crag.pipeline``), and the answer says which
ask each quote answers. A question is split only where a second ask opens with its own question word ("and how…",
"以及如何…") or after a question mark, and only into asks that name something of their own: "What are R and S?"
and "How do I install and remove packages?" stay whole.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from crag.followups import points_back
from crag.lexicons import alternation, words
from crag.prompts import Reading
from crag.terms import specific_terms
from crag.text import content_words, has_han
from crag.tuning import TUNING
from crag.types import Expansion

# Where a second ask starts: after a question mark or a semicolon; or at "and" / "以及" / a comma when a question
# word follows ("…, and how do I…", "…以及如何…", "…，怎么…").
_QUESTION_WORD_EN = alternation("question-words", "latin")
_QUESTION_WORD_ZH = alternation("question-words", "han")
_SPLIT = re.compile(  # each way in starts once per run of spaces (possessive, after a non-space): linear on any text
    rf"(?<=[?？;；])\s*+(?=\S)"
    rf"|(?<!\s)(?:\s*+,\s*+|\s++)(?:and|also|plus)\s++(?={_QUESTION_WORD_EN})"
    rf"|(?<!\s)\s*+,\s++(?={_QUESTION_WORD_EN})(?!is\b|are\b|do\b|does\b)"
    rf"|(?<!\s)\s*+(?:以及|并且|另外|还有|同时|和|与)\s*+(?={_QUESTION_WORD_ZH})"
    rf"|(?<!\s)\s*+[，,]\s*+(?:(?:那么|还有|另外|以及)\s*+)?(?={_QUESTION_WORD_ZH})",
    re.IGNORECASE,
)
# An ask of its own names something: at least one word that is not how a question asks.
_ASKING = frozenset(words("asking-words"))
# What joins an ask to the one before: not part of it ("以及 bzip2 怎么…" is asked as "bzip2 怎么…").
_LEADING = re.compile(
    rf"^(?:{alternation('ask-joins', script='latin')}\s*|{alternation('ask-joins', script='han')}\s*)", re.IGNORECASE
)


def asks(question: str) -> list[str]:
    """The asks of a question, in order; the question alone when it has one (or too many to be asks). A piece that
    is no question of its own belongs to its neighbour: one that asks nothing ("R 的基础绘图里，…") to the ask after
    it; one that names too little to be asked alone ("…? Why?", "…？用哪个函数？") or points back ("…and how do I
    change it?") to the ask before it."""
    merged: list[str] = []
    waiting = ""  # a piece that asks nothing: it opens the next ask
    for piece in (_LEADING.sub("", p.strip(" ,，;；")) for p in _SPLIT.split(question)):
        if not piece:
            continue
        if not _QUESTION.search(piece):
            waiting = f"{waiting} {piece}".strip()
            continue
        if waiting:
            piece, waiting = f"{waiting}，{piece}" if has_han(waiting) else f"{waiting}, {piece}", ""
        if merged and (
            len(_own(piece)) < TUNING.asks.own_words or points_back(piece) or not _new_subject(piece, merged)
        ):
            merged[-1] = f"{merged[-1]} {piece}"
        else:
            merged.append(piece)
    if waiting or not 1 < len(merged) <= TUNING.asks.max_asks:
        return [question]
    return [m[:1].upper() + m[1:] if re.match(_QUESTION_WORD_EN, m, re.IGNORECASE) else m for m in merged]


_QUESTION = re.compile(rf"[?？]|\b{_QUESTION_WORD_EN}|{_QUESTION_WORD_ZH}|吗|呢", re.IGNORECASE)


def _own(piece: str) -> list[str]:
    return [w for w in content_words(piece) if w not in _ASKING]


def _new_subject(piece: str, before: list[str]) -> bool:
    """Whether an ask names a subject of its own: a name, an identifier or a rare word (``specific_terms``) that the
    asks before it do not name. "…, and what values are allowed?" goes on about the subject of the ask before."""
    named = {t.text.lower() for ask in before for t in specific_terms(ask)}
    return any(t.text.lower() not in named for t in specific_terms(piece))


# "Compare A and B", "the difference between A and B?", "A vs B", "比较一下 A 与 B", "A 和 B 有什么区别": one ask
# per side. Found piece by piece (no pattern spans both sides), so that no text makes a pattern backtrack.
_COMPARE_EN = re.compile(r"\b(?:compare|comparison of|differences? between)\s++", re.IGNORECASE)
_JOIN_EN = re.compile(r"\s(?:and|with|to|vs\.?|versus)\s", re.IGNORECASE)
_VERSUS = re.compile(r"\s(?:vs\.?|versus)\s", re.IGNORECASE)
_CONTEXT_EN = re.compile(r"\s(?:in|for|on|when)\s|[?？]|\.(?!\w)", re.IGNORECASE)  # not the dot of read.csv
_COMPARE_ZH = ("比较一下", "对比一下", "比较", "对比")
# 比较 before a description is the adverb "fairly", not the verb "compare": "比较常用的R包和Python包有哪些" asks for
# fairly common packages. A description is a few Chinese characters then 的 ("比较新的", "比较容易出错的"); the
# first side of a comparison is a name ("比较 gzip 和 bzip2") or a thing and its join ("比较表格和图片").
_FAIRLY = re.compile(r"比较(?:(?![和与跟及])[\u3400-\u4dbf\u4e00-\u9fff]){1,4}的")
_DIFFERENCE_ZH = re.compile(r"(?:之间的|之间|的)?(?:有)?(?:什么|哪些)?(?:区别|差别|异同|不同)")
_JOIN_ZH = re.compile(r"和|与|跟")


def _sides(question: str) -> tuple[str, str] | None:
    """The two things a comparison compares, as written, or None."""
    if found := _COMPARE_EN.search(question):
        rest = question[found.end() :]
        rest = rest[: m.start()] if (m := _CONTEXT_EN.search(rest, pos=1)) else rest
        if join := _JOIN_EN.search(rest):
            return rest[: join.start()], rest[join.end() :]
    if versus := _VERSUS.search(question):
        return question[: versus.start()], question[versus.end() :].rstrip("?？. ")
    head = question.strip()
    if found := _DIFFERENCE_ZH.search(head):
        head = head[: found.start()]
    elif not head.startswith(_COMPARE_ZH) or _FAIRLY.match(head):
        return None
    head = next((head[len(w) :] for w in _COMPARE_ZH if head.startswith(w)), head).rstrip("。？? ")
    if join := _JOIN_ZH.search(head):
        return head[: join.start()], head[join.end() :]
    return None


def compared(question: str) -> list[tuple[str, str]]:
    """For a question that compares two things, each side and what to search for it: the question with the other
    side's name left out ("Compare bzip2 and gzip" → ("bzip2", "Compare bzip2 and"), ("gzip", "Compare and gzip"));
    [] for any other question."""
    sides = _sides(question)
    if sides is None:
        return []
    a, b = (side.strip() for side in sides)
    if not (specific_terms(a) and specific_terms(b)):  # two things the documents may name, not two ideas
        return []
    # The rest of the question goes with each side: "Debian 里的 DD 和 DM 有什么区别" asks about DD in Debian, and
    # about DM in Debian.
    item = {side: specific_terms(side)[-1].text for side in (a, b)}
    return [(side, _without(question, item[other])) for side, other in ((a, b), (b, a))]


def _without(question: str, name: str) -> str:
    """The question without one name, as a whole word ("pdfLaTeX" keeps its "LaTeX"), or, in Chinese text that
    runs on without spaces, as written."""
    whole = re.compile(rf"(?<!\w){re.escape(name)}(?!\w)")
    found = whole.search(question) or re.search(re.escape(name), question)
    return " ".join((question[: found.start()] + " " + question[found.end() :]).split()) if found else question


# A small model may cut a question of one ask into the steps of its answer ("How do I make a figure?" into "How do I
# open a figure environment?", "How do I add a caption?"): a split is taken only where the question joins two things.
_JOINED = re.compile(
    r"[?？;；,，、]\s*+(?=\S)|\s(?:and|also|plus|as well as)\s|以及|并且|另外|还有|同时|和|与", re.IGNORECASE
)


def model_asks(question: str, reading: Reading) -> tuple[Expansion, ...]:
    """The asks a model read in a question, each with its words to search by. Its split is taken when the question
    joins two things, each ask names a word of the question (asks in the user's words, not the model's sub-questions),
    and no two are the same; otherwise the question is one ask, searched with all the words the model wrote."""
    said = [
        Expansion(
            ask=" ".join(a.question.split()),
            answer=" ".join(a.answer.split()),
            keywords=tuple(dict.fromkeys(k for k in (" ".join(w.split()) for w in a.keywords) if k)),
        )
        for a in reading.asks
        if a.question.strip() or a.answer.strip() or a.keywords
    ]
    own = set(content_words(question))
    kinds = [frozenset(content_words(e.ask)) for e in said]
    split = 1 < len(said) <= TUNING.asks.max_asks and _JOINED.search(question) is not None
    if split and all(k & own for k in kinds) and len(set(kinds)) == len(kinds):
        return tuple(said)
    return (one_ask(question, said),)


def one_ask(question: str, reading: Sequence[Expansion]) -> Expansion:
    """A model's words for a question, as one ask: every answer and keyword it wrote, or why it wrote none."""
    if len(reading) == 1 and reading[0].ask == question:
        return reading[0]
    return Expansion(
        ask=question,
        answer=" ".join(e.answer for e in reading if e.answer),
        keywords=tuple(dict.fromkeys(k for e in reading for k in e.keywords)),
        error=next((e.error for e in reading if e.error), ""),
    )
