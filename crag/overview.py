"""Questions about whole documents: "What is this document about?", "Summarize R-intro.pdf", "这份文档讲了什么".

A search for such a question's words finds whatever passage says "document" (an appendix, a licence), so these are
answered from each document itself: its title, the sentences of its opening pages that say what it is, and its
outline. The outline comes from the PDF's bookmarks, kept in the manifest when the file is indexed, or else from the
headings the parser found; the opening sentences from the first chunks of the file as indexed. Nothing reads the
pages again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

from crag.injection import injection_reason
from crag.lexicons import alternation, words
from crag.parts import Heading, Lead, Outline, Part, Quote
from crag.text import HAN, content_words, fold, han_named, has_han, split_sentences, stem, width
from crag.tuning import TUNING
from crag.types import Chunk, FileResult, Source, Strip

# "What is this document about?", "Summarize it", "give me an overview of the manual", "what does the PDF cover".
# The document is named as such ("the manual", "these files"), not any text ("the outline of a text box").
_DOCUMENT = alternation("document-words") + "s?"
_THESE = r"(?:this|the|that|these|those|my|each|every|all|your)"
_ABOUT_EN = re.compile(
    rf"\b(?:summar(?:y|ise|ize|ising|izing)|overview|outline|table of contents|gist|tl;?dr)\b"
    rf"(?:\W++(?:of|for|on|about))?+(?:\W++(?:{_THESE}\W++(?:\w++\W++)?{_DOCUMENT}\b|it|them)|\W*+$)"
    rf"|\bwhat\b.{{0,40}}\b{_THESE}\s++(?:\w++\s++){{0,2}}{_DOCUMENT}\b.{{0,30}}\b"
    rf"(?:about|cover|covers|contain|contains|describe|describes)\W*+$"
    rf"|\bwhat(?:'s| is| are)\s++(?:this|it|they)\s++about\b",
    re.IGNORECASE,
)
# "这份文档主要讲了什么", "<file> 讲的是什么", "总结一下", "这个 PDF 的主要内容", "概述一下这本手册".
_DOCUMENT_ZH = alternation("document-words-zh")
_ABOUT_ZH = re.compile(
    rf"(?:这|那|该|本|此)[份个篇本部些]?\s?{_DOCUMENT_ZH}?.{{0,8}}(?:讲|说|介绍|写|谈|讲述|关于|涉及)(?:了|的|些)*(?:是)?(?:什么|啥|哪些)"
    rf"|{_DOCUMENT_ZH}.{{0,8}}(?:讲|说|介绍|写|谈|讲述|关于|涉及)(?:了|的|些)*(?:是)?(?:什么|啥|哪些)"
    rf"|(?:总结|概括|概述|介绍)一下\s*(?:(?:这|本|该)?[份个篇本部些]?{_DOCUMENT_ZH}|[。？?！!]|$)"
    rf"|(?:这|本|该)[份个篇本部些]?\s?{_DOCUMENT_ZH}.{{0,6}}(?:主要内容|内容简介|内容提要|摘要|大纲|概要|目录)"
)
# A question that names a file asks about the whole of it when it ends in what it asks ("What is R-intro.pdf
# about?", "R-intro.pdf 讲了什么") or asks for a summary; "What does R-intro.pdf say about data frames?" does not.
_ABOUT_NAMED = re.compile(
    r"\babout\W*+$|\bsummar|\boverview\b|(?:讲|介绍|说)(?:了|的)?(?:些)?(?:什么|啥)|是什么|(?:介绍|总结|概括)一下", re.I
)


# A question that asks how to make a table of contents, an outline or a summary ("How do I add a table of contents?",
# "Can I draw an outline?", "如何生成目录？") asks how it is done, in a document of the user's: it asks how, and
# names a way of making one. "Write a summary of this manual" asks the app for one, and is about the documents.
_HOW_TO = re.compile(alternation("how-to-asked"), re.IGNORECASE)
_MAKING = re.compile(alternation("making-words"), re.IGNORECASE)


def asks_how_to_make(question: str) -> bool:
    """Whether a question asks how to make or change something ("How do I add a table of contents?")."""
    return _HOW_TO.search(question) is not None and _MAKING.search(question) is not None


def asks_about_documents(question: str, files: Iterable[str] = ()) -> bool:
    """Whether a question asks what whole documents are about, rather than something inside them. Naming one of
    ``files`` makes "what is <file> about", "介绍一下 <file>" or "What is <file>?" such a question too; asking how to
    make a table of contents or an outline ("How do I add a table of contents?") does not."""
    if asks_how_to_make(question):
        return False
    if _ABOUT_EN.search(question) or _ABOUT_ZH.search(question):
        return True
    named = named_files(question, files)
    if not named:
        return False
    if len(named) > 1 and _COMPARES.search(question):  # "Compare gnuplot.pdf and ctex.pdf": what each is
        return True
    return _ABOUT_NAMED.search(question) is not None or not content_words(without_names(question, files))


def names_a_document(question: str, files: Iterable[str]) -> bool:
    """Whether a question names its document itself ("this manual", "这份文档", a file name), rather than with a
    word that points back to the conversation ("Summarize it")."""
    named = re.search(
        rf"\b{_THESE}\s++(?:\w++\s++)?{_DOCUMENT}\b|(?:这|本|该)[份个篇本部些]?{_DOCUMENT_ZH}", question, re.I
    )
    return named is not None or bool(named_files(question, files))


_COMPARES = re.compile(r"\bcompar|\bdiffer|\bvs\b|\bversus\b|比较|对比|区别|差别|异同", re.IGNORECASE)


def _spoken(text: str) -> str:
    """Text as words, the way a question writes a file name: "R-intro" → "r intro"."""
    return " ".join(re.split(r"[\W_]+", fold(text).lower())).strip()


def named_files(question: str, files: Iterable[str], by_word: bool = False) -> list[str]:
    """The files a question names, by file name ("R-intro.pdf") or by its stem as words ("r intro"). A stem of one
    word ("gnuplot", "widget") names its file only ``by_word``, in a question already known to be about whole
    documents ("the gnuplot manual"): elsewhere it is a word of the question ("How many cores does the widget
    need?")."""
    asked, spoken = fold(question).lower(), f" {_spoken(question)} "
    found = []
    for file in files:
        name, stem = fold(PurePosixPath(file).name).lower(), _spoken(PurePosixPath(file).stem)
        words_ok = len(stem) >= 4 and (by_word or " " in stem)
        # The whole name: "guide.pdf" is not named by "user-guide.pdf", nor "a.pdf" by "data.pdf".
        if re.search(rf"(?<![\w.-]){re.escape(name)}(?!\w)", asked) or (words_ok and f" {stem} " in spoken):
            found.append(file)
    return found


def without_names(question: str, files: Iterable[str]) -> str:
    """The question without the files it names: a file's name is no term a passage must mention."""
    for file in named_files(question, files):
        name = PurePosixPath(file).name
        question = re.sub(rf"(?<![\w.-]){re.escape(name)}(?!\w)", " ", question, flags=re.IGNORECASE)
        words = r"[\W_]+".join(map(re.escape, _spoken(PurePosixPath(file).stem).split()))
        question = re.sub(rf"(?<!\w){words}(?!\w)(?:\.pdf)?", " ", question, flags=re.IGNORECASE)
    return " ".join(question.split())


_LANGUAGE_NAMED = {
    "zh": re.compile(r"\bchinese\b|中文|汉语|简体", re.IGNORECASE),
    "en": re.compile(r"\benglish\b|英文|英语", re.IGNORECASE),
}


def documents_named(question: str, languages: Mapping[str, str]) -> list[str]:
    """The documents a question about whole documents is about, of ``languages`` (each file of the scope with its
    language): those it names; else those of the language it names ("the Chinese PDF"); else every one."""
    files = list(languages)
    if named := named_files(question, files, by_word=True):
        return named
    for lang, naming in _LANGUAGE_NAMED.items():
        if naming.search(question) and (in_it := [f for f in files if languages[f] == lang]):
            return in_it
    return files


# Words that call a document a document, or say how a question asks: no title is told apart by them.
_NOT_TITLE_WORDS = frozenset(
    [stem(w) for w in (*words("document-words", "latin"), *words("asking-not-asked", "latin"))]
    + [*words("document-words-zh", "han"), *words("asking-not-asked", "han")]
)


def by_title(question: str, documents: Sequence[Overview]) -> list[str]:
    """The documents a question names by the words of their title or outline rather than their file name ("What is
    the Beamer user guide about?", "这份安装指南讲了什么"): those whose titles (and, at half the weight, outlines) hold
    most of the question's words, a word weighing less the more titles hold it; several only when they tie. []
    when no title or outline holds a word of the question."""
    asked = [w for w in content_words(question) if w not in _NOT_TITLE_WORDS]
    scores = dict.fromkeys((d.file for d in documents), 0.0)
    titles = {d.file: _Words(d.title) for d in documents}
    outlines = {d.file: _Words("\n".join(heading for _, heading, _ in d.outline)) for d in documents}
    for word in asked:
        in_title = [file for file, title in titles.items() if title.holds(word)]
        in_outline = [file for file, outline in outlines.items() if file not in in_title and outline.holds(word)]
        for file in in_title:
            scores[file] += 1 / len(in_title)
        for file in in_outline:
            scores[file] += 0.5 / (len(in_title) + len(in_outline))
    best = max(scores.values(), default=0.0)
    return [file for file, score in scores.items() if score == best] if best > 0 else []


class _Words:
    """A text's words, to ask whether it holds one of a question's: a Chinese word as written, another by its stem."""

    def __init__(self, text: str) -> None:
        self.text, self.words = text, set(content_words(text))

    def holds(self, word: str) -> bool:
        return han_named(word, self.text) if has_han(word) else word in self.words


@dataclass(frozen=True, kw_only=True)
class Overview:
    """What one document is: its title, the sentences that say so (as strips to quote and cite), its outline."""

    file: str
    title: str
    pages: int
    said: tuple[Strip, ...]
    outline: tuple[tuple[int, str, int], ...]  # (depth from 0, heading, page), the top levels
    from_bookmarks: bool = False  # the outline is the PDF's own, not the headings the parser found
    opening: tuple[Chunk, ...] = ()  # the chunks ``said`` quotes


# A sentence that says what its document is: it defines ("R is an integrated suite…", "…是一种…") or describes
# ("This manual describes…", "本文档描述…"); one that names the document ("this manual", "本文档") says more.
_DEFINES = re.compile(
    r"\b(?:is|are)\s+(?:a|an|the)\b|\b(?:describ|explain|introduc|cover|present)(?:e|es|s|ed)?\b"
    r"|\bpurpose\b|(?<![只就还也不都总])是一(?:个|种|款|份|本|套)|介绍|描述|讲述|说明|目的|旨在|用于|适用于|致力于",
    re.IGNORECASE,
)
_NAMES_ITSELF = re.compile(
    r"\b(?:this|the present)\s+(?:manual|document|guide|book|tutorial|introduction|faq|paper|text)\b"
    r"|本(?:文|书|手册|文档|指南|教程)|这(?:份|本|篇)",
    re.IGNORECASE,
)
# A version, a date: front matter ("This manual is for R, version 4.2.2 (2022-11-10).").
_DATED = re.compile(r"\bversion\b|\d{4}-\d{2}|(?<!\d)\d++\.\d++\.\d|版本|\d{4}\s*+年", re.IGNORECASE)
# Front matter that says nothing of what a document is about.
FRONT_MATTER = re.compile(alternation("front-matter"), re.IGNORECASE)
INTRODUCTION = re.compile(alternation("introduction-headings"), re.IGNORECASE)


def overview(file: str, chunks: Sequence[Chunk], record: FileResult | None) -> Overview | None:
    """A document's overview from its chunks as indexed (in order) and its manifest entry; None without chunks."""
    if not chunks:
        return None
    title = (record.title if record else "") or _title(chunks)
    opening = _opening(chunks, title)
    said = _said(opening, title)
    bookmarks = _bookmarks(record)
    pages = record.pages if record else max(chunks[-1].pages, default=0)
    quoted = {s.chunk_id for s in said}
    shown = tuple(c for c in dict.fromkeys(opening) if c.id in quoted)
    return Overview(
        file=file,
        title=title,
        pages=pages,
        said=said,
        outline=bookmarks or _headings(chunks, title),
        from_bookmarks=bool(bookmarks),
        opening=shown,
    )


_CONTENTS = re.compile(r"^(?:table of )?contents$|^index$|^目\s*录$|^索\s*引$", re.IGNORECASE)
# A contents page: "Introduction ........ 5", or a run of page numbers. Each run is tried from its start only.
_LEADERS = re.compile(r"(?<![.\s])(?:\.\s*+){5,}+\d|(?<!\d)(?:\s\d{1,3}){6,}+")


def _opening(chunks: Sequence[Chunk], title: str) -> list[Chunk]:
    """The chunks that open a document, past its table of contents: its first ``TUNING.overview.opening``, and further
    on the first few of sections named as an introduction or after what the title names ("Gnuplot" in "gnuplot 5.4")."""
    words = {w.lower() for w in title_words(title)}
    readable = [
        c for c in chunks[: TUNING.overview.opening * 6] if not _CONTENTS.match(_top(c)) and not _LEADERS.search(c.text)
    ]
    later = [c for c in readable[TUNING.overview.opening :] if INTRODUCTION.search(_top(c)) or _top(c).lower() in words]
    return readable[: TUNING.overview.opening] + later[:4]


def _top(chunk: Chunk) -> str:
    return chunk.section.split(" > ")[0].strip()


def _title(chunks: Sequence[Chunk]) -> str:
    """The heading the document opens with, unless that is a chapter's ("1 Introduction"): then it has none found."""
    first = chunks[0]
    top = _top(first)
    if not top:
        top = next((line.strip() for line in first.text.splitlines() if line.strip()), "")[:120]
    return "" if _NUMBERED.match(top) else top


def _said(opening: Sequence[Chunk], title: str) -> tuple[Strip, ...]:
    """The sentences of the opening that say best what the document is, best first: one that defines what the title
    names ("R is an integrated suite…" in "An Introduction to R") counts most, then one that defines or describes;
    naming the document or the title's words adds, a version or a date takes away. The first readable sentence when
    none defines or describes."""
    words = title_words(title)
    subject = re.compile(
        rf"^(?:\W*\w+\W+){{0,2}}?(?:{'|'.join(map(re.escape, words))})\s*(?:(?:is|are)\b|是)", re.IGNORECASE
    )
    scored: list[tuple[float, int, int, str, Chunk]] = []
    for i, chunk in enumerate(opening):
        for j, sentence in enumerate(_sentences(chunk.text)):
            folded = fold(sentence)
            score = (
                2.0 * bool(_DEFINES.search(sentence))
                + 2.0 * bool(words and subject.search(sentence))
                + bool(_NAMES_ITSELF.search(sentence))
                + min(1.0, sum(w in folded for w in words) / 2)
                - bool(_DATED.search(sentence))
            )
            scored.append((score, i, j, sentence, chunk))
    if not scored:
        return ()
    best = (
        sorted((s for s in scored if s[0] >= 2.0), key=lambda s: (-s[0], s[1], s[2]))[: TUNING.overview.said]
        or scored[:1]
    )
    return tuple(
        Strip(
            text=sentence,
            score=1.0,
            kept=True,
            kind="local",
            file=c.file,
            pages=c.pages,
            order=(i, j),
            chunk_id=c.id,
            section=c.section,
        )
        for _, i, j, sentence, c in best
    )


_TITLE_STOP = frozenset(words("title-stop"))


def title_words(title: str) -> list[str]:
    """What a title names: its words but the generic ones ("An Introduction to R" → R), and the pairs of Chinese
    characters of its Chinese part ("新维护者手册" → 新维, 维护, …)."""
    latin = [
        w for w in re.findall(r"[^\W\d_]+(?:[+#]+)?", fold(title)) if not HAN.match(w) and w.lower() not in _TITLE_STOP
    ]
    han = "".join(HAN.findall(title))
    return latin + [han[i : i + 2] for i in range(len(han) - 1)]


def _sentences(text: str) -> list[str]:
    """The sentences of a passage worth quoting for what a document is: prose, not a table, a list or a licence."""
    out = []
    for paragraph in text.split("\n\n"):
        if paragraph.lstrip().startswith(("|", "•", "-", "`")):
            continue
        for sentence in split_sentences(" ".join(paragraph.split())):
            # A sentence that gives orders is no statement of what a document is, and never reaches a model.
            if 40 <= width(sentence) <= 480 and not FRONT_MATTER.search(sentence) and not injection_reason(sentence):
                out.append(sentence)
    return out


def _bookmarks(record: FileResult | None) -> tuple[tuple[int, str, int], ...]:
    """The PDF's own outline, its top level; the second too when the top has fewer than four entries."""
    if record is None or not record.outline:
        return ()
    top = min(level for level, _, _ in record.outline)
    levels = 1 if sum(level == top for level, _, _ in record.outline) >= 4 else 2
    return tuple(
        (level - top, title, page)
        for level, title, page in record.outline
        if level < top + levels and not _CONTENTS.match(re.sub(r"^\W*[IVX\d]+\W+", "", title))
    )[: TUNING.overview.outline]


# A chapter heading: "2 Objects", "Chapter 3", "A.", "第一章"; not a title opening with a one-letter name ("R FAQ").
_NUMBERED = re.compile(r"^(?:chapter\s+)?(?:\d+(?:[.\s]|$)|[A-Z](?:\.|\s*$))|^第.{1,3}[章部篇]", re.IGNORECASE)


def _headings(chunks: Sequence[Chunk], title: str) -> tuple[tuple[int, str, int], ...]:
    """The top headings the parser found, with their first page: chapters ("2 Objects", "第一章"), or every top
    heading when none is numbered as a chapter."""
    seen: dict[str, int] = {}
    for chunk in chunks:
        top = _top(chunk)
        if len(top) > 2 and top != title and top not in seen and not _CONTENTS.match(top) and chunk.pages:
            seen[top] = chunk.pages[0]
    chapters = {h: p for h, p in seen.items() if _NUMBERED.match(h) and not re.match(r"^(?:\d+|[A-Z])\.\d", h)}
    return tuple((0, heading, page) for heading, page in (chapters or seen).items())[: TUNING.overview.outline]


# How an answer about whole documents reads, in the question's language.
_SAYS = {  # after the title
    "en": " ({file}, {pages} pages). What it says it is:",
    "zh": "（{file}，共 {pages} 页）。它自己的介绍：",
}
_OUTLINE = {
    "en": "Its outline ({how}):",
    "zh": "文档目录（{how}）：",
}
_HOW = {
    ("en", True): "its bookmarks",
    ("en", False): "the headings found",
    ("zh", True): "PDF 书签",
    ("zh", False): "识别出的标题",
}
_PAGE = {"en": "p. {page}", "zh": "第 {page} 页"}
_SEVERAL = {"en": "{count} documents. What each says it is:", "zh": "共 {count} 份文档，各自的介绍："}


def numbered(strips: Sequence[Strip], sources: Sequence[Source], gap: str = "\n") -> list[Quote]:
    """Each strip as a quote with the number of the source holding its chunk, one under the other."""
    by_chunk = {chunk_id: s.n for s in sources for chunk_id in s.chunk_ids}
    quotes = [Quote(text=s.text, n=by_chunk[s.chunk_id], gap="\n") for s in strips if s.chunk_id in by_chunk]
    return [replace(q, gap=gap) if i == 0 else q for i, q in enumerate(quotes)]


def heading(document: Overview, language: str, gap: str = "") -> Heading:
    title = document.title or PurePosixPath(document.file).stem
    detail = _SAYS[language].format(file=document.file, pages=document.pages)
    return Heading(text=title, detail=detail, gap=gap)


def outline(document: Overview, language: str) -> Outline | None:
    """The document's outline, each heading with its page; None when none is known."""
    if not document.outline:
        return None
    how = _HOW[(language, bool(document.from_bookmarks))]
    entries = tuple(
        (depth, f"{title} ({_PAGE[language].format(page=page)})") for depth, title, page in document.outline
    )
    return Outline(heading=_OUTLINE[language].format(how=how), entries=entries, gap="\n\n")


def render(documents: Sequence[Overview], sources: Sequence[Source], language: str) -> list[Part]:
    """The answer about whole documents, quoted: for one, its title, what it says it is, and its outline; for
    several, one paragraph each, title and what it says it is."""
    if len(documents) == 1:
        document = documents[0]
        found = outline(document, language)
        return [
            heading(document, language),
            *numbered(document.said, sources, gap="\n\n"),
            *([found] if found else []),
        ]
    parts: list[Part] = [Lead(text=_SEVERAL[language].format(count=len(documents)))]
    for document in documents:
        parts += [heading(document, language, "\n\n"), *numbered(document.said[: TUNING.overview.said_each], sources)]
    return parts
