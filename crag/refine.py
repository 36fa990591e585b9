"""CRAG's knowledge refinement: decompose, score, filter, recompose.

Kept chunks (or fetched web pages) are cut into strips of a few sentences; every strip is scored
by the cheap similarity evaluator in one batch (no LLM call per strip); the best ``keep`` strips at
or above ``floor`` survive; they are put back in document order, each with its source. Every dropped
strip says why it was dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from crag.analysis import coverage, word_weights
from crag.blocks import code_text, held_open, is_code, markdown_table, table_rows
from crag.evaluator import SimilarityEvaluator
from crag.injection import find_injection, injection_reason
from crag.text import ASKS, ENDED, NOTE, join_blocks, join_sentences, split_sentences, width
from crag.tuning import TUNING
from crag.types import Drop, ScoredChunk, Source, Strip, WebResult


# A strip is not over until its full stop, and an unfinished one introduces what follows: "you can do:", "For
# example,", "输入以下命令" (PDFs often lose the colon before a code display), a command shown on a line of its own
# before the sentence that explains it ("tlmgr info <pkgs>" then "列出 <pkgs> 的详细信息"), or the first half of a
# sentence that such a command cut in two ("it can be read on Windows by read.table(...)" then "but on a Unix-alike
# might need ..."). So does a question: in a FAQ it is the heading of its answer ("36 如何使首段段首也缩进？" then
# "使用 indentfirst 宏包"), and it is what a user's question matches best, while the answer alone may share no word
# with it. A question that opens a paragraph therefore starts a strip, even after an unfinished one.
def decompose(text: str, kind: str = "local", limit: int = TUNING.refinement.strip_chars) -> list[str]:
    """Sentences grouped into strips of at most ``limit`` characters (a longer sentence is one strip).

    A sentence that introduces what follows ("you can do:", "使用命令：", a displayed command, a FAQ's question)
    stays with it, whatever the limit: the command or example after it is the answer, and alone it matches no
    question. A sentence that looks like prompt injection is a strip of its own, so dropping it costs no fact.

    In a document (``kind`` local), code is one piece that keeps its lines, and a table is cut between rows into
    strips that each open with its header row (``crag.blocks``): a blank line sets either apart in its strip.
    """
    out = _Strips(kind, limit)
    for paragraph in text.split("\n\n"):
        if kind == "local" and (rows := table_rows(paragraph)) is not None:
            out.table(rows)
        elif kind == "local" and is_code(paragraph):
            out.block(code_text(paragraph))
        else:
            out.prose(paragraph)
    return out.finish()


class _Strips:
    """Strips as ``decompose`` makes them: the one being filled is ``current``; ``block`` says it ends in code or a
    table, which the next piece follows after a blank line."""

    def __init__(self, kind: str, limit: int) -> None:
        self.kind, self.limit = kind, limit
        self.strips: list[str] = []
        self.current, self.ends_in_block = "", False

    def close(self) -> None:
        if self.current:
            self.strips.append(self.current)
        self.current, self.ends_in_block = "", False

    def add(self, piece: str, join: Callable[[str, str], str], block: bool = False, inside: bool = False) -> None:
        """``inside``: the strip so far ends inside a bracket or quotation that ``piece`` closes; it goes on."""
        size = width(self.current) + width(piece) + 1
        # An open bracket or quotation holds a strip open past its limit, never past twice it: a stray inch mark
        # (12" … 15") must not make one strip of a page.
        full = size > 2 * self.limit or (not inside and size > self.limit and not leads_in(self.current))
        introduced = block and leads_in(self.current)  # a block stays with the sentence that introduces it
        if self.current and full and not introduced:
            self.close()
        if self.current and (block or self.ends_in_block):
            self.current = f"{self.current}\n\n{piece}"
        else:
            self.current = join(self.current, piece)
        self.ends_in_block = block

    def prose(self, paragraph: str) -> None:
        sentences = split_sentences(paragraph.replace("\n", " "))
        inside = [False, *held_open(sentences)]  # before each sentence: "(see e.g." is no strip's end
        note = bool(NOTE.match(paragraph))
        if self.current and (note or not leads_in(self.current) or (sentences and ASKS.search(sentences[0]))):
            self.close()
        for i, sentence in enumerate(sentences):
            if injection_reason(sentence, self.kind):
                self.close()
                self.strips.append(sentence)
                continue
            # Across paragraphs a space: "执行 sudo visudo 将 /usr/local/…", not "执行sudo visudo将/usr/local/…".
            self.add(sentence, join_blocks if i == 0 else join_sentences, inside=inside[i])
        if note:  # a footnote is a strip of its own, finished or not
            self.close()

    def block(self, text: str) -> None:
        if self.current and not leads_in(self.current):
            self.close()
        self.add(text, join_blocks, block=True)

    def table(self, rows: Sequence[Sequence[str]]) -> None:
        """A table's rows packed into strips of at most ``limit``, each under the header row: a row is read by its
        column names. The first stays with the sentence that introduces the table."""
        header, body = rows[0], rows[1:]
        group: list[Sequence[str]] = []
        for row in body:
            if group and width(markdown_table([header, *group, row])) > self.limit:
                self.block(markdown_table([header, *group]))
                self.close()
                group = []
            group.append(row)
        self.block(markdown_table([header, *group]))
        self.close()

    def finish(self) -> list[str]:
        self.close()
        return self.strips


def leads_in(strip: str) -> bool:
    """Whether a strip introduces what follows: it asks, or it has not reached its full stop."""
    return bool(ASKS.search(strip)) or not ENDED.search(strip)


# A section is one topic. A chunk graded on its own words can score far below the chunk before it in the same section
# (it opens with a table, or goes on with a list), while its heading says what it is about. Its strips start at most
# ``TUNING.refinement.section_gap`` below the section's best.
def local_strips(chunks: Sequence[ScoredChunk]) -> list[Strip]:
    """The strips of graded chunks; each starts with its chunk's grade, or with its section's best grade less
    ``TUNING.refinement.section_gap`` when that is higher, and refinement blends in the strip's own score.

    A chunk found by searching again for a term that the others never mention (``anchor``) starts level with the
    best of them: it is the only one about what the question names ("R" in a Chinese question that matched passages
    on Asymptote's axes). This is refinement only: the action is decided before, and such a chunk cannot make it
    Correct."""
    top = max((hit.score for hit in chunks), default=0.0)
    best: dict[tuple[str, str], float] = {}
    for hit in chunks:
        if hit.chunk.section:
            key = (hit.chunk.file, hit.chunk.section)
            best[key] = max(best.get(key, hit.score), hit.score)
    return [
        Strip(
            text=text,
            score=top
            if hit.anchor
            else max(
                hit.score, best.get((hit.chunk.file, hit.chunk.section), hit.score) - TUNING.refinement.section_gap
            ),
            kept=False,
            kind="local",
            file=hit.chunk.file,
            pages=hit.chunk.pages,
            order=(i, j),
            chunk_id=hit.chunk.id,
            section=hit.chunk.section,
        )
        for i, hit in enumerate(chunks)
        for j, text in enumerate(decompose(hit.chunk.text))
    ]


def web_strips(results: Sequence[WebResult]) -> list[Strip]:
    return [
        Strip(text=text, score=0.0, kept=False, kind="web", url=r.url, title=r.title, order=(i, j), section=r.title)
        for i, r in enumerate(results)
        for j, text in enumerate(decompose(r.text or r.snippet, "web"))
    ]


# A strip's own score weighs ``TUNING.refinement.own_weight``; the grade of the passage it comes from weighs the
# rest. Alone, a strip that answers often matches the question's words less than one that restates it; the
# evaluator's grade of the whole passage, heading included, says where the answer is. A footnote is an aside, not
# what its passage is about: it scores no more than its own words do, nor than a strip of its passage.
def blend(strip: Strip, own: float) -> float:
    if strip.kind != "local":
        return own
    blended = round(TUNING.refinement.own_weight * own + (1 - TUNING.refinement.own_weight) * strip.score, 4)
    return min(own, blended) if NOTE.match(strip.text) else blended


# A Chinese question's grades are its words' coverage when the embedder reads no Chinese (an index built with an
# English-only embedder; with a multilingual one this rule is off): a passage that names a topic in passing among
# others holds every word of a question about it, and grades as high as the section on it. What a strip is about
# is what its heading says: the last part of its section path, or the FAQ question it opens with. A strip whose
# heading holds none of the question's words is lowered by ``TUNING.refinement.off_topic`` (less for a heading that
# holds some), so that among passages that all hold the words, the one about them comes first.
def heading(strip: Strip) -> str:
    """What a local strip says it is about: the last heading of its section path, and the question it opens with."""
    if strip.kind != "local":
        return ""
    first = split_sentences(strip.text)[:1]
    asked = first[0] if first and ASKS.search(first[0]) else ""
    return f"{strip.section.rsplit(' > ', 1)[-1]}\n{asked}"


def refine(question: str, strips: Sequence[Strip], scorer: SimilarityEvaluator, keep: int, floor: float) -> list[Strip]:
    """Every strip scored and marked kept or dropped with the reason; kept ones first, in document order."""
    if not strips:
        return []
    grades = scorer.grade(question, [s.scored_text for s in strips]).grades
    off = scorer.off_topic(question, [heading(s) for s in strips])
    scored = [
        _injected(replace(s, score=max(-1.0, blend(s, g.score) - TUNING.refinement.off_topic * o)))
        for s, g, o in zip(strips, grades, off, strict=True)
    ]
    ranked = sorted((i for i, s in enumerate(scored) if s.drop is None), key=lambda i: -scored[i].score)
    kept = {i for i in ranked[:keep] if scored[i].score >= floor}
    marked = []
    for i, s in enumerate(scored):
        if i in kept:
            marked.append(replace(s, kept=True))
        elif s.drop is not None:
            marked.append(s)
        elif s.score < floor:
            marked.append(
                replace(s, drop=Drop.BELOW_FLOOR, reason=f"scored {s.score:.2f}, below the floor {floor:.2f}")
            )
        else:
            marked.append(replace(s, drop=Drop.NOT_AMONG_BEST, reason=f"not among the {keep} best strips"))
    return sorted((s for s in marked if s.kept), key=lambda s: s.order) + [s for s in marked if not s.kept]


def _injected(strip: Strip) -> Strip:
    """The strip marked dropped when it looks like prompt injection."""
    found = find_injection(strip.text, strip.kind)
    return replace(strip, drop=Drop.INJECTION, reason=found.reason) if found else strip


def refine_closest(question: str, strips: Sequence[Strip], scorer: SimilarityEvaluator, count: int) -> list[Strip]:
    """The action is Incorrect and the web gave nothing: the ``count`` best strips are kept all the same, marked as
    the closest passages (the answer says what is missing, and that they may not answer)."""
    words = word_weights(question, None)
    related = [s for s in strips if coverage(words, s.scored_text)]  # a passage that shares no word is not close
    refined = refine(question, related, scorer, count, -1.0)
    why = f"kept as one of the {count} closest passages: the action is Incorrect"
    return [replace(s, reason=why) if s.kept else s for s in refined]


def keep_closest(strips: Sequence[Strip], count: int) -> list[Strip]:
    """Ambiguous, and no strip reached the floor: keep the ``count`` best all the same, marked as the closest
    passages (the answer says they may not answer). A strip dropped as a possible injection stays dropped."""
    ranked = sorted((s for s in strips if not s.kept and s.drop is Drop.BELOW_FLOOR), key=lambda s: -s.score)
    chosen = {id(s) for s in ranked[:count]}
    marked = [
        replace(s, kept=True, reason=f"{s.reason}; kept as one of the {count} closest passages")
        if id(s) in chosen
        else s
        for s in strips
    ]
    return sorted((s for s in marked if s.kept), key=lambda s: s.order) + [s for s in marked if not s.kept]


def number_sources(
    strips: Sequence[Strip], graded: Sequence[ScoredChunk], quoted: Sequence[Strip] = ()
) -> list[Source]:
    """One numbered source per chunk or web page that kept a strip, numbered in context order; the sources of
    ``quoted`` (the strips an evidence answer quotes, in the answer's order) come before the others."""
    chunks = {g.chunk.id: g.chunk for g in graded}
    groups: dict[tuple[str, str], list[Strip]] = {_source_key(s): [] for s in quoted}
    for strip in strips:
        if strip.kept:
            groups.setdefault(_source_key(strip), []).append(strip)
    sources = []
    for n, ((kind, _), members) in enumerate(((key, m) for key, m in groups.items() if m), start=1):
        text = "\n\n".join(m.text for m in members)  # a strip may end in code or a table
        first = members[0]
        if kind == "local":
            chunk = chunks.get(first.chunk_id)
            sources.append(
                Source(
                    n=n,
                    kind="local",
                    text=text,
                    file=first.file,
                    pages=first.pages,
                    chunk_ids=(chunk.id,) if chunk else (),
                    bboxes=chunk.bboxes if chunk else (),
                    section=first.section,
                )
            )
        else:
            sources.append(Source(n=n, kind="web", text=text, url=first.url, title=first.title))
    return sources


def _source_key(strip: Strip) -> tuple[str, str]:
    return ("local", strip.chunk_id) if strip.kind == "local" else ("web", strip.url)
