"""What a question asks, analysed once: its language, its specific terms (``crag.terms``: names, identifiers, rare
words, and the forms a document may write them in), and the near-miss verdict: which terms the passages found never
mention, which the documents never do, and whether that decides the action.

The pipeline analyses the question as asked (without the files it names) once per answer, in the scope it was asked
in, and hands the ``Analysis`` to retrieval (a missed term is searched again), to grading (a near miss caps the
grades) and to the Correct badge's check (``unanswered``). How much each word of a question says in these documents
(``word_weights``, ``coverage``, below) is what the verdict, the evaluator and refinement weigh words by.

A missing term is evidence against the passages, not a veto. A specific term that no retrieved passage mentions caps
their grades below the upper threshold: Ambiguous at most, so the web is asked too and the answer says the passages
may not answer. The action is Incorrect (every grade at most ``TUNING.near_miss.score``, below any sensible lower
threshold) only when the question is about what the documents lack: a term that no passage of the index mentions in
any form is a name rarer than everyday words ("pbzip2", "Flatpak": a page that never names it does not answer a
question about it), or it carries most of the weight of the question's specific terms and nothing else of the
question that the best passage matches outweighs it. An everyday word the documents never use is often the user's
way of saying what they say in other words: their closest passages are shown, as such.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

from crag.lexicons import words
from crag.terms import Term, TermStats, Vocabulary, aliases, mentions, specific_terms
from crag.text import (
    HAN_RUN,
    cjk_share,
    content_words,
    fold,
    general_frequency,
    han_named,
    has_han,
    language,
    lexical_tokens,
    split_pairs,
    stem,
)
from crag.tuning import TUNING
from crag.types import TermCheck

_NEAR_MISS = TUNING.near_miss  # its score caps the grades (TermCheck.ceiling)
# Words any question may use that no answer need repeat: how it asks, not what it asks about.
_ASKING = frozenset(stem(w) if w.isascii() else w for w in words("asking-not-asked"))


@dataclass(frozen=True, eq=False)
class Analysis:
    """One question as asked, in the scope whose term statistics (``stats``, None: nothing is built) weigh its words
    and tell which terms the documents never mention. Each part is computed when first asked for, then kept."""

    text: str  # as asked, without the files it names ("R-intro.pdf" is no term a passage must mention)
    stats: TermStats | None = None

    @cached_property
    def language(self) -> str:
        return language(self.text)

    @cached_property
    def terms(self) -> tuple[Term, ...]:
        return tuple(specific_terms(self.text))

    def near_miss(self, texts: Sequence[str]) -> TermCheck:
        """Which of the question's specific terms the texts never mention in any form, which the whole index never
        does, and whether that makes the action Incorrect (``decisive``).

        A plain word is only expected in texts of its own script: a Chinese passage answering an English question
        does not repeat its English words. Identifiers and names are expected everywhere."""
        if not self.terms or not texts:
            return TermCheck(tuple(t.text for t in self.terms))
        passages = [(Vocabulary([text]), cjk_share(text)) for text in texts]
        vocabulary = self.stats.vocabulary if self.stats is not None else None
        other_names = aliases(self.text, self.terms, vocabulary)
        missing, unknown = [], []
        for term in self.terms:
            forms = [term, *other_names.get(term.text, ())]
            expected = [p for p, share in passages if _expected(term, share)]
            if not expected or any(mentions(form, p) for p in expected for form in forms):
                continue
            missing.append(term.text)
            if term.strong and vocabulary is not None and not any(mentions(form, vocabulary) for form in forms):
                unknown.append(term.text)
        check = TermCheck(tuple(t.text for t in self.terms), tuple(missing), tuple(unknown))
        return TermCheck(check.terms, check.missing, check.unknown, self._decisive(check, texts))

    def _decisive(self, check: TermCheck, texts: Sequence[str]) -> bool:
        """Whether a near miss makes the action Incorrect (see the module's docstring)."""
        if not check.unknown:
            return False
        if any(general_frequency(t.lower()) < TUNING.terms.specific_zipf for t in check.unknown):
            return True
        weights = {t: term_weight(t, self.stats, t in check.unknown) for t in check.terms}
        absent = sum(weights[t] for t in check.missing)
        if absent < _NEAR_MISS.absent_share * sum(weights.values()):
            return False
        rest = self.text
        for term in check.missing:
            rest = rest.replace(term, " ")
        rest_weights = word_weights(rest, self.stats)
        support = max(coverage(rest_weights, text) for text in texts) * sum(rest_weights.values())
        return support < absent

    @cached_property
    def beyond_documents(self) -> bool:
        """Whether the question names something rarer than everyday words that no document of the scope mentions in
        any form: then no passage answers it, whatever words it is searched in (a near miss that decides the action,
        ``near_miss``), and a model need not be asked for other words."""
        vocabulary = self.stats.vocabulary if self.stats is not None else None
        if vocabulary is None:
            return False
        other_names = aliases(self.text, self.terms, vocabulary)
        return any(
            term.strong
            and general_frequency(term.text.lower()) < TUNING.terms.specific_zipf
            and not any(mentions(form, vocabulary) for form in (term, *other_names.get(term.text, ())))
            for term in self.terms
        )

    def mentioned_by(self, term: str) -> Callable[[str], bool]:
        """Whether a text mentions ``term``, one of the question's specific terms, in any of its forms."""
        found = next(t for t in self.terms if t.text == term)
        return lambda text: mentions(found, Vocabulary([text]))

    def unanswered(self, texts: Sequence[str]) -> str:
        """Why passages graded relevant still do not answer the question ("" when they may): they never mention one
        of its specific terms in any form, or, for a question in plain words, they hold fewer than ``covered`` of its
        words. Passages in the other language than the question's are not asked to repeat its words."""
        check = self.near_miss(texts)
        if check.missing:
            return "the passages kept never mention “" + "”, “".join(check.missing) + "”"
        if check.terms:
            return ""
        chinese = self.language == "zh"
        same = [t for t in texts if (cjk_share(t) > 0.2) == chinese]
        words = [w for w in content_words(self.text) if w not in _ASKING]
        if not same or not words:
            return ""
        held = _held(words, " ".join(same))
        if len(held) >= min(_NEAR_MISS.covered * len(words), _NEAR_MISS.enough_words):
            return ""
        return f"the passages kept hold {len(held)} of the question's {len(words)} words"


def _expected(term: Term, cjk: float) -> bool:
    """Whether a passage with this share of Chinese characters should name the term to answer the question."""
    return term.kind == "identifier" or (cjk > 0.2 if term.kind == "han" else cjk < 0.5)


def _held(words: Sequence[str], text: str) -> list[str]:
    """The words a text holds: English ones by their stem, Chinese ones as written or with a character between."""
    stems_held = {stem(w) for w in lexical_tokens(text)} | set(re.findall(r"[a-z0-9]+", fold(text).lower()))
    return [w for w in words if (han_named(w, text) if HAN_RUN.fullmatch(w) else w in stems_held)]


# ---------------------------------------------------------------------------------------------
# How much a word says


class DocFrequencies(Protocol):
    """What an IDF needs of the index: its passages, and in how many of them a token occurs (``TermStats``)."""

    @property
    def n_docs(self) -> int: ...

    def doc_frequency(self, token: str) -> int: ...


def idf(token: str, stats: DocFrequencies | None) -> float:
    """BM25's IDF in these documents. Without stats every word weighs 1."""
    if stats is None:
        return 1.0
    n, df = stats.n_docs, stats.doc_frequency(token)
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def word_weights(question: str, stats: TermStats | None) -> dict[str, float]:
    """How much each content word of the question says: rare in these documents (IDF, highest for a word
    they never use) and not everyday wording ("every", "开始" weigh little)."""
    # A pair of characters the dictionary split ("双栏", "宏包") counts as a word when these documents use it.
    pairs = [w for w in split_pairs(question) if stats is not None and stats.doc_frequency(w)]
    return {word: idf(word, stats) * _everyday(word) for word in [*content_words(question), *pairs]}


def term_weight(term: str, stats: TermStats | None, unknown: bool = False) -> float:
    """A specific term's weight, as ``word_weights`` weighs a question's words: its rarest word's, or for a term the
    documents never mention in any form, a word they never use ("PDF/A" is absent, though "PDF" is everywhere)."""
    if unknown:
        return idf("", None if stats is None else _Unseen(stats.n_docs)) * _everyday(term)
    return max(word_weights(term, stats).values(), default=0.0)


@dataclass(frozen=True)
class _Unseen:
    """Statistics in which no word occurs: the IDF of a word the documents never use."""

    n_docs: int

    def doc_frequency(self, token: str) -> int:
        return 0


def _everyday(word: str) -> float:
    """1 for a word rarer than once in ten thousand in everyday language, down to 0.1 for the commonest."""
    return min(1.0, max(0.1, (6.5 - general_frequency(word.lower())) / 3.0))


def coverage(weights: dict[str, float], text: str) -> float:
    """The weighted share of the question's words that the text contains (Chinese words as substrings:
    segmentation differs between a question and a document)."""
    total = sum(weights.values())
    if not total:
        return 0.0
    present = set(lexical_tokens(text))
    return sum(w for word, w in weights.items() if (word in text if has_han(word) else word in present)) / total
