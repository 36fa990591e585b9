"""The support check of written answers: the names, identifiers and numbers an answer states that nothing the model
was given mentions. The near-miss check (``terms.check_terms``) turned around: there the question's terms are
looked for in the passages, here the answer's terms are looked for in its sources and the question.

Only what a model cannot paraphrase counts. Everyday words, abbreviations ("i.e."), common acronyms ("PDF", "OK")
and a code example's own variables and strings are not flagged; the commands, functions and options it uses are.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from crag.terms import SPECIFIC_ZIPF, Term, Vocabulary, is_identifier, mentions, specific_terms
from crag.text import general_frequency, language

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
        return general_frequency(text.lower()) < SPECIFIC_ZIPF
    if term.kind == "identifier" and not is_identifier(text) and not text[0].isupper():
        return general_frequency(text.lower()) < SPECIFIC_ZIPF
    return True


def _numbers(text: str) -> list[str]:
    """Numbers of two digits or more, thousands separators dropped: "1,000" is 1000, as a source may write it."""
    found = (_THOUSANDS.sub("", n).rstrip(".,") for n in _NUMBER.findall(text))
    return [n for n in found if sum(c.isdigit() for c in n) >= 2]


def unsupported(answer: str, texts: Sequence[str]) -> tuple[str, ...]:
    """The names, identifiers and numbers that a written answer states and none of ``texts`` (its sources, the
    question) mentions: what the model may have invented, such as a "PS_A" option for a PDF/A question.
    Citations and list numbers state nothing."""
    answer = _CITATION.sub(" ", answer)
    given = Vocabulary(texts)
    plain = " ".join(_THOUSANDS.sub("", text) for text in texts)
    terms: list[Term] = []
    for match in _CODE.finditer(answer):
        for option, command, call in _CODE_TERM.findall(match[0]):
            # A call of an everyday word ("print()", "paste()") is the language's, not a claim about the documents.
            if option or command or is_identifier(call) or general_frequency(call.lower()) < SPECIFIC_ZIPF:
                terms.append(Term(option or command or call, "identifier", True))
    numbers: list[str] = []
    for line in _CODE.sub(" ", answer).splitlines():
        line = _LINE_MARK.sub("", line.replace("**", ""))
        chinese = language(line) == "zh"
        terms += [t for t in specific_terms(line) if _states(t, chinese)]
        numbers += _numbers(line)
    found: dict[str, None] = {}
    for term in terms:
        said = term.text.lower()  # "dPS_A" (of "-dPS_A=1") says nothing that "PS_A" did not
        if term.text in found or any(said in known.lower() or known.lower() in said for known in found):
            continue
        if not mentions(term, given):
            found[term.text] = None
    for number in numbers:
        if number not in found and not re.search(rf"(?<![0-9]){re.escape(number)}(?![0-9])", plain):
            found[number] = None
    return tuple(found)
