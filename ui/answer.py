"""What sits under an answer: the badge line, "How this answer was made", the sources panel (``ui.sources``), the
export, and the thumbs that rate it (with what was wrong, on a thumbs down).

Document and web text is shown with ``st.text``, ``st.code`` and tables, never as Markdown or HTML.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import groupby
from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st

from crag.conversations import Conversations
from crag.errors import CragError
from crag.export import answer_markdown, follows_up
from crag.feedback import NOTE_CHARS, WRONG_WORDS, Label, Rating, Wrong, rating_words
from crag.messages import unsupported_message
from crag.models import PACKAGED_LABEL
from crag.parts import Part, Suggestions, Written
from crag.text import pages_label
from crag.types import NOT_WRITTEN, Answer, ScoredChunk, Source, ThresholdsFrom, Trace
from crag.websearch import OFF_REASON
from ui import state
from ui.sources import printed_pages, sources_panel
from ui.text import (
    ACTIONS,
    action_reason,
    export_name,
    md_escape,
    no_images,
    page_blocks,
    page_part,
    page_stream,
    remedy_text,
    shorten,
)

ZONE_COLORS = {"Correct": "#21a366", "Ambiguous": "#f0a020", "Incorrect": "#e0443e"}


def text(answer: Answer) -> None:
    """The answer's text, part by part (``ui.text.page_blocks``): what the model wrote as its Markdown with images and
    links as typed, quotes set as quotes, code as code, tables as tables, the app's own words as text."""
    for block in page_blocks(answer.parts):
        st.markdown(block)


def live(parts: Iterator[Part | None]) -> None:
    """An answer's parts on the page as they are made: what the model writes streamed as it comes
    (``ui.text.page_stream``), each other part set as it comes."""
    for written, group in groupby(parts, key=lambda p: p is None or isinstance(p, Written)):
        if written:
            st.write_stream(page_stream(p.gap + p.text if isinstance(p, Written) else "" for p in group))
        else:
            for part in group:
                if part is not None and not isinstance(part, Suggestions):
                    st.markdown(page_part(part))


def render(
    answer: Answer,
    question: str,
    files_dir: Path,
    key: int,
    previous: str = "",
    store: Conversations | None = None,
    rated: Label | None = None,
) -> None:
    """Badge line, the trace expander, the sources panel, the export and the thumbs of one answer. ``previous``: the
    question before it in the conversation, which its export names when it was read as a follow-up. ``store``: where
    the answer is kept, to rate it (its message is ``key``), and ``rated``: what the user said of it so far."""
    trace = answer.trace
    if trace is not None and trace.remedy:  # the answer says why there is none; this, what to do
        st.markdown(remedy_text(trace.remedy, question))
    badge_line(answer, question, previous)
    if follows_up(answer):  # the same question, without the conversation that changed how it was read
        st.button(
            "Ask it on its own",
            key=f"alone-{key}",
            icon=":material/call_split:",
            type="tertiary",
            on_click=state.ask_alone,
            args=(question,),
            help="Ask this question again, read as it is: not as a follow-up of the question before it.",
        )
    if trace is not None and trace.hint:
        st.caption(f":material/translate: {md_escape(trace.hint)}")
    if answer.suggestions:
        suggestions(answer, key)
    if not answer.complete:
        # crag's message names the fix; the partial text above stays, and so does the trace below.
        st.error(no_images(answer.error) or "The model stopped before the answer was complete: ask again.")
    if trace is not None:
        how_it_was_made(trace, trace.thresholds, key, source_labels(answer))
    sources_panel(answer, files_dir, key)

    def printed(source: Source) -> str:  # the page numbers the document prints, as the sources panel shows them
        return printed_pages(files_dir, source.file, source.pages)

    with st.container(horizontal=True, vertical_alignment="center", gap="small"):
        if store is not None and answer.complete:
            st.feedback(
                "thumbs",
                key=f"rate-{key}",
                default=THUMB.get(rated.rating) if rated else None,
                on_change=rate,
                args=(store, key),
            )
        st.download_button(
            "Export as Markdown",
            answer_markdown(question, answer, previous=previous, printed=printed),
            file_name=export_name(question, key),
            mime="text/markdown",
            icon=":material/download:",
            key=f"export-{key}",
            type="tertiary",
            on_click="ignore",
        )
    # A rating that could not be kept leaves the answer unrated (or rated as before): why is said under it.
    if error := st.session_state.pop(f"{RATING_ERROR}-{key}", None):
        st.error(md_escape(error))
    if store is not None and rated is not None:
        what_was_wrong(store, key, rated)


# ---------------------------------------------------------------------------------------------
# Ratings: the thumbs under an answer, and on a thumbs down what was wrong

THUMB = {Rating.DOWN: 0, Rating.UP: 1}  # st.feedback's values


def rate(store: Conversations, message: int) -> None:
    """The thumbs' click, before the next run: rated, rated again, or (the same thumb again) unrated."""
    value = st.session_state.get(f"rate-{message}")
    try:
        if value is None:
            store.unrate(message)
        else:
            rating = Rating.UP if value == THUMB[Rating.UP] else Rating.DOWN
            store.rate(message, rating)
            st.session_state.pop(f"wrong-{message}", None)  # a new thumbs down starts with nothing said wrong
            st.session_state.pop(f"note-{message}", None)
    except CragError as exc:
        st.session_state[f"{RATING_ERROR}-{message}"] = str(exc)


RATING_ERROR = "rating-error"  # why an answer's last rating could not be kept: said under that answer


def explain(store: Conversations, message: int) -> None:
    """What was wrong, or the note, changed: kept with the thumbs down."""
    wrong = [Wrong(w) for w in st.session_state.get(f"wrong-{message}") or ()]
    try:
        store.rate(message, Rating.DOWN, wrong, st.session_state.get(f"note-{message}") or "")
    except CragError as exc:
        st.session_state[f"{RATING_ERROR}-{message}"] = str(exc)


def what_was_wrong(store: Conversations, message: int, rated: Label) -> None:
    """Under a thumbs down: what was wrong and a note, each kept as it changes; under either, what was kept."""
    if rated.rating is Rating.DOWN:
        st.pills(
            "What was wrong?",
            list(Wrong),
            format_func=lambda w: WRONG_WORDS[w].capitalize(),
            selection_mode="multi",
            default=list(rated.wrong),
            key=f"wrong-{message}",
            on_change=explain,
            args=(store, message),
            help="The badge: the verdict (Correct, Ambiguous, Incorrect) was wrong. The answer: what it says is wrong. "
            "The sources: the passages it cites are not the right ones. A source missing: a page that answers "
            "was not among them.",
        )
        st.text_input(
            "A note (optional)",
            value=rated.note,
            key=f"note-{message}",
            max_chars=NOTE_CHARS,
            on_change=explain,
            args=(store, message),
            placeholder="Where the answer is, or what it should have said",
        )
    st.caption(
        f"Kept: {md_escape(rating_words(rated))}. Your ratings are this knowledge base's test set: see **Evaluate**."
    )


def suggestions(answer: Answer, key: int) -> None:
    """Under an answer not found for sure, the sections whose titles are closest to the question: the documents' own
    words, each asked with at a click."""
    st.caption(":material/manage_search: Your documents may word it otherwise. The sections closest to your question:")
    for i, s in enumerate(answer.suggestions):
        where, ask = st.columns([5, 2], vertical_alignment="center")
        where.markdown(f"**{md_escape(s.title)}** · {md_escape(s.file)}, p. {s.page}")
        ask.button(
            "Ask with these words",
            key=f"suggest-{key}-{i}",
            icon=":material/search:",
            type="tertiary",
            on_click=state.ask_alone,
            args=(s.title,),
            help=f"Ask “{md_escape(s.title)}”, the section’s own words, as a question of its own.",
        )


def badge_line(answer: Answer, question: str, previous: str = "") -> None:
    """One line under the answer: what CRAG judged of the passages the documents gave (the action), what a written
    answer states that its sources do not, and who made the answer, how fast. ``previous``: the question before it,
    which the line names when the answer was read as its follow-up."""
    trace = answer.trace
    with st.container(horizontal=True, vertical_alignment="center", gap="small"):
        if trace is not None and trace.action is not None:
            style = ACTIONS[trace.action]
            st.badge(style.badge, icon=style.icon, color=style.color, help=style.help)
        if trace is not None and trace.unsupported:  # a badge's width cuts long text: this wraps
            st.markdown(
                f":orange-background[:material/report: {md_escape(unsupported_message(question, trace.unsupported))}]",
                help="Names, commands or numbers the answer states that none of the passages given to the model "
                "mention: the model may have made them up.",
            )
        st.caption(caption(answer, previous))


FOLLOWED_SHOWN = 80  # characters of the question before, named on the line of an answer read as its follow-up


def caption(answer: Answer, previous: str = "") -> str:
    if answer.kind in NOT_WRITTEN:
        parts = [NOT_WRITTEN[answer.kind]]
    else:
        parts = [f"written by {md_escape(answer.backend)} · {md_escape(answer.model)}"]
        if answer.backend == "embedded" and answer.model == PACKAGED_LABEL:  # said on the answer, not only aside
            parts.append("a weak model that may invent facts: check the sources")
    if answer.trace is not None and answer.trace.scope:  # where it was asked: a chat's scope may change since
        parts.append(":material/folder: in " + ", ".join(md_escape(p) for p in answer.trace.scope))
    if follows_up(answer):  # the question was read with the one before it: said, for the reader to judge
        before = f"“{md_escape(shorten(previous, FOLLOWED_SHOWN))}”" if previous else "the question before"
        parts.insert(0, f"Read as a follow-up of {before}")
    if answer.trace is not None:
        total = answer.trace.timings.get("total")
        if total is not None:
            parts.append(f"{total:.1f} s")
        calls = answer.trace.llm_calls
        parts.append(f"{calls} LLM call{'s' if calls != 1 else ''}")
    return " · ".join(parts)


# ---------------------------------------------------------------------------------------------
# How this answer was made


def how_it_was_made(trace: Trace, thresholds: tuple[float, float], key: int, labels: dict[str, str]) -> None:
    lower, upper = thresholds
    kept = sum(1 for s in trace.strips if s.kept)
    with st.expander("How this answer was made", icon=":material/account_tree:"):
        if trace.action is not None:
            scores = [r.score for r in trace.retrieved]
            again = [r.anchor for r in trace.retrieved if r.anchor]
            reason = action_reason(trace.action, scores, upper, lower, trace.terms, again)
            st.markdown(f"**Action: {ACTIONS[trace.action].label}.** {reason} {ACTIONS[trace.action].effect}")
        if line := thresholds_line(trace):
            st.caption(line)
        if trace.standalone_question and trace.standalone_question != trace.question:
            st.caption("The follow-up was asked as:")
            st.text(trace.standalone_question)
        model_words(trace)
        if trace.terms.terms:
            st.caption(key_terms(trace))
        tabs = st.tabs(
            [
                f"Retrieved ({len(trace.retrieved)})",
                f"Refined context ({kept} kept)",
                f"Web ({len(trace.web_results)})" if trace.web_query or trace.web_error else "Web",
                "Timings",
            ],
            key=f"trace-tabs-{key}",
        )
        with tabs[0]:
            retrieved(trace, lower, upper, key, labels)
        with tabs[1]:
            refined(trace, key)
        with tabs[2]:
            web(trace, key)
        with tabs[3]:
            timings(trace, key)
        for note in trace.notes:
            st.caption(f"Note: {md_escape(note)}")


def model_words(trace: Trace) -> None:
    """What the model wrote to search by, ask by ask: a short answer as the documents would word it, and keywords."""
    for expansion in trace.expansions:
        ask = f" for “{md_escape(expansion.ask)}”" if len(trace.expansions) > 1 else ""
        if expansion.error:
            st.caption(
                f"The model gave no words to search by{ask} ({md_escape(expansion.error)}): the question's own "
                "words were searched."
            )
            continue
        if not expansion.queries:
            continue
        st.caption(f"Searched beside the question{ask}, in the model's words (what the answer would say):")
        st.text("\n".join(q for q in (expansion.answer, ", ".join(expansion.keywords)) if q))


def found_by(r: ScoredChunk) -> str:
    if r.anchor:
        return f"searching for “{r.anchor}”"
    return "the model's words" if r.from_model else "the question"


def verdict(r: ScoredChunk) -> str:
    """The LLM grader's verdict on a passage, with the sentence it quoted as answering."""
    if r.verdict is None:
        return ""
    said = {"answers": "answers", "partly": "partly answers", "no": "does not answer"}[r.verdict.value]
    return f"{said}: “{r.answering}”" if r.answering else said


THRESHOLDS_FROM = {
    ThresholdsFrom.SETTINGS: "the app's (CRAG_LOWER_THRESHOLD, CRAG_UPPER_THRESHOLD)",
    ThresholdsFrom.CHOSEN: "chosen in Answer settings",
    ThresholdsFrom.FITTED: "fitted to your ratings of this knowledge base's answers (Evaluate page)",
}


def thresholds_line(trace: Trace) -> str:
    """Which thresholds decided the action, and whose they were; "" for an answer stored before that was kept."""
    if trace.action is None or trace.thresholds_from is None:
        return ""
    lower, upper = trace.thresholds
    return f"Thresholds: lower {lower:.2f}, upper {upper:.2f}: {THRESHOLDS_FROM[trace.thresholds_from]}."


def key_terms(trace: Trace) -> str:
    """The question's specific terms, and which the passages or the whole knowledge base never mention."""
    terms = trace.terms
    marks = []
    for term in terms.terms:
        if term in terms.unknown:
            marks.append(f"“{md_escape(term)}” (never mentioned in your documents)")
        elif term in terms.missing and any(r.anchor == term for r in trace.retrieved):
            marks.append(f"“{md_escape(term)}” (not in the passages found for the question; searched for again)")
        elif term in terms.missing:
            marks.append(f"“{md_escape(term)}” (not in the retrieved passages)")
        elif trace.retrieved:
            marks.append(f"“{md_escape(term)}” ✓")
        else:  # nothing was retrieved: no passage to have checked it against
            marks.append(f"“{md_escape(term)}”")
    return "Specific terms of the question: " + ", ".join(marks)


def zone(score: float, lower: float, upper: float) -> str:
    return "Correct" if score >= upper else "Ambiguous" if score >= lower else "Incorrect"


def score_chart(trace: Trace, lower: float, upper: float) -> alt.LayerChart | alt.FacetChart:
    data = pd.DataFrame(
        {
            "passage": [f"P{i}" for i in range(1, len(trace.retrieved) + 1)],
            "score": [round(r.score, 3) for r in trace.retrieved],
            "file": [f"{r.chunk.file} · {pages_label(r.chunk.pages)}" for r in trace.retrieved],
            "zone": [zone(r.score, lower, upper) for r in trace.retrieved],
        }
    )
    bars = (
        alt.Chart(data)
        .mark_bar(size=18)
        .encode(
            x=alt.X("passage:N", sort=None, title=None, axis=alt.Axis(labelAngle=0)),
            y=alt.Y("score:Q", scale=alt.Scale(domain=[-1, 1]), title="evaluator score"),
            color=alt.Color(
                "zone:N",
                scale=alt.Scale(domain=list(ZONE_COLORS), range=list(ZONE_COLORS.values())),
                legend=alt.Legend(orient="bottom", title=None),
            ),
            tooltip=["passage", "score", "file"],
        )
    )
    lines = pd.DataFrame({"threshold": [f"upper {upper:.2f}", f"lower {lower:.2f}"], "value": [upper, lower]})
    rules = alt.Chart(lines).mark_rule(strokeDash=[5, 4], color="#555").encode(y="value:Q")
    labels = (
        alt.Chart(lines)
        .mark_text(align="left", dx=4, dy=-6, color="#555", fontSize=11)
        .encode(y="value:Q", x=alt.value(0), text="threshold:N")
    )
    return alt.layer(bars, rules, labels).properties(height=190)


def source_labels(answer: Answer) -> dict[str, str]:
    """What each retrieved passage became in the answer, by chunk id: "[2]", or "[3] (not cited)". Passages are
    named P1, P2… in retrieval order, so their rank is never read as a citation number."""
    cited = {s.n for s in answer.cited_sources}
    return {
        chunk: f"[{s.n}]" if s.n in cited else f"[{s.n}] (not cited)" for s in answer.sources for chunk in s.chunk_ids
    }


def retrieved(trace: Trace, lower: float, upper: float, key: int, labels: dict[str, str]) -> None:
    if not trace.retrieved:
        st.info("Nothing was retrieved: the knowledge base is empty, or nothing in it matches the question.")
        return
    st.caption(
        f"Each passage was scored by the retrieval evaluator in [-1, 1]. At or above the upper threshold "
        f"({upper:.2f}) makes the action Correct; all below the lower threshold ({lower:.2f}) makes it Incorrect."
    )
    st.altair_chart(score_chart(trace, lower, upper), width="stretch", key=f"scores-{key}")
    rows = [
        {
            "passage": i,
            "score": round(r.score, 3),
            "source in the answer": labels.get(r.chunk.id, ""),
            "file": r.chunk.file,
            "pages": ", ".join(map(str, r.chunk.pages)),
            "found by": found_by(r),
            "section": r.chunk.section,
            "text": shorten(r.chunk.text, 400),
            "graded by": r.graded_by,
            "the model's verdict": verdict(r),
        }
        for i, r in enumerate(trace.retrieved, start=1)
    ]
    st.dataframe(
        pd.DataFrame(rows),
        hide_index=True,
        key=f"retrieved-{key}",
        column_config={
            "passage": st.column_config.NumberColumn(format="P%d", width="small"),  # sorts as numbers
            "score": st.column_config.NumberColumn(format="%.2f", width="small"),
            "text": st.column_config.TextColumn(width="large"),
        },
    )


def refined(trace: Trace, key: int) -> None:
    kept = [s for s in trace.strips if s.kept]
    dropped = len(trace.strips) - len(kept)
    st.caption(
        f"Refinement split the knowledge into strips and scored each: {len(kept)} kept, {dropped} dropped. "
        "The kept strips, in document order, are what the answer was generated from."
    )
    if trace.refined_context:
        st.code(trace.refined_context, language=None, wrap_lines=True)
    else:
        st.info("No knowledge survived refinement, so the answer could not use any.")
    if not trace.strips:
        return
    rows = [
        {
            "kept": s.kept,
            "score": round(s.score, 3),
            "from": f"{s.file} · {pages_label(s.pages)}" if s.kind == "local" else (s.title or s.url),
            "kind": "document" if s.kind == "local" else "web",
            "strip": shorten(s.text, 400),
            "why dropped": s.reason,
        }
        for s in sorted(trace.strips, key=lambda s: (not s.kept, -s.score))
    ]
    st.dataframe(
        pd.DataFrame(rows),
        hide_index=True,
        key=f"strips-{key}",
        column_config={
            "kept": st.column_config.CheckboxColumn(width="small"),
            "score": st.column_config.NumberColumn(format="%.2f", width="small"),
            "strip": st.column_config.TextColumn(width="large"),
        },
    )


def web(trace: Trace, key: int) -> None:
    if trace.web_query:
        st.caption("Web query")
        st.code(trace.web_query, language=None)
    if trace.web_error == OFF_REASON:
        st.info("Web search is off for this question (Answer settings, or CRAG_WEB_SEARCH).")
    elif trace.web_error:
        st.warning(f"Web search was not available: {md_escape(trace.web_error)}.")
    if trace.web_results:
        rows = [
            {"title": r.title, "url": r.url, "snippet": shorten(r.snippet, 300), "page text read": bool(r.text)}
            for r in trace.web_results
        ]
        st.dataframe(pd.DataFrame(rows), hide_index=True, key=f"web-{key}")
    elif trace.web_query and not trace.web_error:
        st.info("The web search found nothing.")
    if not trace.web_query and not trace.web_error:
        st.caption("The web was not searched: the action was Correct, so your documents were enough.")


def timings(trace: Trace, key: int) -> None:
    with st.container(horizontal=True):
        st.metric("LLM calls", trace.llm_calls)
        st.metric("Before the answer", trace.llm_calls_before_answer)
        st.metric("Tokens in / out", f"{trace.input_tokens} / {trace.output_tokens}")
    if trace.timings:
        rows = [{"stage": stage.replace("_", " "), "seconds": round(sec, 3)} for stage, sec in trace.timings.items()]
        st.dataframe(
            pd.DataFrame(rows),
            hide_index=True,
            key=f"timings-{key}",
            column_config={"seconds": st.column_config.NumberColumn(format="%.2f s")},
        )
