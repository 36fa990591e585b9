"""Text rules, in one place: scripts, tokens, control characters, sentences, quoting, questions.

Chinese and English text meet everywhere in this app (documents, questions, web pages), so every
module asks this one which characters are Chinese, what a word is and where a sentence ends.
"""

from __future__ import annotations

import functools
import logging
import re
import unicodedata
from collections.abc import Iterable, Sequence

import jieba

from crag.errors import CragError
from crag.lexicons import words
from crag.tuning import TUNING

jieba.setLogLevel(logging.WARNING)

# Han characters (CJK unified ideographs, extension A, compatibility ideographs): Chinese letters.
HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
# Han characters plus CJK punctuation and full-width forms: where no space goes between neighbours.
CJK = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uf900-\ufaff\uff00-\uffef]")
# C0/C1 controls (newline and tab kept), zero-width and bidirectional marks, BOM, lone surrogates:
# invisible, or harmful in prompts, logs and terminals.
INVISIBLE = re.compile(
    r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2064\ufeff\ud800-\udfff]"
)

# ---------------------------------------------------------------------------------------------
# Scripts and language


def has_han(text: str) -> bool:
    return HAN.search(text) is not None


def cjk_share(text: str) -> float:
    """The share of a text's letters that are Chinese characters."""
    letters = [c for c in text if c.isalnum()]
    return sum(1 for c in letters if HAN.match(c)) / len(letters) if letters else 0.0


LATIN_WORD = re.compile(r"[A-Za-z]+")
KANA_HANGUL = re.compile(r"[\u3040-\u30ff\uac00-\ud7af]")  # Japanese and Korean use Chinese characters too


def language(text: str) -> str:
    """``zh`` when the text has more Chinese characters than Latin words, else ``en``: the language to answer in.
    Words, not letters: "在 Windows 上如何安装 TeX Live？" is Chinese (a Chinese word is one or two characters), and
    "How do I typeset 中文 in LaTeX?" is English."""
    chinese = len(HAN.findall(text)) > len(LATIN_WORD.findall(text)) and not KANA_HANGUL.search(text)
    return "zh" if chinese else "en"


def document_language(passages: Sequence[str]) -> str:
    """``zh`` or ``en`` when most of a document's passages are in that language, else ``mixed`` (a bilingual guide)."""
    share = sum(language(p) == "zh" for p in passages) / len(passages) if passages else 0.0
    one = TUNING.terms.one_language  # the share of a file's passages in one language for the file to be in it
    return "zh" if share >= one else "en" if share <= 1 - one else "mixed"


def strip_invisible(text: str) -> str:
    return INVISIBLE.sub("", text)


# Glyphs that are not text: private-use code points (a symbol font's own codes, "\uf0b7" for a bullet), and the
# replacement character an extractor puts where it found no Unicode. A run of them, spaces between, goes whole:
# "� � ��" in a formula says nothing. Real symbols (math, arrows, CJK punctuation) are not in these ranges.
NOT_TEXT = re.compile(
    r"[\ue000-\uf8ff\ufffd\U000f0000-\U0010ffff]++(?:[ \t]++[\ue000-\uf8ff\ufffd\U000f0000-\U0010ffff]++)*+"
)


def drop_glyphs(text: str) -> str:
    """Text without the glyphs that are not text (``NOT_TEXT``); the space they leave is the caller's to collapse."""
    return NOT_TEXT.sub("", text)


# ---------------------------------------------------------------------------------------------
# Lexical tokens: English words (lower-cased, light plural stemming) and jieba words for Chinese.

TOKEN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+|[A-Za-z0-9_]+(?:['.][A-Za-z0-9_]+)*")
EN_STOP = frozenset(words("stop-words", "latin"))  # crag/lexicons/stop-words.txt
ZH_STOP = frozenset(words("stop-words", "han"))


def stem(word: str) -> str:
    """A conservative plural stemmer (Harman's S-stemmer): 'packages' and 'package' meet."""
    if len(word) > 4 and word.endswith("ies") and not word.endswith(("eies", "aies")):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("es") and not word.endswith(("aes", "ees", "oes")):
        return word[:-1]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("us", "ss")):
        return word[:-1]
    return word


# Greek letters that typesetting puts in Latin names: LaTeX2e is printed "LATEX2ε".
_GREEK = str.maketrans("αβγδεζηικλμνοπρστυφχωΑΒΓΔΕΖΗΙΚΛΜΝΟΠΡΣΤΥΦΧΩ", "abgdezhiklmnoprstufxwABGDEZHIKLMNOPRSTUFXW")


def fold(text: str) -> str:
    """Compatibility forms unified (NFKC: full-width letters, ligatures) and Greek letters as Latin ones."""
    return unicodedata.normalize("NFKC", text).translate(_GREEK)


_PHRASE_BREAK = re.compile(r"[^0-9a-z+#\u3400-\u9fff]+")
# Chinese text runs names into its characters ("执行sudo visudo将", "用R读取"): a name ends where they start.
_SCRIPT_CHANGE = re.compile(r"(?<=[0-9a-z+#])(?=[\u3400-\u9fff])|(?<=[\u3400-\u9fff])(?=[0-9a-z+#])")


def phrase(text: str) -> str:
    """A text reduced for matching names and identifiers: folded, lower case, every run of other characters
    one space, padded with spaces. "PDF/A" is " pdf a ", found in " pdf a 1b " but not in " pdf as "; "SPSS"
    is found in "读取SPSS文件"."""
    return " " + " ".join(_SCRIPT_CHANGE.sub(" ", _PHRASE_BREAK.sub(" ", fold(text).lower())).split()) + " "


def lexical_tokens(text: str) -> list[str]:
    """The tokens BM25 indexes and matches: Chinese runs cut by jieba for search (words and their parts)."""
    tokens: list[str] = []
    for run in TOKEN.findall(fold(text)):
        if HAN.match(run):
            tokens.extend(t for t in jieba.cut_for_search(run) if t not in ZH_STOP)
        else:
            word = run.lower()
            if word not in EN_STOP:
                tokens.append(stem(word))
    return tokens


HAN_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")


def chinese_words(run: str) -> list[str]:
    """Dictionary words of a run of Chinese characters. Without jieba's HMM, which glues unknown pairs
    into "words" such as 宏包时 that no document contains."""
    return [w for w in jieba.cut(run, HMM=False) if w.strip()]


def split_pairs(text: str) -> list[str]:
    """Pairs of neighbouring characters that the dictionary cut apart: "双栏" and "宏包" are not in jieba's
    dictionary, so "双栏排版" comes out as 双 / 栏 / 排版 and the question's most specific words are lost. Only
    some pairs are words ("的是" is not): the caller keeps those its documents use."""
    pairs: list[str] = []
    for run in HAN_RUN.findall(text):
        words = chinese_words(run)
        pairs += [a + b for a, b in zip(words, words[1:], strict=False) if len(a) == len(b) == 1]
    return list(dict.fromkeys(pairs))


def content_words(text: str) -> list[str]:
    """A text's words that carry meaning, in order, once each: Chinese dictionary words of two characters
    or more, stemmed English words; stopwords, single letters and Chinese particles dropped."""
    words: list[str] = []
    for run in TOKEN.findall(text):
        if HAN.match(run):
            words.extend(w for w in chinese_words(run) if len(w) > 1 and w not in ZH_STOP)
        else:
            word = run.lower()
            if word not in EN_STOP and (len(word) > 1 or word.isdigit()):
                words.append(stem(word))
    return list(dict.fromkeys(words))


def warm_up() -> None:
    """Load the dictionaries that a question's first words would otherwise load (about 2 s): jieba's, and wordfreq's
    word lists with the jieba dictionary of its own it segments Chinese with."""
    jieba.initialize()
    for word in ("the", "文档"):
        general_frequency(word)


@functools.cache
def general_frequency(word: str) -> float:
    """How common a word is in everyday language, on the Zipf scale (0: unknown, 3: rare, 5+: common).

    From wordfreq's multi-source word lists, English or Chinese by script. It tells a specific term
    ("GitHub", "页眉") from ordinary wording ("explain", "设置") without any list of our own.
    """
    from wordfreq import zipf_frequency

    return zipf_frequency(word, "zh" if has_han(word) else "en")


# ---------------------------------------------------------------------------------------------
# Sentences

# A sentence that asks; in a FAQ, the heading of the answer that follows it.
ASKS = re.compile(r"[?？]\s*$")
# A text that ends at its full stop (a closing quote or bracket may follow).
ENDED = re.compile(r"[.!?。！？…][\"'”’)）\]]*\s*$")
# A footnote opens with its mark: a number of at most three digits, or * † ‡ § ¶ ("4这里只讨论…", "8 using a path"),
# but not a number that goes on ("2.4 节", "1,000").
NOTE_MARK = re.compile(r"(\d{1,3}|[*†‡§¶])(?!\d|[.,]\d)")
_RAISED = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
# A paragraph that is a footnote, as ``note_text`` writes it: a raised number, or a dagger. Not * (a list's
# bullet) nor § ¶ (a paragraph that cites one: "§ 4.2 says…").
NOTE = re.compile(r"[⁰¹²³⁴⁵⁶⁷⁸⁹]+|[†‡]")


def note_text(text: str) -> str:
    """A footnote as the page shows it, its mark raised: "²sudo tlmgr 无法使用…", not "2sudo tlmgr". It is a
    paragraph of its own, and one without a full stop is over all the same (see ``NOTE``)."""
    found = NOTE_MARK.match(text)
    return found.group(1).translate(_RAISED) + text[found.end() :] if found else text


# A sentence ends at . ! ? followed by space, or at Chinese sentence punctuation (no space needed). Chinese text
# typeset with Western stops ("保存退出. 接下来") loses that space when its sentences are joined again: a stop
# followed by a Chinese character ends a sentence too.
SENTENCE_END = re.compile(rf"(?<=[.!?])\s+|(?<=[。！？；])|(?<=[.!?])(?={HAN.pattern})")


def han_named(word: str, text: str) -> bool:
    """A Chinese word in a text, or its characters in order with at most one between them: a question and a passage
    are segmented differently, and a short form drops a character (行距 for 行间距)."""
    return re.search(".?".join(map(re.escape, word)), text) is not None


def split_sentences(text: str) -> list[str]:
    return [s for s in (p.strip() for p in SENTENCE_END.split(text)) if s]


def join_sentences(left: str, right: str) -> str:
    """Two sentences of one paragraph: Chinese ones follow each other without a space; others take one."""
    if not left:
        return right
    cjk = CJK.match(left[-1]) or CJK.match(right[:1])
    return left + right if cjk else f"{left} {right}"


def join_blocks(left: str, right: str) -> str:
    """Two pieces the page sets apart (a line, then a displayed command): a space between them, unless both sides
    are Chinese, where a space would cut a word that the layout broke in two ("这个命" / "令会…"), or the first
    ends in Chinese punctuation, which has its own room ("以下命令：")."""
    if not left:
        return right
    cjk = CJK.match(left[-1]) and (CJK.match(right[:1]) or not HAN.match(left[-1]))
    return left + right if cjk else f"{left} {right}"


def join_lines(lines: Sequence[str], dehyphenate: bool = True) -> str:
    """Join lines (or the spans of one line): re-join words hyphenated at a line end; no space between CJK."""
    out = ""
    for line in (ln.strip() for ln in lines):
        if not line:
            continue
        if not out:
            out = line
        elif dehyphenate and out.endswith("-") and line[:1].islower():
            out = out[:-1] + line
        elif CJK.match(out[-1]) and CJK.match(line[0]):
            out += line
        else:
            out += " " + line
    return out


def width(text: str) -> int:
    """Length in English-character equivalents: a Chinese character carries about a token, like 4 letters."""
    return len(text) + 3 * sum(1 for c in text if HAN.match(c))


def pages_label(pages: Iterable[int]) -> str:
    pages = sorted(set(pages))
    if not pages:
        return ""
    if len(pages) == 1:
        return f"page {pages[0]}"
    return f"pages {pages[0]}–{pages[-1]}"


# ---------------------------------------------------------------------------------------------
# Prompts and questions


# Any spelling of a source tag, opening or closing ("</source>", "< /SOURCE>", "< / source id=9>"). A tag ends at its
# ">", or where the next tag starts: each "<source" is scanned up to the next one at most, so a run of them without a
# ">" costs no more than once through the text.
SOURCE_TAG = re.compile(
    r"<\s*+/?\s*+source\b(?:[^<>]|<(?!\s*+/?\s*+source\b))*+(?:>|(?=<\s*+/?\s*+source\b))", re.IGNORECASE
)


def quote(text: str) -> str:
    """Source text cannot close its own tag: what is inside stays data. Until none is left: a tag cut out of the
    middle of another would join its halves into a new one ("<</source>/source>"). No tag ends after the last ">":
    the text after it is left alone, or each "<source" there would be scanned to the end."""
    end = text.rfind(">") + 1
    head = text[:end]
    while SOURCE_TAG.search(head):
        head = SOURCE_TAG.sub(" ", head)
    return head + text[end:]


MAX_QUESTION_CHARS = 2000  # a question, not a document: longer text would crowd the sources out of the context


class BadQuestion(CragError):
    """A question that cannot be asked as it is."""


def clean_question(question: str) -> str:
    """Control and invisible characters go; empty, punctuation-only or over-long questions are refused with the
    reason."""
    text = " ".join(strip_invisible(question).split())
    if not text:
        raise BadQuestion("The question is empty: type a question about your documents.")
    if not any(c.isalnum() for c in text):
        raise BadQuestion("The question has no words, only punctuation: type a question about your documents.")
    if len(text) > MAX_QUESTION_CHARS:
        raise BadQuestion(
            f"The question is {len(text)} characters long; the limit is {MAX_QUESTION_CHARS}. "
            "Ask it in fewer words, or put long text into a PDF in Files/ and ask about it."
        )
    return text
