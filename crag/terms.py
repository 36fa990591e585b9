"""A question's specific terms (names, identifiers, rare words), and whether a text mentions one in any form.

The near-miss verdict on a question (``crag.analysis``) and the support check of written answers (``crag.support``)
ask one thing of a text: does it name this? Users and documents word the same thing differently, so a term counts as
mentioned when the text holds it in any of these forms:

- another inflection or derivation of an English word, by its Snowball stem ("compression", "compressed"), also
  written in two or hyphenated ("re-compiled" for "recompiling");
- a name's derived form: "Norwegian" on a page that writes "Norway";
- a number or size written another way: "3x3", "3 × 3", "3 by 3", "three by three"; "10MB", "10 MB";
- a name clipped before its number: "Win2000" where a page writes "Windows 2000";
- the parts of a slashed or hyphenated compound, together in one passage: "ff/fl" where a page has "ff" and "fl";
- an abbreviation for the question's full name, or the reverse: "JCP" for "Journal of Chemical Physics", when the
  initials match or the documents define one as the other ("Debian 自由软件指导方针（DFSG）");
- Chinese: the word with the spaces PDF extraction puts at line ends taken out, or its two halves next to each
  other ("软件包 的构建" for "软件包构建").
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

import Stemmer

from crag.lexicons import alternation, words
from crag.text import (
    EN_STOP,
    HAN_RUN,
    chinese_words,
    fold,
    general_frequency,
    language,
    lexical_tokens,
    phrase,
    stem,
)
from crag.tuning import TUNING

# How rare in everyday language a word must be to be specific or a name, and how a derived name is told: TUNING.terms.
_TERMS = TUNING.terms

# An identifier: letters and digits joined by . _ / + # - (read.csv, PDF/A, UTF-8, x86_64, C++).
_IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+#/-]*[A-Za-z0-9+#]|[A-Za-z]")
_SENTENCE_START = re.compile(r"(?:^|[.!?。！？]\s*)$")
_STEMMER = Stemmer.Stemmer("english")
_WORD = re.compile(r"[a-z]+")
_CAPITALISED = re.compile(r"\b[A-Z][a-z]{2,}\b")

_NUMBER_WORDS = words("number-words")  # zero to twenty, in order
_DIGITS = {word: str(n) for n, word in enumerate(_NUMBER_WORDS)} | {str(n): w for n, w in enumerate(_NUMBER_WORDS)}
_TIMES = re.compile(r"(?<= )(\d+)x(\d+)(?= )")  # " 3x3 ": a size
_DIGITS_THEN_LETTERS = re.compile(r"(?<=[0-9])(?=[a-z])")  # "10mb" is also written "10 mb"
_COMPOUND = re.compile(r"[/-]")
# A number, whole or with decimals or a version's dots ("14", "0.6", "4.2.2"): a page may answer without it.
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
# A name clipped before its number: "Win2000" for "Windows 2000", "Win7" for "Windows 7". Its letters are taken
# whole, from the first: a long word is scanned once, not once from each of its letters.
_CLIPPED = re.compile(r"(?<![A-Za-z])([A-Za-z]{3,}+)(\d+)")
# Words that join a name's capitalised words without an initial of their own: "Journal of Chemical Physics".
_CONNECTORS = frozenset(words("name-connectors"))
# A run of capitalised words, found from the start of its first word's letters ("eBay Inc" gives "Bay Inc", its
# group): from each capital of a long word, the word would be scanned again.
_NAME_RUN = re.compile(
    rf"(?<![A-Za-z])[a-z]*+([A-Z][A-Za-z]++(?:\s++(?:{alternation('name-connectors')}\s++)?[A-Z][A-Za-z]++)+)"
)
_ACRONYM = re.compile(r"[A-Z][A-Za-z]*[A-Z]|[A-Z]{2,}")
# A definition: "Debian Free Software Guidelines (DFSG)", "自由软件指导方针（DFSG）".
_HAN_DEFINITION = re.compile(r"([\u3400-\u9fff]{2,16})\s*[（(]\s*([A-Z][A-Za-z0-9]{1,9})\s*[）)]")
_LETTERS_THEN_DIGIT = re.compile(r"(?<=[a-z]{2})(?=[0-9])")
_SPACE = re.compile(r"\s+")
_TRIPLE_WORD = re.compile(r"[A-Za-z]{3,}+|\S+")
_CAPITAL_OPENING = re.compile(r"(^|[.!?]\s+)([A-Z])(?=[a-z])")


def is_identifier(word: str) -> bool:
    """Identifiers, acronyms and CamelCase: terms no document paraphrases. A bare number is not one ("Stata
    14" may be answered by a page that never writes 14), nor a hyphenated pair of words ("one-row")."""
    return (
        (any(c.isdigit() for c in word) and not word.isdigit())
        or any(c in "._/+#" for c in word[1:])
        or (any(c.isupper() for c in word[1:]) and any(c.islower() for c in word))
        or (word.isupper() and len(word) >= 2)
    )


def stems(words: Iterable[str]) -> set[str]:
    return set(_STEMMER.stemWords(list(words)))


def word_stems(phrased: str) -> set[str]:
    """Snowball stems of a ``phrase``'s words and of each neighbouring pair joined: "re compiled" is also
    "recompiled", "flow chart" is also "flowchart"."""
    words = _WORD.findall(phrased)
    return stems({*words, *(a + b for a, b in zip(words, words[1:], strict=False))})


@dataclass(frozen=True)
class Term:
    """One specific term of a question (or of a written answer), and the forms a document may write it in."""

    text: str  # as written
    kind: str  # "identifier" (a name, matched as a phrase), "word" (in any form), "han" (Chinese)
    strong: bool  # a name: if the documents never mention it, they do not answer the question

    @cached_property
    def phrases(self) -> frozenset[str]:
        """The ways a document may write it, as ``phrase``s: as written, joined ("e-mail", "email"), a name's number
        set apart ("LATEX 2ε" for LaTeX2e), a number or size another way ("3 by 3", "10 mb")."""
        if self.kind == "han":
            return frozenset()
        written = _phrase(self.text)
        forms = {written, _number_in_name(written), _DIGITS_THEN_LETTERS.sub(" ", written)}
        if _COMPOUND.search(self.text):
            forms.add(f" {written.replace(' ', '')} ")
        for form in list(forms):
            forms |= _numbers_written_out(form)
        return frozenset(forms)

    @cached_property
    def stem(self) -> str:
        """Its Snowball stem, for a word of letters (not an acronym nor a single letter); "" otherwise."""
        joined = _phrase(self.text).replace(" ", "")
        if not joined.isalpha() or len(joined) < 3 or (self.text.isupper() and self.kind == "identifier"):
            return ""
        return _STEMMER.stemWord(joined)

    @cached_property
    def clipped(self) -> re.Pattern[str] | None:
        """A name clipped before its number ("Win2000") is written whole by a page: a word that starts with its letters,
        then the number ("Windows 2000"), as a ``phrase``."""
        found = _CLIPPED.fullmatch(self.text) if self.kind == "identifier" else None
        if found is None:
            return None
        return re.compile(rf" {re.escape(found[1].lower())}[a-z]* ?{found[2]} ")

    @cached_property
    def letter(self) -> re.Pattern[str] | None:
        """A capital letter alone ("R", "C") is that name only as written: ``phrase`` folds case, and would find
        it in a variable or a table's column letters ("l l r")."""
        if len(self.text) == 1 and self.text.isupper():
            return re.compile(rf"(?<![A-Za-z0-9]){self.text}(?![A-Za-z0-9])")
        return None

    @cached_property
    def parts(self) -> tuple[Term, ...]:
        """A slashed or hyphenated compound's parts ("ff/fl", "TCP/IP"), when each has two letters or more. A part of
        one letter says too little: "PDF/A" is not "PDF" and "A"."""
        pieces = [p for p in _COMPOUND.split(self.text) if p]
        if len(pieces) < 2 or any(len(p) < 2 for p in pieces):
            return ()
        return tuple(Term(p, "identifier", False) for p in pieces)

    @cached_property
    def halves(self) -> tuple[tuple[str, str], ...]:
        """The ways a Chinese word of four characters or more splits into two words of two or more."""
        if self.kind != "han" or len(self.text) < 4:
            return ()
        return tuple((self.text[:i], self.text[i:]) for i in range(2, len(self.text) - 1))

    @cached_property
    def derived_name(self) -> bool:
        """A capitalised word that is no identifier ("Norwegian"): its derived forms are names too ("Norway")."""
        return self.kind == "identifier" and self.text[:1].isupper() and self.text[1:].islower() and len(self.text) > 3


def _phrase(text: str) -> str:
    """``text.phrase``, a multiplication sign read as the x of a size: "3 × 3" is " 3 x 3 "."""
    return phrase(text.replace("×", " x "))


def _number_in_name(phrased: str) -> str:
    """Typesetting may set a name's number apart ("LATEX 2ε" for LaTeX2e): a word of letters, then its digits."""
    return _LETTERS_THEN_DIGIT.sub(" ", phrased)


def _numbers_written_out(phrased: str) -> set[str]:
    """A size "3x3" as "3 x 3" and "3 by 3"; a number up to twenty in digits or in words ("ten" and "10")."""
    forms = {phrased}
    if _TIMES.search(phrased):
        forms |= {_TIMES.sub(rf"\1 {sep} \2", phrased) for sep in ("x", "by", "times")}
    for form in list(forms):
        words = form.split()
        if any(w in _DIGITS for w in words) and len(words) > 1:
            forms.add(" " + " ".join(_DIGITS.get(w, w) for w in words) + " ")
    return forms


def specific_terms(question: str) -> list[Term]:
    """The question's names and identifiers, and its words that are rare in everyday language.

    A capitalised word is a name when it is not everyday wording (English capitalises "Chinese" too); in a
    Chinese question every Latin word is a name, since Chinese text keeps names in Latin ("Word", "Shiny").
    """
    return list(_specific_terms(question))


@functools.lru_cache(maxsize=256)  # asked of one question for every passage and sentence it is checked against
def _specific_terms(question: str) -> tuple[Term, ...]:
    chinese = language(question) == "zh"
    terms: dict[str, Term] = {}
    for match in _IDENTIFIER.finditer(question):
        word = match.group().rstrip(".-/")
        if not lexical_tokens(word) or _NUMBER.fullmatch(word) or word.lower() in terms:
            continue
        zipf = max(general_frequency(word.lower()), general_frequency(stem(word.lower())))
        capitalised = word[0].isupper() and not _SENTENCE_START.search(question[: match.start()])
        if is_identifier(word) or (capitalised and zipf < _TERMS.name_zipf):
            terms[word.lower()] = Term(word, "identifier", True)
        elif chinese:
            terms[word.lower()] = Term(word, "identifier", zipf < _TERMS.name_zipf)
        elif zipf < _TERMS.specific_zipf:
            terms[word.lower()] = Term(word, "word", zipf < _TERMS.name_like_zipf)
    for run in HAN_RUN.findall(question):
        for word in chinese_words(run):
            if len(word) > 1 and word not in terms and (zipf := general_frequency(word)) < _TERMS.specific_zipf:
                terms[word] = Term(word, "han", zipf < _TERMS.name_like_zipf)
    return tuple(terms.values())


# ---------------------------------------------------------------------------------------------
# Where terms are looked for


class Vocabulary:
    """Texts prepared for finding terms in any form: one retrieved passage, or every passage of the index (then
    built once per index, and a compound's parts must still meet in one passage)."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = list(texts)
        self.phrased = [_phrase(t) for t in self.texts]
        self.joined = "\n".join(self.phrased)

    @cached_property
    def folded(self) -> str:
        return "\n".join(fold(t) for t in self.texts)

    @cached_property
    def squeezed(self) -> str:
        """Folded, with no whitespace within a passage: PDF extraction puts spaces at line ends in Chinese text."""
        return "\n".join(_SPACE.sub("", fold(t)) for t in self.texts)

    @cached_property
    def stems(self) -> frozenset[str]:
        return frozenset(word_stems(self.joined))

    @cached_property
    def names(self) -> frozenset[str]:
        """Capitalised words, lower-cased: where a name's derived form is looked for."""
        return frozenset(w.lower() for text in self.texts for w in _CAPITALISED.findall(fold(text)))

    @cached_property
    def initialisms(self) -> frozenset[str]:
        """The initials of every run of capitalised words ("Debian Free Software Guidelines": "dfsg"), and every
        abbreviation the texts define after a Chinese name."""
        found = {initials for text in self.texts for run in _NAME_RUN.findall(fold(text)) for initials in _spells(run)}
        return frozenset(found | {abbr.lower() for abbr in self.definitions})

    @cached_property
    def definitions(self) -> dict[str, set[str]]:
        """Abbreviation -> the Chinese names the texts define it as: "自由软件指导方针（DFSG）"."""
        out: dict[str, set[str]] = {}
        for text in self.texts:
            for name, abbr in _HAN_DEFINITION.findall(fold(text)):
                out.setdefault(abbr.lower(), set()).add(name)
        return out

    def contains(self, phrased: str) -> bool:
        return phrased in self.joined


def _spells(run: str) -> set[str]:
    """The acronyms of three letters or more that a run of capitalised words spells: all of it, or all but its first
    word ("The Debian Free Software Guidelines" is also "DFSG"). Two letters match too much by chance."""
    words = [w for w in run.split() if w.lower() not in _CONNECTORS]
    spelled = {"".join(w[0] for w in words[i:]).lower() for i in (0, 1)}
    return {s for s in spelled if len(s) >= 3}


def mentions(term: Term, where: Vocabulary) -> bool:
    """Whether the texts mention ``term`` in any of its forms (see the module's docstring)."""
    if term.kind == "han":
        return term.text in where.squeezed or any(
            re.search(f"{re.escape(a)}[^\n。！？]{{0,{_TERMS.chinese_gap}}}{re.escape(b)}", where.squeezed)
            for a, b in term.halves
        )
    if term.letter:
        return term.letter.search(where.folded) is not None
    if any(where.contains(form) for form in term.phrases) or spelled_out(term, where):
        return True
    if term.clipped and term.clipped.search(where.joined):
        return True
    if term.stem and term.stem in where.stems:
        return True
    if term.derived_name and any(_derived(term.text.lower(), name) for name in where.names):
        return True
    return bool(term.parts) and any(
        all(any(form in passage for form in part.phrases) for part in term.parts) for passage in where.phrased
    )


def _derived(word: str, other: str) -> bool:
    """Two names that share their start and part near the shorter one's end ("Norway" / "Norwegian"), or a name and
    what it starts ("Austria" / "Austrian"). A short word that starts a name is another word ("Flat" / "Flatpak",
    "Over" / "Overleaf")."""
    shorter = min(len(word), len(other))
    shared = next((i for i, (a, b) in enumerate(zip(word, other, strict=False)) if a != b), shorter)
    if shared == shorter:
        return shorter > _TERMS.derived_prefix
    return shared >= _TERMS.derived_prefix and shorter - shared <= _TERMS.derived_rest


# ---------------------------------------------------------------------------------------------
# Abbreviations: the question's full name and the documents' acronym, or the reverse


def aliases(question: str, terms: Sequence[Term], vocabulary: Vocabulary | None) -> dict[str, list[Term]]:
    """Other names of the question's terms, by term: the acronym its capitalised words spell ("Journal of
    Chemical Physics": "JCP"), or three words in a row ("cyclic redundancy check": "CRC"), for each of them; for an
    acronym of the question, the Chinese names the documents define it as, and the reverse."""
    out: dict[str, list[Term]] = {}
    runs = [(run, _spells(run)) for run in _NAME_RUN.findall(_without_sentence_start(question))]
    runs += [(" ".join(words), {"".join(w[0] for w in words)}) for words in _word_triples(question)]
    for run, spelled in runs:
        acronyms = [Term(a.upper(), "identifier", False) for a in spelled]
        for term in terms:
            if re.search(rf"\b{re.escape(term.text)}\b", run):
                out.setdefault(term.text, []).extend(acronyms)
    if vocabulary is None:
        return out
    squeezed = _SPACE.sub("", fold(question))
    for abbr, names in vocabulary.definitions.items():
        for name in names:
            if name in squeezed:  # the question writes the Chinese name: the acronym is its other name
                for term in terms:
                    if term.kind == "han" and term.text in name:
                        out.setdefault(term.text, []).append(Term(abbr.upper(), "identifier", False))
        for term in terms:
            if term.text.lower() == abbr:
                out.setdefault(term.text, []).extend(Term(name, "han", False) for name in names)
    return out


def _word_triples(question: str) -> list[tuple[str, str, str]]:
    """Three words in a row, none of them a stopword: what an acronym may abbreviate."""
    words = _TRIPLE_WORD.findall(question)
    return [
        (a, b, c)
        for a, b, c in zip(words, words[1:], words[2:], strict=False)
        if all(w.isalpha() and len(w) >= 3 and w.lower() not in EN_STOP for w in (a, b, c))
    ]


def _without_sentence_start(question: str) -> str:
    """The question with each sentence's first word lower-cased: "What Journal…" spells no "WJ"."""
    return _CAPITAL_OPENING.sub(lambda m: m[1] + m[2].lower(), question)


def spelled_out(term: Term, where: Vocabulary) -> bool:
    """Whether an acronym of the question is spelled out by a run of capitalised words in the texts."""
    return _ACRONYM.fullmatch(term.text) is not None and term.text.lower() in where.initialisms


# ---------------------------------------------------------------------------------------------
# What the index knows (the near-miss verdict on a question is crag.analysis's)


class TermStats(Protocol):
    """What the index knows of words: how rare a token is in its passages, and every passage for finding terms."""

    n_docs: int

    def doc_frequency(self, token: str) -> int: ...

    @property
    def vocabulary(self) -> Vocabulary: ...
