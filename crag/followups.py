"""Follow-up questions: checking a model's standalone rewrite, and reading a question with its conversation.

Tiny models turn follow-ups into junk, so a rewrite is checked before it is trusted; without a trusted
model (the embedded backend) a follow-up is read with the words of the question it follows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from crag.text import TOKEN, content_words

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
