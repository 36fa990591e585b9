"""Labels, escaping and formatting for the page. Pure functions: no Streamlit here.

Text that comes from documents or the web is data. It is shown with ``st.text``, ``st.code`` or in
tables; where a piece of it must sit inside Markdown (a file name in a heading), ``md_escape`` makes
it literal. Model answers are Markdown, minus images and links: an image would make the browser fetch a
URL that a document or web page could have dictated, and a link's text could hide where it leads.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import groupby
from typing import Any, Literal

from crag.conversations import Conversation, Message, Stop
from crag.errors import CragError, Remedy, said
from crag.markdown import model_markdown, safe_stream
from crag.parts import (
    Code,
    Heading,
    Lead,
    Note,
    Outline,
    Part,
    Quote,
    Suggestions,
    Table,
    Written,
    plain,
    quoted_texts,
    table_text,
)
from crag.text import language
from crag.types import Action, FileResult, Progress, TermCheck

# Every ASCII punctuation character may be backslash-escaped in CommonMark, and Streamlit's extra
# syntax (:red[...], :material/icon:, $math$) is made of them too.
MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>:$~&=\"'^])")


def md_escape(text: str) -> str:
    """Text that Markdown shows literally, on one line."""
    return MD_SPECIAL.sub(r"\\\1", " ".join(text.split()))


# A web address in a quote, without the punctuation that ends its sentence or closes the quote: left to Markdown,
# "from http://binaries.html-tidy.org/.”" links to "http://binaries.html-tidy.org/.%E2%80%9D".
URL = re.compile(r"https?://[^\s<>“”\"'‘’]*[^\s<>“”\"'‘’.,;:!?)\]]")


# A host that is a whole name: labels joined by dots, ending in a top-level name ("www.r-project.org"), or an IP
# address. A line break in a PDF can cut an address in two ("https://CRAN." then "R-project.org/"): the first half
# is no address to link to.
# A label is letters and digits, with - or _ only inside, taken whole (possessive): tried from every letter, a
# label with a nested optional end backtracks over a long word quadratically.
HOST = re.compile(
    r"(?<![\w.-])(?:[^\W_]++(?:[_-]++[^\W_]++)*+\.)++[^\W\d_]{2,}|\d{1,3}(?:\.\d{1,3}){3}|\[[0-9a-fA-F:.]+\]"
)
URL_HOST = re.compile(r"https?://(?:[^@/?#\s]*@)?(?P<host>\[[^\]]*\]|[^:/?#\s]*)")
# What follows an address that a line break cut: a period then a lower-case word ("https://www.oracle. com"), or,
# after a slash or hyphen, more of a host or path ("https://cran.r-project.org/web/ packages/foo/").
CUT_AFTER_DOT = re.compile(r"\.\s+[a-z0-9]")
CUT_AFTER_SLASH = re.compile(r"(?<!\s)\s++[\w-]++[./][\w./-]*+")


def linkable(url: str, after: str = "") -> bool:
    """Whether an address found in a quote is whole enough to link: its host is a full name, and the text ``after``
    it does not go on with the rest of it."""
    host = URL_HOST.match(url)
    if host is None or HOST.fullmatch(host["host"]) is None:
        return False
    return not (CUT_AFTER_DOT.match(after) or (url.endswith(("/", "-")) and CUT_AFTER_SLASH.match(after)))


def md_linked(text: str) -> str:
    """``md_escape``, with each web address a link to exactly that address. An address cut in two (by a line break
    of the PDF it was quoted from) stays text: a link to its first half would lead elsewhere, or nowhere."""

    def link(found: re.Match[str]) -> str:
        address = found.group()
        return f"<{address}>" if linkable(address, found.string[found.end() :]) else md_escape(address)

    return _escaped_but(URL, text, link)


# A command in one of crag's own messages ("`python -m crag index`"): code, which Markdown shows literally anyway.
# What a message quotes (“PDF/A”, a web query) is the user's or a model's, and stays literal, backticks included.
# A quote holds no opening quote: each is scanned up to the next one at most.
CODE = re.compile(r"“[^“”]*+”|`[^`]+`")


def md_coded(text: str) -> str:
    """``md_escape``, with each `command` shown as code: the rest of a message (a word of the user's question in
    it) stays literal."""
    return _escaped_but(CODE, text, lambda found: found[0] if found[0].startswith("`") else md_escape(found[0]))


def _escaped_but(pattern: re.Pattern[str], text: str, markdown: Callable[[re.Match[str]], str]) -> str:
    """``md_escape``, with what ``pattern`` finds turned into ``markdown``."""
    text, out, last = " ".join(text.split()), [], 0
    for found in pattern.finditer(text):
        out += [MD_SPECIAL.sub(r"\\\1", text[last : found.start()]), markdown(found)]
        last = found.end()
    return "".join([*out, MD_SPECIAL.sub(r"\\\1", text[last:])])


def page_markdown(markdown: str) -> str:
    """A model's Markdown as the page shows it: ``model_markdown`` of the text Streamlit renders. ``st.markdown``
    dedents and strips what it is given, so an answer's indented first line is no code block there: escaped as it
    were one, an image in it would render."""
    return model_markdown(markdown.lstrip())


def page_stream(deltas: Iterable[str]) -> Iterator[str]:
    """``safe_stream`` of what ``st.write_stream`` renders: the answer from its first character that is not white
    space on, as ``page_markdown`` reads it."""
    started = False

    def stripped() -> Iterator[str]:
        nonlocal started
        for delta in deltas:
            if not started:
                delta = delta.lstrip()
                started = bool(delta)
            yield delta

    return safe_stream(stripped())


def no_images(markdown: str) -> str:
    """Markdown with image syntax turned into plain text: ``![x](url)`` shows as ``![x](url)``."""
    return markdown.replace("![", "!\\[")


def file_reason(file: str, error: str) -> str:
    """Why a file failed, to show after its name: the message itself opens with the name, said once is enough."""
    return no_images(error.removeprefix(f"{file}: ") or "failed")


# A remedy in the page's words: the sidebar's controls that do it.
REMEDIES = {
    Remedy.BUILD: "Build it: **Rebuild knowledge base** in the sidebar.",
    Remedy.FULL_REBUILD: "Run a full rebuild: **Rebuild knowledge base** in the sidebar, with **Full rebuild** on.",
}


# The same, for an answer in Chinese (``crag.messages.no_answer_message`` says in the question's language that nothing
# is indexed).
REMEDIES_ZH = {
    Remedy.BUILD: "构建方法：侧边栏中的 **Rebuild knowledge base**。",
    Remedy.FULL_REBUILD: "完整重建：打开侧边栏中的 **Full rebuild**，再点 **Rebuild knowledge base**。",
}


def remedy_text(remedy: Remedy, question: str) -> str:
    """What the user must do for any answer, in the page's words and the question's language."""
    return (REMEDIES_ZH if language(question) == "zh" else REMEDIES)[remedy]


def error_text(exc: CragError) -> str:
    """A CragError's message, with its remedy in the page's words."""
    return said(str(exc), exc.remedy, REMEDIES)


STOPPED = {
    "en": "This answer stopped before its end (a reload or another click interrupted it): ask again.",
    "zh": "这个回答没有完成（页面刷新或其他点击打断了它）：请再问一次。",
}


def stopped(question: str) -> str:
    """What an answer cut off by a reload or a click says, in the question's language."""
    return STOPPED[language(question)]


USER_STOPPED = {
    "en": "You stopped this answer. What it had said by then is kept; ask again for the whole answer.",
    "zh": "你停止了这个回答。它此前说的内容已保留；再问一次可以得到完整的回答。",
}


USER_STOPPED_SILENT = {
    "en": "You stopped this answer before it said anything: ask again for an answer.",
    "zh": "你在这个回答说出任何内容之前停止了它：请再问一次。",
}


def user_stopped(question: str, said: bool = True) -> str:
    """What an answer stopped with its Stop button says, in the question's language: ``said``, whether it had
    written anything by then, which is kept."""
    return (USER_STOPPED if said else USER_STOPPED_SILENT)[language(question)]


def stop_of(message: Message) -> Stop | None:
    """What stopped an answer. A message stored before messages kept it says it only in words: the Stop button's."""
    if message.stop is None and message.error in (*USER_STOPPED.values(), *USER_STOPPED_SILENT.values()):
        return Stop.USER
    return message.stop


def fenced(code: Code) -> str:
    """Quoted code in a fence, which shows it as typed (a fence longer than any run of backticks in it)."""
    return f"{code.fence}\n{code.text}\n{code.fence}"


def table_markdown(rows: Sequence[Sequence[str]]) -> str:
    """A table's rows (the header first) as a Markdown table, every cell escaped."""
    return table_text([[md_escape(cell) or " " for cell in row] for row in rows])


def _faq(faq: str) -> str:
    return f"*{md_escape(faq)}*" if faq else ""


def _block(part: Code | Table) -> str:
    """Quoted code or a table, the document's question it answers before it, its citation under it."""
    body = fenced(part) if isinstance(part, Code) else table_markdown(part.rows)
    return "\n\n".join(x for x in (_faq(part.faq), body, f"\\[{part.n}\\]") if x)


def _quote(part: Quote) -> str:
    """A quote as a block quote, the document's question it answers (a FAQ's) in italics before it. It is document
    text, so every character is escaped, and each web address in it links to exactly that address."""
    faq = f"{_faq(part.faq)} " if part.faq else ""
    return f"> {faq}{md_linked(f'“{part.text}” [{part.n}]')}"


def _heading(part: Heading) -> str:
    detail = (" " if part.detail[:1].isspace() else "") + md_escape(part.detail)
    return f"**{md_escape(part.title)}**{detail}".rstrip()


def _outline(part: Outline) -> str:
    items = "\n".join(f"{'  ' * depth}- {md_escape(entry)}" for depth, entry in part.entries)
    return f"**{md_escape(part.heading)}**\n\n{items}"


# How each part the app or a document said is set on the page: as text, every character escaped (``md_escape``),
# in bold, a block quote, a fence or a table. What the model wrote is ``page_markdown`` (``page_blocks``).
_PAGE: dict[type, Callable[[Any], str]] = {
    Lead: lambda part: f"**{md_escape(part.text)}**",
    Note: lambda part: md_coded(part.text),
    Quote: _quote,
    Code: _block,
    Table: _block,
    Heading: _heading,
    Outline: _outline,
}


def page_part(part: Part) -> str:
    """A part that is not the model's writing, as the page's Markdown."""
    return _PAGE[type(part)](part)


def page_blocks(parts: Iterable[Part]) -> list[str]:
    """An answer's parts as the page's Markdown blocks: what the model wrote in a row as one (``page_markdown``),
    and the parts between, each a paragraph of its own. Suggestions are set under the answer, with their buttons."""
    blocks: list[str] = []
    for written, group in groupby((p for p in parts if not isinstance(p, Suggestions)), key=Written.__instancecheck__):
        if written:
            blocks.append(page_markdown("".join(p.gap + p.text for p in group if isinstance(p, Written))))
        else:
            blocks.append("\n\n".join(page_part(p) for p in group))
    return [block for block in blocks if block.strip()]


GIST_LENGTH = 120  # characters of an earlier answer shown on its folded line


def gist(parts: Iterable[Part]) -> str:
    """What an answer says first, on one short line: its first sentence, or an evidence answer's first quote with
    its number; never a lead line above the quotes ("From your documents:"), which says nothing of the answer."""
    for part in parts:
        if isinstance(part, Lead | Suggestions):
            continue
        if isinstance(part, Quote):
            said = f"“{part.text}” [{part.n}]"
        elif isinstance(part, Code | Table):
            said = f"{quoted_texts(part)[0]} [{part.n}]"
        else:
            said = plain([replace(part, gap="")])
        if line := next((line for line in said.splitlines() if line.strip()), ""):
            return shorten(line, GIST_LENGTH)
    return ""


# ---------------------------------------------------------------------------------------------
# CRAG actions and stages


@dataclass(frozen=True, kw_only=True)
class ActionStyle:
    action: Action
    label: str
    color: Literal["red", "orange", "yellow", "blue", "green", "violet", "gray", "grey", "primary"]  # st.badge's
    icon: str
    effect: str  # what the action did to the knowledge the answer was made from

    @property
    def badge(self) -> str:
        """What the badge says: what was judged, then the action. It reads as a verdict on the passages the
        documents gave, not on the answer: a written answer may still state what they do not."""
        return f"Your documents: {self.action.verdict} (CRAG: {self.label})"

    @property
    def help(self) -> str:
        return (
            f"CRAG's retrieval evaluator judged the passages found in your documents {self.action.verdict} to the "
            f"question: action {self.label}. {self.effect} It does not check the answer itself: check it against "
            "its sources."
        )


ACTIONS = {
    Action.CORRECT: ActionStyle(
        action=Action.CORRECT,
        label="Correct",
        color="green",
        icon=":material/check_circle:",
        effect="The answer uses your documents, refined to the sentences that matter.",
    ),
    Action.AMBIGUOUS: ActionStyle(
        action=Action.AMBIGUOUS,
        label="Ambiguous",
        color="orange",
        icon=":material/help:",
        effect="The documents were not convincing: the answer uses what matched best in them, and the web when search "
        "is on.",
    ),
    Action.INCORRECT: ActionStyle(
        action=Action.INCORRECT,
        label="Incorrect",
        color="red",
        icon=":material/cancel:",
        effect="The retrieved passages did not match, so none is used: only a web search can answer, when web search "
        "is on.",
    ),
}

STAGES = {
    "understanding the follow-up": "Understanding the follow-up question",
    "reading the question": "Asking the model how your documents would word the answer",
    "retrieving": "Retrieving passages",
    "grading": "Grading the passages",
    "refining": "Refining the knowledge",
    "rewriting the question": "Searching again in the documents' words",
    "searching the web": "Searching the web",
    "generating": "Generating the answer",
    "waiting for the models": "Waiting for the models to load",
}


def stage_label(stage: str) -> str:
    return STAGES.get(stage, stage[:1].upper() + stage[1:])


def quoted_terms(terms: Iterable[str]) -> str:
    return ", ".join(f"“{md_escape(t)}”" for t in terms)


def action_reason(
    action: Action,
    scores: list[float],
    upper: float,
    lower: float,
    terms: TermCheck,
    searched_again: Sequence[str] = (),
) -> str:
    """Why the action trigger chose this action, in a sentence or two. ``searched_again``: missing terms a
    passage was then searched for (``Retriever.anchor``)."""
    if terms.decisive:
        return (
            f"Your documents never mention {quoted_terms(terms.unknown)}: they are on the question's topic at most, "
            "so their passages were marked as not answering it (a near miss)."
        )
    if terms.unknown and action is not Action.INCORRECT:
        return (
            f"Your documents never mention {quoted_terms(terms.unknown)}, in any form. The passages match the rest "
            "of the question, so they are shown as the closest ones, not as an answer."
        )
    if not scores:
        return "Nothing was retrieved, so the knowledge base could not help."
    best = max(scores)
    if terms.missing and action is not Action.INCORRECT:
        again = (
            f" The {'passages' if len(searched_again) > 1 else 'passage'} found by searching for "
            f"{quoted_terms(searched_again)} cannot either."
            if searched_again
            else ""
        )
        return (
            f"None of the passages found for the question mentions {quoted_terms(terms.missing)}, so they cannot be "
            f"Correct; the best scored {best:.2f}.{again}"
        )
    if action is Action.CORRECT:
        return f"The best passage scored {best:.2f}, at or above the upper threshold {upper:.2f}."
    if action is Action.AMBIGUOUS:
        return f"The best passage scored {best:.2f}: below the upper threshold {upper:.2f}, not below {lower:.2f}."
    return f"The best passage scored {best:.2f}, below the lower threshold {lower:.2f}."


# ---------------------------------------------------------------------------------------------
# Knowledge base


FILE_STATUS = {
    "indexed": "✅ indexed",
    "unchanged": "✅ indexed",
    "failed": "❌ failed",
    "skipped": "⏭️ skipped",
    "removed": "🗑️ removed",
    "new": "🆕 not indexed yet",
    "missing": "⚠️ no longer in the folder",
}
# A file's status while a build runs: the file being read, one this build has read, one it will read.
READING = "⏳ being read"
READ = "✅ read: in use when the build ends"
QUEUED = "🕒 waiting to be read"
REREAD = "🕒 waiting to be read again"  # a full rebuild reads every file anew; the index answers meanwhile
WARNINGS_SHOWN = 2  # of a file's warnings ("page 7: no text found"), listed under it; the rest are counted


def file_status(
    f: FileResult, progress: Progress | None, finished: dict[str, FileResult], rebuild: bool = False
) -> tuple[str, FileResult]:
    """A file's status in the Files list, and the record to describe it by. ``progress``, ``finished`` and
    ``rebuild``: the running build's step, the files it has finished (None and empty when no build runs), and whether
    it reads every file anew (a full rebuild), not only new and changed ones."""
    if f.file in finished:
        done = finished[f.file]
        return (READ if done.status == "indexed" else FILE_STATUS.get(done.status, done.status)), done
    if progress is not None and progress.file == f.file and progress.stage in ("parsing", "ocr", "embedding"):
        # Its page is on the build's progress bar, the one page counter: this list is redrawn at other moments, and a
        # second counter would disagree with it.
        return READING + {"embedding": " · embedding", "ocr": " · OCR"}.get(progress.stage, ""), f
    if progress is not None and f.status == "new":
        return QUEUED, f
    if progress is not None and rebuild and f.status not in ("missing", "removed"):
        return REREAD, f
    return FILE_STATUS.get(f.status, f.status), f


def file_details(f: FileResult) -> str:
    """What the Files list says under a file's name, as Markdown: its pages (and how many were read with OCR), its
    passages, and its warnings, whole, so that a narrow sidebar wraps them rather than cut them off."""
    parts = []
    if f.pages:
        pages = f"{f.pages:,} page{'s' if f.pages != 1 else ''}"
        if f.ocr_pages:
            pages += " read with OCR" if f.ocr_pages == f.pages else f", {f.ocr_pages:,} read with OCR"
        parts.append(pages)
    if f.chunks:
        parts.append(f"{f.chunks:,} passage{'s' if f.chunks != 1 else ''}")
    if f.status == "skipped" and f.error:
        parts.append(f.error)
    warnings = list(f.warnings[:WARNINGS_SHOWN])
    if len(f.warnings) > WARNINGS_SHOWN:
        warnings.append(f"and {len(f.warnings) - WARNINGS_SHOWN} more")
    text = md_escape(" · ".join(parts))
    if warnings:
        text += ("  \n" if text else "") + ":orange[" + md_escape("; ".join(warnings)) + "]"
    return text


def progress_text(p: Progress) -> str:
    """The line under the build's progress bar: stage, file i/N, page j/M. Markdown (file names escaped)."""
    file = f"**{md_escape(p.file)}**" if p.file else ""
    of_files = f" · file {p.file_index}/{p.file_count}" if p.file_count else ""
    if p.stage == "scanning":
        return "Scanning the files folder…"
    if p.stage == "parsing":
        pages = f" · page {p.page}/{p.page_count}" if p.page_count else ""
        return f"Reading {file}{of_files}{pages}"
    if p.stage == "ocr":
        return f"Reading {file}{of_files} · OCR page {p.page}/{p.page_count}"
    if p.stage == "embedding":
        chunks = f" · chunk {p.page}/{p.page_count}" if p.page_count else ""
        return f"Embedding {file}{of_files}{chunks}"
    if p.stage == "checking":  # an archive being imported: each of its parts read and its hash checked
        return f"Checking {file}{of_files}"
    if p.stage == "writing":
        return "Writing the index…"
    if p.stage == "done":
        return "Done"
    return p.stage


def time_left(left: float | None) -> str:
    """A build's time left in words, from its rates so far (``crag.jobs.Pace``): "" while it has none."""
    if left is None:
        return ""
    if left < 60:
        return "less than a minute left"
    return f"about {round(left / 60)} min left"


def build_summary(statuses: Iterable[str], chunks: int, seconds: float) -> str:
    counts: dict[str, int] = {}
    for status in statuses:
        counts[status] = counts.get(status, 0) + 1
    parts = [f"{n} {status}" for status, n in sorted(counts.items(), key=lambda kv: ORDER.get(kv[0], 9))]
    return f"{' · '.join(parts) or 'no files'} · {chunks:,} passages · {seconds:.1f} s"


ORDER = {"indexed": 0, "unchanged": 1, "failed": 2, "skipped": 3, "removed": 4}


def built_at(stamp: str) -> str:
    """ACTIVE.json's ``2025-11-21T07:05:00+0000`` as ``2025-11-21 07:05``."""
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S%z").strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return stamp


def chat_labels(chats: Sequence[Conversation]) -> list[str]:
    """The conversations' titles as the list shows them: chats that share a title (the same first question) are
    told apart by the time of their last message, and by a number when that is the same minute too."""
    titles = Counter(c.title for c in chats)
    labels = [
        c.title + (f" · {datetime.fromtimestamp(c.updated).strftime('%Y-%m-%d %H:%M')}" if titles[c.title] > 1 else "")
        for c in chats
    ]
    seen: Counter[str] = Counter()
    out = []
    for label in labels:
        seen[label] += 1
        out.append(md_escape(label if seen[label] == 1 else f"{label} ({seen[label]})"))
    return out


WORD = re.compile(r"\w+")


def export_name(title: str, key: int | str, kind: str = "answer") -> str:
    """The file name of an exported answer or chat: its question's or title's words ("answer-how-do-i-run-r.md"),
    any language."""
    words = WORD.findall(title.lower())
    slug = "-".join(words)[:60].strip("-")
    return f"{kind}-{slug or key}.md"


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def shorten(text: str, limit: int = 240) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
