"""Follow-up questions: checking a model's standalone rewrite, and reading a question with its conversation.

Tiny models turn follow-ups into junk, so a rewrite is checked before it is trusted; without a trusted
model (the embedded backend) a follow-up is read with the words of the question it follows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from crag.lexicons import alternation, words
from crag.text import TOKEN, cjk_share, content_words, han_named, has_han, stem
from crag.tuning import TUNING

History = Sequence[tuple[str, str]]  # (role, text), role "user" | "assistant"

READ_ON = "a follow-up: read with the words of the question it follows"
NEW_QUESTION = (
    "read with the question before it, what it finds names no word of this one: a new question, not a follow-up"
)

_REPEATS = re.compile(r"(.{1,8}?)\1{3,}")


def rewrite_problem(rewrite: str, question: str, history: History) -> str:
    """Why a model's standalone rewrite cannot be trusted, or "" when it can.

    Tiny models turn follow-ups into junk ("1.1.1.1.1…") or into another question: a rewrite must have
    words, must not repeat itself, and must share a content word with the conversation.
    """
    words = TOKEN.findall(rewrite)
    if not words:
        return "it has no words"
    if _REPEATS.search(rewrite) or (len(words) >= 6 and len(set(words)) < len(words) / 2):
        return "it repeats itself"
    known = set(content_words(question)) | {w for _, text in history for w in content_words(text)}
    if not set(content_words(rewrite)) & known:
        return "it shares no word with the conversation"
    return ""


# A follow-up is read with the questions before it back to the one that set the topic, at most
# ``TUNING.followups.chain`` of them: a longer chain of asides is rare and would drown the question.
def conversation_query(question: str, history: History) -> str:
    """The question, then the previous question as it was asked: a follow-up ("And on Windows?", "那行距呢？") is
    retrieved in the context of what it follows, without a model. Whole, the previous question keeps what a list
    of its content words loses: "R" in "How do I run R in batch mode?", and wording the embedder understands.

    When the previous question went on from the one before it, that one comes too, back to the question that
    set the topic: read with "and on Windows?" alone, "what about macOS?" would have lost "install R"."""
    asked = question.strip()
    chain: list[str] = []
    for role, text in reversed(history):
        previous = text.strip()
        if role != "user" or not previous:
            continue
        if previous != asked and previous not in chain:
            chain.append(previous)
        if not _leans_on(previous) or len(chain) == TUNING.followups.chain:
            break
    return " ".join([question, *chain])


# A question that opens with "and" or "what about", or a Chinese one that opens with 那 or ends in 呢, leaves out what
# it is about: it goes on from the question before, whatever a passage says to its few words alone.
_ELLIPTICAL = re.compile(
    rf"^\s*{alternation('follow-on-openers', script='latin')}"
    rf"|^\s*{alternation('follow-on-openers', script='han')}|呢\s*[?？]?\s*$",
    re.IGNORECASE,
)


def elliptical(question: str) -> bool:
    """Whether a question goes on from the one before ("And on Windows?", "那行距呢？")."""
    return _ELLIPTICAL.search(question) is not None


# Words that ask for more of what came before ("Tell me more", "Can you explain?", "具体怎么做？", "还有呢？"): they
# name no topic of their own, so a passage need not name them.
MORE_OF_THE_SAME = frozenset(
    [stem(w) for w in words("more-of-the-same", "latin")] + list(words("more-of-the-same", "han"))
)


def _leans_on(question: str) -> bool:
    """Whether a question leans on the one before: it opens or ends as a follow-up does (``elliptical``), or names
    nothing of its own ("Tell me more", "具体怎么做？")."""
    return elliptical(question) or not _own_words(question)


# Words that point back to what was said before: "Does it run on Windows?", "How do I undo that?", "它支持吗？".
# "it" that stands for nothing ("Is it possible to…", "How long does it take to…") and "that" after a noun ("a
# command that lists…") point at nothing said before.
_POINTS_BACK = re.compile(
    rf"{alternation('pointing-words', script='latin')}"
    rf"|\bit\b(?!\s+(?:is\s+)?{alternation('empty-it')}\s+(?:to|that|if|for|\d))"
    r"|(?:^|\b(?:do|does|did|doing|done|is|are|was|were|about|of|for|with|mean|means|in|on|from|to|use|undo|fix)\s+)"
    r"(?:this|that|these|those)\b"
    rf"|{alternation('pointing-words', script='han')}",
    re.IGNORECASE,
)
# A fragment ("Windows?", "On a Mac?", "怎么卸载？") has no subject of its own: it is asked of the topic before. A
# short question that opens as questions do ("What is gnuplot?") asks about what it names.
_ASKS = re.compile(rf"^\W*{alternation('question-words', script='latin')}", re.IGNORECASE)


def points_back(question: str) -> bool:
    """Whether a question points back to something said before it ("Does it…", "How do I undo that?", "那个…")."""
    return _POINTS_BACK.search(question) is not None


def stands_alone(question: str) -> bool:
    """Whether a question can be understood without the conversation before it: it names its own subject, and
    neither points back ("Does it…", "那个…") nor goes on from the question before (``elliptical``). Only a question
    that cannot stand alone is read with the one before: two unrelated questions in a row are two questions."""
    if _leans_on(question) or points_back(question):
        return False
    words = TOKEN.findall(question)
    han = sum(len(w) for w in words if has_han(w))
    return (
        han > TUNING.followups.fragment_han
        if han
        else len(words) > TUNING.followups.fragment_words or _ASKS.search(question) is not None
    )


def _own_words(question: str) -> list[str]:
    return [word for word in content_words(question) if word not in MORE_OF_THE_SAME]


def adds_to(question: str, *passages: str) -> bool:
    """Whether a passage found for a question read with its conversation names one of the question's own words.

    A follow-up adds to what it follows ("And on Windows?", "那行距呢？"): the passage that answers it names
    what it adds. When the passage names none of the question's words, the question is a new one, not a
    follow-up ("What is the capital of Australia?" after a question on LaTeX figures), and the conversation's
    words must not answer it. A question with no word of its own ("Why?", "Tell me more") is always read with its
    conversation.
    """
    own = _own_words(question)
    if not own:
        return True
    return any(_names(own, passage) for passage in passages)


def _could_name(word: str, passage: str) -> bool:
    """Whether a passage is written in the language of a word: a Chinese word is named by Chinese text, an English
    one by English text."""
    return (cjk_share(passage) >= TUNING.followups.chinese_passage) == has_han(word)


def reading(question: str, alone: float, answered: bool, graded: Sequence[tuple[float, str]], floor: float) -> str:
    """How a question asked in a conversation is read, given the best grade of the passages for it ``alone``, whether
    that ``answered`` it (Correct), and the (grade, passage) pairs for it read with the question before it:

    - READ_ON, with the words of the question it follows, when it goes on from that question ("And on Windows?"),
      or when it was not answered alone and they find a better passage;
    - NEW_QUESTION, as asked, when the passages they find never name its own words (any passage worth keeping, for
      a question that goes on; the best one otherwise): a new topic is not answered from the old one;
    - "", as asked and nothing to say, when it was answered alone and does not go on from the question before.
    """
    goes_on = elliptical(question)
    if not goes_on and (answered or max((g for g, _ in graded), default=-1.0) <= alone):
        return ""
    ranked = sorted(graded, key=lambda g: -g[0])[: None if goes_on else 1]
    kept = [text for g, text in ranked if g >= floor]
    # A question that does not stand alone goes on from the one before in whatever language it is asked: passages in
    # another language cannot name its words ("那在苹果电脑上呢？" after a question about installing on Windows).
    if kept and not any(_could_name(word, text) for word in _own_words(question) for text in kept):
        return READ_ON
    return READ_ON if adds_to(question, *kept) else NEW_QUESTION


def _names(words: Sequence[str], passage: str) -> bool:
    found = set(content_words(passage))
    return any(han_named(word, passage) if has_han(word) else word in found for word in words)
