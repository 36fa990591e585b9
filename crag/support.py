"""The support check of written answers: the names, identifiers and numbers an answer states that nothing the model
was given mentions. The near-miss verdict (``crag.analysis``) turned around: there the question's terms are
looked for in the passages, here the answer's terms are looked for in its sources and the question.

``Grounder`` applies it to a written answer as it streams, sentence by sentence: what a source backs goes through,
citing that source; what nothing given mentions, what no source backs, another language and repeats are cut.

Only what a model cannot paraphrase counts. Everyday words, abbreviations ("i.e."), common acronyms ("PDF", "OK")
and a code example's own variables and strings are not flagged; the commands, functions and options it uses are.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from crag.parts import Written
from crag.terms import Term, Vocabulary, is_identifier, mentions, specific_terms
from crag.text import CJK, content_words, general_frequency, language
from crag.tuning import TUNING
from crag.types import Source, cited

# A Markdown bullet, quote, heading or list number opening a line: the line's first word starts a sentence.
_LINE_MARK = re.compile(r"^\s*(?:[-*+>#]+|\d{1,2}[.)])\s+")
_CITATION = re.compile(r"[\[［【]\d+(?:\s*[-,，]\s*\d+)*[\]］】]")  # [1], [1, 2], [1-2], ［12］
_CODE = re.compile(r"```.*?(?:```|\Z)|`[^`\n]+`", re.DOTALL)
# What code states: an option (-dPS_A, --all), a LaTeX command (\bm, not "\n"), a function it calls (read.csv()).
# A call is found from the start of its run of name characters, tried once per run (atomic): a run that no "("
# follows from its first name ("x.y.z") follows from none of the later ones.
_CODE_TERM = re.compile(
    r"(?<![\w-])(--?[A-Za-z][\w-]+)|(\\[A-Za-z]{2,})"
    r"|(?<![\w.])(?>[\w.]*?\b(?=[A-Za-z_]))([A-Za-z_][\w.]*+(?:::[\w.]++)?+)(?=\()"
)
_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])\d[\d,]*(?:\.\d+)*")  # next to Chinese too: "15个步骤", "2024年"
_NUMERIC = re.compile(r"[\d,.:/-]+[A-Za-z%]{0,3}")  # "2nd", "1000MB", "2023-04-21", "10-15": checked as numbers
_ABBREVIATION = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]?")  # "i.e", "e.g", "U.S": wording, not a name
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def _states(term: Term, chinese: bool) -> bool:
    """Whether saying ``term`` states something a source must back: a name, an identifier or a word as rare as a
    name. A common acronym ("PDF", "OK") and everyday English inside a Chinese answer ("Package") are no names."""
    text = term.text
    if not term.strong or _ABBREVIATION.fullmatch(text) or _NUMERIC.fullmatch(text):
        return False
    if text.isalpha() and (text.isupper() or (chinese and not is_identifier(text))):
        return general_frequency(text.lower()) < TUNING.terms.specific_zipf
    if term.kind == "identifier" and not is_identifier(text) and not text[0].isupper():
        return general_frequency(text.lower()) < TUNING.terms.specific_zipf
    return True


def _numbers(text: str) -> list[str]:
    """Numbers of two digits or more, thousands separators dropped: "1,000" is 1000, as a source may write it."""
    found = (_THOUSANDS.sub("", n).rstrip(".,") for n in _NUMBER.findall(text))
    return [n for n in found if sum(c.isdigit() for c in n) >= 2]


def unsupported(answer: str, texts: Sequence[str]) -> tuple[str, ...]:
    """The names, identifiers and numbers that a written answer states and none of ``texts`` (its sources, the
    question) mentions: what the model may have invented, such as a "PS_A" option for a PDF/A question.
    Citations and list numbers state nothing."""
    return Given(texts).unsupported(answer)


class Given:
    """What the model was given (its sources and the question), prepared once for the checks of every sentence."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.vocabulary = Vocabulary(texts)
        self.plain = _THOUSANDS.sub("", " ".join(texts))  # numbers as ``_numbers`` reads them: "1,000" is 1000

    def unsupported(self, answer: str) -> tuple[str, ...]:
        """The claims of ``answer`` (``claims``) that nothing given mentions."""
        return self.missing(*claims(answer))

    def missing(self, terms: Sequence[Term], numbers: Sequence[str]) -> tuple[str, ...]:
        """Of these claims, those that nothing given mentions."""
        found: dict[str, None] = {}
        for term in terms:
            said = term.text.lower()  # "dPS_A" (of "-dPS_A=1") says nothing that "PS_A" did not
            if term.text in found or any(said in known.lower() or known.lower() in said for known in found):
                continue
            if not mentions(term, self.vocabulary):
                found[term.text] = None
        for number in numbers:
            if number not in found and not _holds_number(self.plain, number):
                found[number] = None
        return tuple(found)


def claims(answer: str) -> tuple[list[Term], list[str]]:
    """What an answer states that a source must back: its names and identifiers (those of its code
    included), and its numbers of two digits or more. Citations and list numbers state nothing."""
    answer = _CITATION.sub(" ", answer)
    terms: list[Term] = []
    for match in _CODE.finditer(answer):
        for option, command, call in _CODE_TERM.findall(match[0]):
            # A call of an everyday word ("print()", "paste()") is the language's, not a claim about the documents.
            if option or command or is_identifier(call) or general_frequency(call.lower()) < TUNING.terms.specific_zipf:
                terms.append(Term(option or command or call, "identifier", True))
    numbers: list[str] = []
    for line in _CODE.sub(" ", answer).splitlines():
        line = _LINE_MARK.sub("", line.replace("**", ""))
        chinese = language(line) == "zh"
        terms += [t for t in specific_terms(line) if _states(t, chinese)]
        numbers += _numbers(line)
    return terms, numbers


# ---------------------------------------------------------------------------------------------
# Grounding: a written answer, sentence by sentence, as it streams


MAX_UNIT = 300  # characters of a sentence held before it is judged as it is: a few seconds of a model's writing
# A sentence ends at a stop and a space, or at Chinese sentence punctuation; a line at its newline.
# A list's number ("1. ") ends nothing.
_UNIT_END = re.compile(r"(?<=[^\d\s][.!?;])[ \t]+|(?<=[。！？；])[ \t]*|\n")
_LETTER = re.compile(r"[^\W\d_]")
_FENCE = "```"
_PROSE_FENCE = re.compile(r"```(?:text|plaintext|plain|markdown|md)[ \t]*\n")  # a fence whose language is prose
_STOPS = ".!?。！？；:："


@dataclass(kw_only=True)
class Grounding:
    """What grounding did to a written answer: each count is of sentences (a code block counts as one)."""

    written: bool = False  # the model wrote an answer (none: the answer was quoted, or there was none)
    stated: int = 0  # sentences that state something: a claim, or enough words
    grounded: int = 0  # of them, those kept: each cites a source that holds its claims
    attached: int = 0  # kept with a citation the app added: the model cited nothing, or a source that does not back it
    repeated: int = 0  # cut: said before in the answer
    unbacked: int = 0  # cut: no source holds its claims
    other_language: int = 0  # cut: not in the question's language
    invented: list[str] = field(default_factory=list)  # cut for these claims, which nothing given mentions

    def notes(self) -> list[str]:
        """What grounding cut or changed, for the answer's trace."""
        named = ", ".join(f"“{t}”" for t in self.invented[:5])
        cut = [
            f"some named {named}, which nothing given mentions" if self.invented else "",
            f"{self.unbacked} stated what no source holds" if self.unbacked else "",
            f"{self.other_language} were not in the question's language" if self.other_language else "",
            f"{self.repeated} repeated what was said before" if self.repeated else "",
        ]
        notes = [f"sentences of the model's answer were cut: {'; '.join(c for c in cut if c)}"] if any(cut) else []
        if self.attached:
            notes.append(
                f"{self.attached} sentence(s) cited no source that holds what they say: the app cites one that does"
            )
        return notes


class Units:
    """A written answer's text cut into whole units as it streams: sentences, and code blocks whole. Its one state,
    ``pending``, is the text not yet whole: the end of a sentence, or a code block not yet closed."""

    def __init__(self) -> None:
        self.pending = ""

    def feed(self, delta: str) -> tuple[str, list[tuple[str, str]]]:
        """The next text in; out, the break the whole text starts with, then its units each with the break after it
        (``_units``)."""
        self.pending += delta
        end = _whole(self.pending)
        whole, self.pending = self.pending[:end], self.pending[end:]
        return _units(whole)

    def close(self) -> str:
        """The rest, at the answer's end: as it is, whole or not."""
        rest, self.pending = self.pending, ""
        return rest


class Grounder:
    """A written answer held to its sources as it streams. Each sentence is let through only once whole (``Units``),
    and only when a source backs it; the citations it carries are those of the sources that back it, the model's when
    they do, else the best one's. A sentence no source backs, one stating a name or number nothing given mentions, one
    in another language than the question's, and one said before are cut. Framing ("Here is how:") is ``held`` until
    the first sentence kept, so an answer nothing backs says nothing at all (``counts.grounded`` stays 0); ``gap`` is
    the break after the last unit let out or held, which goes before the next."""

    def __init__(self, sources: Sequence[Source], given: Sequence[str], question: str) -> None:
        self.given = Given(given)
        self.sources = {}
        for s in sources:
            text = f"{s.text}\n{s.file} {s.title} {s.url} {s.section}"  # where it comes from backs a claim too
            self.sources[s.n] = (_THOUSANDS.sub("", text), Vocabulary([text]), set(content_words(text)))
        self.language = language(question)
        self.counts = Grounding(written=True)
        self.units = Units()
        self.held: list[Written] = []
        self.gap = ""
        self._said: set[str] = set()

    def feed(self, delta: str) -> list[Written]:
        """The answer's next text in; out, the sentences it completes that are kept (and framing held before them)."""
        return self._ground(*self.units.feed(delta))

    def close(self, failed: bool = False) -> list[Written]:
        """The rest, at the answer's end. An answer the model ``failed`` to end keeps its framing and the sentence
        it was writing, unjudged: the partial text is shown as far as it went, with the error."""
        rest = self.units.close()
        if failed:  # the sentence it was writing, as far as it went (the answer says it is incomplete)
            return [*self.held, *([Written(text=rest, gap=self.gap)] if rest.strip() else [])]
        return self._ground(*_units(rest))

    def _ground(self, lead: str, units: Sequence[tuple[str, str]]) -> list[Written]:
        """The units of whole text that are kept, each after the break that ends the one before: a break is let out
        only before what follows it, so text never ends in one, and a line cut between two keeps theirs apart."""
        out: list[Written] = []
        self.gap += lead
        for unit, gap in units:
            kept = self._unit(unit)
            if kept is None:
                if "\n" in gap and self.gap.count("\n") < gap.count("\n"):
                    self.gap = gap
                continue
            part = Written(text=kept.text, cited=kept.cited, gap=self.gap)
            if kept.stated or self.counts.grounded:
                out += [*self.held, part]
                self.held = []
            else:  # framing waits for a sentence a source backs
                self.held.append(part)
            self.gap = gap
        return out

    def _unit(self, unit: str) -> _Kept | None:
        """One sentence or code block as kept (its citations set), or None when it is cut."""
        said = _CITATION.sub("", unit)
        words = content_words(said)
        key = "".join(words) or said.strip()
        if not key or key in self._said:  # only citations ("[1] [2]"), or said before
            self.counts.repeated += bool(key)
            return None
        self._said.add(key)
        if not unit.startswith(_FENCE) and not _LETTER.search(said):
            return None  # a stray number or mark ("1", "4"): states nothing, reads as noise
        if _PROSE_FENCE.match(unit):  # prose in a fence ("```text"): judged as prose, shown without the fence
            unit = _PROSE_FENCE.sub("", unit).removesuffix(_FENCE).strip()
            said = _CITATION.sub("", unit)
        terms, numbers = claims(unit)
        if invented := self.given.missing(terms, numbers):
            self.counts.stated += 1
            self.counts.invented += [t for t in invented if t not in self.counts.invented]
            return None
        if unit.startswith(_FENCE):
            return _Kept(unit, False)  # code takes no citation: kept when it names only what was given
        backing = self._backing(terms, numbers, words)
        if not backing and not (terms or numbers or len(words) >= TUNING.support.stating_words):
            return _Kept(_cite(said, ()), False)  # framing ("Here is how:"): it states nothing, so it cites nothing
        self.counts.stated += 1
        if language(said) != self.language and len(words) > TUNING.support.stating_words:
            self.counts.other_language += 1
            return None
        if not backing:
            self.counts.unbacked += 1
            return None
        own = cited(unit) & set(backing)
        if not own:
            self.counts.attached += 1
            own = {max(backing, key=backing.__getitem__)}
        self.counts.grounded += 1
        return _Kept(_cite(said, sorted(own)), True, tuple(sorted(own)))

    def _backing(self, terms: Sequence[Term], numbers: Sequence[str], words: Sequence[str]) -> dict[int, float]:
        """The sources that back a sentence, each with the share of its claims (or, without any, of its words) it
        holds: at least ``TUNING.support.backed``."""
        backing = {}
        for n, (plain, vocabulary, source_words) in self.sources.items():
            if terms or numbers:
                held = sum(mentions(t, vocabulary) for t in terms) + sum(_holds_number(plain, x) for x in numbers)
                share = held / (len(terms) + len(numbers))
            else:
                share = sum(w in source_words for w in words) / len(words) if words else 0.0
            if share >= TUNING.support.backed:
                backing[n] = share
        return backing


@dataclass(frozen=True)
class _Kept:
    text: str
    stated: bool
    cited: tuple[int, ...] = ()


def _holds_number(plain: str, number: str) -> bool:
    """Whether ``plain`` (thousands separators dropped once, by its owner) holds the number whole."""
    return re.search(rf"(?<![0-9]){re.escape(number)}(?![0-9])", plain) is not None


def _whole(text: str) -> int:
    """How much of ``text`` is whole sentences and closed code blocks: up to the last sentence end outside code, or
    a long sentence's first ``MAX_UNIT`` characters (a model that never ends one is still heard, and stopped)."""
    end = 0
    fences = [m.start() for m in re.finditer(_FENCE, text)]
    open_at = fences[-1] if len(fences) % 2 else len(text)
    for found in _UNIT_END.finditer(text, 0, open_at):
        end = found.end()
    if len(fences) >= 2 and not len(fences) % 2:
        end = max(end, fences[-1] + len(_FENCE))
    while open_at - end > MAX_UNIT:
        end += _cut(text[end : end + MAX_UNIT + 1])
    return end


def _cut(unit: str) -> int:
    """Where a unit longer than ``MAX_UNIT`` is cut: before the last space within it, else at ``MAX_UNIT``."""
    at = unit.rfind(" ", 1, MAX_UNIT + 1)
    return at if at > 0 else MAX_UNIT


def _units(text: str) -> tuple[str, list[tuple[str, str]]]:
    """The break that whole text starts with (the end of a unit fed before), then its sentences and code blocks, each
    with the space or line break after it."""
    lead = ""
    units: list[tuple[str, str]] = []
    for i, part in enumerate(re.split(r"(```.*?```)", text, flags=re.DOTALL)):
        if i % 2:
            units.append((part, ""))
            continue
        start = 0
        for found in _UNIT_END.finditer(part):
            if part[start : found.start()].strip():
                units += _pieces(part[start : found.start()], found.group())
            elif units:
                units[-1] = (units[-1][0], units[-1][1] + found.group())
            else:
                lead += found.group()
            start = found.end()
        if part[start:].strip():
            units += _pieces(part[start:], "")
    return lead, units


def _pieces(unit: str, gap: str) -> list[tuple[str, str]]:
    """A unit as pieces of at most ``MAX_UNIT`` characters, as ``_whole`` lets a long one out while it streams."""
    pieces = []
    while len(unit) > MAX_UNIT:
        at = _cut(unit[: MAX_UNIT + 1])
        pieces.append((unit[:at], ""))
        unit = unit[at:]
    return [*pieces, (unit, gap)]


def _cite(sentence: str, numbers: Sequence[int]) -> str:
    """The sentence with these citations (none: without any), set before its closing stop: "… in Deb [2]."."""
    text = _CITATION.sub("", sentence).rstrip()
    if not numbers:
        return text
    at = len(text)
    while at and text[at - 1] in _STOPS:  # a loop, not a pattern anchored at the end: linear on any text
        at -= 1
    body = text[:at].rstrip()
    space = "" if body and CJK.match(body[-1]) else " "
    return body + space + "".join(f"[{n}]" for n in numbers) + text[at:]
