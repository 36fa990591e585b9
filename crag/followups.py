"""Follow-up questions: checking a model's standalone rewrite, and reading a question with its conversation.

Tiny models turn follow-ups into junk, so a rewrite is checked before it is trusted; without a trusted
model (the embedded backend) a follow-up is read with the words of the question it follows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from crag.text import TOKEN, content_words, has_han, stem

History = Sequence[tuple[str, str]]  # (role, text), role "user" | "assistant"

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


def conversation_query(question: str, history: History) -> str:
    """The question plus the content words of the previous question that it does not repeat: a follow-up
    ("And on Windows?", "那行距呢？") is retrieved in the context of what it follows, without a model."""
    previous = next((text for role, text in reversed(history) if role == "user"), "")
    own = set(content_words(question))
    extra = [w for w in content_words(previous) if w not in own]
    return f"{question} {' '.join(extra)}" if extra else question


# Words that ask for more of what came before ("Tell me more", "Can you explain?", "具体怎么做？", "还有呢？"): they
# name no topic of their own, so a passage need not name them.
MORE_OF_THE_SAME = frozenset(
    [
        stem(w)
        for w in "about again all alternative another clarify continue detail details elaborate else example examples "
        "explain expand give mean method more one option other others say show tell way ways".split()
    ]
    + "详细 具体 还有 怎么办 例子 举例 解释 说明 展开 继续 其他 别的 意思 然后 再说 办法 方法".split()
)


def adds_to(question: str, passage: str) -> bool:
    """Whether a passage found for a question read with its conversation names one of the question's own words.

    A follow-up adds to what it follows ("And on Windows?", "那行距呢？"): the passage that answers it names
    what it adds. When the passage names none of the question's words, the question is a new one, not a
    follow-up ("What is the capital of Australia?" after a question on LaTeX figures), and the conversation's
    words must not answer it. A question with no word of its own ("Why?", "Tell me more") is always read with its
    conversation.
    """
    own = [word for word in content_words(question) if word not in MORE_OF_THE_SAME]
    if not own:
        return True
    found = set(content_words(passage))
    return any(_han_named(word, passage) if has_han(word) else word in found for word in own)


def _han_named(word: str, passage: str) -> bool:
    """A Chinese word in the passage, or its characters in order with at most one between them: the question and
    the passage are segmented differently, and a short form drops a character (行距 for 行间距)."""
    return re.search(".?".join(map(re.escape, word)), passage) is not None
