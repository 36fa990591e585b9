"""The Evaluate page: the rated answers of a knowledge base as its test set.

Per knowledge base (the scope the answers were asked in): how often each verdict was right by the ratings, the answers
rated up whose passages are no longer retrieved, **Re-run my questions** (each rated question asked again against
today's index and settings, with what changed since it was rated), and the thresholds fitted to the ratings, applied
or reverted on a click. The ratings export and import as a file.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from crag.calibration import Applied, Fit, Thresholds, Verdict, answering, fit, overrides
from crag.config import Settings
from crag.conversations import Conversations, HistoryUnavailable
from crag.errors import CragError
from crag.feedback import THUMBS, WRONG_WORDS, Change, Label, Rating, Rerun, lost, rerun, verdicts
from crag.types import Action, ThresholdsFrom
from ui import state
from ui.answer import THRESHOLDS_FROM, ZONE_COLORS
from ui.scope import ALL
from ui.text import ACTIONS, md_escape, shorten

Link = Callable[[str, str, str], None]
ACTION_NAMES = {a: ACTIONS[a].label for a in Action}
RERUNS = "reruns"  # session state: the last re-run of each scope
LOST = "lost"  # session state: the answers whose passages were looked for, by scope and index


def main(link: Link) -> None:
    link("chat", "Back to the chat", ":material/arrow_back:")
    st.title(":material/fact_check: Evaluate your answers", anchor=False)
    st.caption(
        "The answers you rated (👍 👎 under each answer) are this knowledge base's own test set: how often each "
        "verdict was right, whether what you rated up is still found, what changed since, and thresholds fitted "
        "to your documents."
    )
    try:
        settings = state.load_base_settings()
        store = state.conversations(settings)
        scopes = store.rated_scopes()
    except (CragError, HistoryUnavailable) as exc:
        st.error(md_escape(str(exc)))
        return
    if not scopes:
        st.info(
            "No answer is rated yet. Rate answers with the thumbs under them in the chat (or POST /feedback through "
            "the API); they show here, per knowledge base.",
            icon=":material/thumbs_up_down:",
        )
        ratings_file(store, None)
        return
    counts = dict(scopes)
    scope = st.selectbox(
        "Knowledge base",
        list(counts),
        format_func=lambda s: f"{scope_name(s)} · {counts[s]} rated",
        key="evaluate-scope",
        help="The folders (or files) the rated answers were asked in: each is evaluated, and fitted, on its own.",
    )
    page(store, settings, scope)


def scope_name(scope: Sequence[str]) -> str:
    return ", ".join(scope) if scope else ALL


def page(store: Conversations, settings: Settings, scope: tuple[str, ...]) -> None:
    labels = store.labels(scope)
    base = Thresholds(settings.lower_threshold, settings.upper_threshold)
    applied = store.applied(scope)
    thresholds, source = answering(base, applied)
    how_often(labels)
    st.subheader("Since you rated them", anchor=False)
    loading = state.models(settings)
    loading.start()
    with st.spinner("Loading the models…"):
        loading.wait(300)
    if loading.pipeline is None:
        st.error(md_escape(loading.error or "The models could not be loaded."))
    else:
        still_found(loading.pipeline, settings, scope, labels)
        rerun_section(loading.pipeline, scope, labels, overrides(thresholds, source))
    fitted(store, scope, labels, applied, (thresholds, source))
    ratings_file(store, scope)


# ---------------------------------------------------------------------------------------------
# How often each verdict was right


def how_often(labels: Sequence[Label]) -> None:
    up = sum(1 for label in labels if label.rating is Rating.UP)
    judged = [label for label in labels if label.answered.action is not None]
    right = sum(1 for label in judged if label.right(label.answered.action))
    with st.container(horizontal=True):
        st.metric("Rated answers", len(labels), help="Rated up and down, in this knowledge base.")
        st.metric("👍 / 👎", f"{up} / {len(labels) - up}")
        st.metric(
            "Verdicts right",
            f"{right / len(judged):.0%}" if judged else "–",
            help="Of the rated answers with a badge, those whose badge was right by their rating (see the help of "
            "the table).",
        )
    rows = [
        {
            "verdict": ACTION_NAMES[v.action],
            "shown": v.total,
            "right": v.right,
            "share right": v.right / v.total if v.total else None,
            "👍": v.up,
            "👎": v.down,
        }
        for v in verdicts(labels)
    ]
    left, right_side = st.columns([3, 2])
    with left:
        st.dataframe(
            pd.DataFrame(rows),
            hide_index=True,
            column_config={"share right": st.column_config.ProgressColumn(format="percent", min_value=0, max_value=1)},
            key="verdict-table",
        )
        st.caption(
            "A badge is right when the rating agrees with it: 👍 on Correct, 👍 on Incorrect (rightly said the "
            "documents do not answer), 👎 on Ambiguous or Incorrect when the answer or the sources were wrong. 👍 on "
            "Ambiguous means it was too cautious; 👎 on Correct means it was not."
        )
    with right_side:
        st.altair_chart(by_rating(labels), width="stretch", key="by-rating")
    rated_table(labels)


def by_rating(labels: Sequence[Label]) -> alt.Chart:
    """Verdicts by rating: per badge shown, the answers rated up and down."""
    rows = [
        {"verdict": ACTION_NAMES[label.answered.action], "rating": THUMBS[label.rating]}
        for label in labels
        if label.answered.action is not None
    ]
    data = pd.DataFrame(rows, columns=["verdict", "rating"])
    return (
        alt.Chart(data, title="Verdicts by rating")
        .mark_bar()
        .encode(
            x=alt.X("verdict:N", sort=list(ACTION_NAMES.values()), title=None, axis=alt.Axis(labelAngle=0)),
            y=alt.Y("count():Q", title="rated answers"),
            color=alt.Color(
                "rating:N",
                scale=alt.Scale(domain=list(THUMBS.values()), range=["#21a366", "#e0443e"]),
                legend=alt.Legend(orient="right", title=None),
            ),
        )
        .properties(height=240)
    )


def rated_table(labels: Sequence[Label]) -> None:
    with st.expander(f"The rated answers ({len(labels)})", icon=":material/list:"):
        rows = [
            {
                "question": label.answered.question,
                "verdict": ACTION_NAMES[label.answered.action] if label.answered.action else "",
                "rating": THUMBS[label.rating],
                "what was wrong": ", ".join(WRONG_WORDS[w] for w in label.wrong),
                "note": label.note,
                "badge right": label.right(label.answered.action) if label.answered.action else None,
                "rated": time.strftime("%Y-%m-%d %H:%M", time.localtime(label.updated)),
            }
            for label in labels
        ]
        st.dataframe(pd.DataFrame(rows), hide_index=True, key="rated-table")


# ---------------------------------------------------------------------------------------------
# Since they were rated: passages lost, questions asked again


def still_found(pipeline: Any, settings: Settings, scope: tuple[str, ...], labels: Sequence[Label]) -> None:
    """The answers rated up whose cited passages today's index no longer retrieves for their question."""
    from crag.feedback import generation_of

    key = (scope, generation_of(settings), tuple((label.answer_id, label.updated) for label in labels))
    cached = st.session_state.setdefault(LOST, {})
    if key not in cached:
        with st.spinner("Looking for the passages of the answers you rated up…"):
            cached[key] = lost(pipeline.retriever, labels, settings.top_k, settings.retrieval_mode)
    gone = cached[key]
    checked = sum(1 for label in labels if label.rating is Rating.UP and label.answered.cited)
    if not checked:
        st.caption("No answer rated up here cites a passage of your documents: nothing to look for.")
        return
    if not gone:
        st.success(
            "The passages of the answer you rated up are still retrieved for its question."
            if checked == 1
            else f"The passages of all {checked} answers you rated up are still retrieved for their questions.",
            icon=":material/task_alt:",
        )
        return
    st.warning(
        f"{len(gone)} of the {checked} answers you rated up no longer find the passages they cited (a file was "
        "removed or changed, or the settings retrieve others): **Re-run my questions** shows what they answer now.",
        icon=":material/search_off:",
    )
    st.dataframe(
        pd.DataFrame(
            [{"question": label.answered.question, "cited": pages_text(label.answered.pages)} for label in gone]
        ),
        hide_index=True,
        key="lost-table",
    )


def pages_text(pages: frozenset[tuple[str, int]]) -> str:
    by_file: dict[str, list[int]] = {}
    for file, page in sorted(pages):
        by_file.setdefault(file, []).append(page)
    return "; ".join(f"{file} p. {', '.join(map(str, numbers))}" for file, numbers in by_file.items())


def rerun_section(pipeline: Any, scope: tuple[str, ...], labels: Sequence[Label], options: dict[str, Any]) -> None:
    """**Re-run my questions**: each asked again now; what changed since it was rated."""
    runs = st.session_state.setdefault(RERUNS, {})
    if st.button(
        "Re-run my questions",
        icon=":material/replay:",
        type="primary",
        key="rerun",
        help="Ask every rated question of this knowledge base again, against today's index and settings: after a "
        "rebuild or a change of settings, your own regression check.",
    ):
        progress = st.progress(0.0, text="Asking again…")
        done: list[Rerun] = []
        for i, label in enumerate(labels, start=1):
            done.append(rerun(pipeline, label, **options))
            progress.progress(i / len(labels), text=f"Asked {i} of {len(labels)} again")
        progress.empty()
        runs[scope] = (time.time(), done)
    if scope in runs:
        reruns_table(*runs[scope])


CHANGE_WORDS = {
    Change.ACTION: "the verdict",
    Change.PAGES: "the cited pages",
    Change.SENTENCE: "the answering sentence",
    Change.FAILED: "it could not be asked",
}


def reruns_table(when: float, done: Sequence[Rerun]) -> None:
    same = sum(1 for r in done if r.same)
    st.markdown(
        f"**Asked again at {time.strftime('%H:%M', time.localtime(when))}:** {same} the same, "
        f"{len(done) - same} changed."
    )
    rows = []
    for r in done:
        was, now = r.label.answered, r.now
        rows.append(
            {
                "status": "same" if r.same else "changed",
                "question": was.question,
                "rated": THUMBS[r.label.rating],
                "verdict then": ACTION_NAMES[was.action] if was.action else "",
                "verdict now": ACTION_NAMES[now.action] if now and now.action else "",
                "what changed": ", ".join(CHANGE_WORDS[c] for c in r.changes) or "",
                "pages then": pages_text(was.pages),
                "pages now": pages_text(now.pages) if now else md_escape(r.error),
                "answering sentence now": shorten(now.sentence, 200) if now else "",
            }
        )
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="rerun-table")


# ---------------------------------------------------------------------------------------------
# Thresholds fitted to this knowledge base


def fitted(
    store: Conversations,
    scope: tuple[str, ...],
    labels: Sequence[Label],
    applied: Applied | None,
    answering_now: tuple[Thresholds, ThresholdsFrom],
) -> None:
    st.subheader("Thresholds fitted to your ratings", anchor=False)
    t, source = answering_now
    found = fit(labels, t, scope)
    st.markdown(f"**Answering now:** lower {t.lower:.2f}, upper {t.upper:.2f}: {THRESHOLDS_FROM[source]}.")
    if applied is not None:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(applied.applied))
        st.caption(
            f"Applied {when}, fitted on {applied.labels} rated answers: held out, {applied.held_out:.0%} of their "
            f"verdicts right, against {applied.current:.0%} with lower {applied.before.lower:.2f}, upper "
            f"{applied.before.upper:.2f}."
        )
        st.button(
            "Revert to the thresholds before",
            icon=":material/undo:",
            key="revert",
            on_click=revert,
            args=(store, scope),
        )
    if note := st.session_state.pop(FIT_NOTE, None):
        st.success(note, icon=":material/check:")
    if found.verdict is Verdict.TOO_FEW:
        st.info(
            f"A fit needs {found.needed} more rated answers here ({found.decided} of at least "
            f"{found.needed + found.decided}, thumbs up and down both among them). Answers about whole documents "
            "are not counted: the thresholds do not decide them.",
            icon=":material/hourglass_empty:",
        )
    elif found.verdict is Verdict.ONE_SIDED:
        st.info("Every rated answer here is rated the same way: a fit needs thumbs up and thumbs down to separate.")
    elif found.verdict is Verdict.NO_SUPPORT:
        change = "a further change" if applied is not None else "a change"
        st.info(
            f"**Your ratings do not support {change}.** Thresholds fitted to them got {found.held_out_accuracy:.0%} "
            f"of the verdicts right on answers they were not fitted on; the ones answering now get "
            f"{found.current_accuracy:.0%} right.",
            icon=":material/balance:",
        )
    else:
        proposal(store, scope, found, labels)


FIT_NOTE = "fit_note"  # what the last click on Apply or Revert did


def proposal(store: Conversations, scope: tuple[str, ...], found: Fit, labels: Sequence[Label]) -> None:
    p = found.proposed
    assert p is not None  # Verdict.PROPOSED
    st.markdown(
        f"**Proposed: lower {p.lower:.2f}, upper {p.upper:.2f}.** On answers they were not fitted on (cross-validated"
        f" on your {found.decided} ratings) they get {found.held_out_accuracy:.0%} of the verdicts right; the ones "
        f"answering now get {found.current_accuracy:.0%}. On all your rated answers: {found.proposed_accuracy:.0%} "
        f"against {found.current_accuracy:.0%}; {len(found.moved)} would change verdict:"
    )
    st.altair_chart(grades_chart(labels, found), width="stretch", key="fit-chart")
    rows = [
        {
            "question": m.label.answered.question,
            "rated": THUMBS[m.label.rating],
            "verdict now": ACTION_NAMES[m.before],
            "would be": ACTION_NAMES[m.after],
            "right now": m.right_before,
            "right if applied": m.right_after,
        }
        for m in found.moved
    ]
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="moved-table")
    st.button(
        "Apply to this knowledge base",
        icon=":material/tune:",
        type="primary",
        key="apply",
        on_click=apply,
        args=(store, scope, found),
        help="Its questions are answered with these thresholds from now on (unless you move the thresholds in "
        "Answer settings); each answer's expander says which thresholds answered. Revert takes them back.",
    )


def grades_chart(labels: Sequence[Label], found: Fit) -> alt.LayerChart:
    """Where the rated answers' best grades (what the thresholds cut) fall, by rating, with the thresholds now and
    proposed: the answers rated up should sit at or above the upper one, those rated down below it."""
    from crag.feedback import Replay

    data = pd.DataFrame(
        [
            {"best grade": label.answered.best, "rating": THUMBS[label.rating]}
            for label in labels
            if label.answered.replay is not Replay.FIXED
        ]
    )
    p, t = found.proposed, found.current
    assert p is not None
    lines = pd.DataFrame(
        {
            "value": [t.lower, t.upper, p.lower, p.upper],
            "threshold": [f"now: lower {t.lower:.2f}", f"now: upper {t.upper:.2f}"]
            + [f"proposed: lower {p.lower:.2f}", f"proposed: upper {p.upper:.2f}"],
        }
    )
    bars = (
        alt.Chart(data)
        .mark_bar(opacity=0.85)
        .encode(
            x=alt.X(
                "best grade:Q",
                bin=alt.Bin(extent=[-1, 1], step=0.1),
                scale=alt.Scale(domain=[-1, 1]),
                title="best grade of the answer's passages",
            ),
            y=alt.Y("count():Q", title="rated answers"),
            color=alt.Color(
                "rating:N",
                scale=alt.Scale(domain=list(THUMBS.values()), range=[ZONE_COLORS["Correct"], ZONE_COLORS["Incorrect"]]),
                legend=alt.Legend(orient="right", title=None),
            ),
            tooltip=["rating:N", "count():Q"],
        )
    )
    rules = (
        alt.Chart(lines)
        .mark_rule(strokeWidth=2)
        .encode(
            x="value:Q",
            color=alt.Color(
                "threshold:N",
                scale=alt.Scale(range=["#888888", "#444444", "#1f77b4", "#0b3c8c"]),
                legend=alt.Legend(orient="right", title=None),
            ),
            strokeDash=alt.condition("indexof(datum.threshold, 'now') == 0", alt.value([5, 4]), alt.value([1, 0])),
        )
    )
    return alt.layer(bars, rules).resolve_scale(color="independent").properties(height=240)


def apply(store: Conversations, scope: tuple[str, ...], found: Fit) -> None:
    assert found.proposed is not None
    store.apply_thresholds(
        scope, found.proposed, found.current, found.decided, found.held_out_accuracy, found.current_accuracy
    )
    st.session_state[FIT_NOTE] = (
        f"Applied to {scope_name(scope)}: lower {found.proposed.lower:.2f}, upper {found.proposed.upper:.2f}. Its "
        "next answers say so in their expander."
    )


def revert(store: Conversations, scope: tuple[str, ...]) -> None:
    taken = store.revert_thresholds(scope)
    now = store.applied(scope)
    back = f"lower {now.thresholds.lower:.2f}, upper {now.thresholds.upper:.2f}" if now else "the app's thresholds"
    st.session_state[FIT_NOTE] = f"Reverted{' the fit applied last' if taken else ''}: {back} answer again."


# ---------------------------------------------------------------------------------------------
# The ratings as a file


def ratings_file(store: Conversations, scope: tuple[str, ...] | None) -> None:
    with st.expander("Export or import ratings", icon=":material/import_export:"):
        if scope is not None:
            st.download_button(
                f"Download the ratings of {scope_name(scope)}",
                lambda: json.dumps(store.export_labels(scope), ensure_ascii=False, indent=1),
                file_name=f"ratings-{'-'.join(scope) or 'all-documents'}.json".replace("/", "_"),
                mime="application/json",
                icon=":material/download:",
                key="export-ratings",
                on_click="ignore",
            )
        st.file_uploader(
            "Import ratings (a file downloaded here, in this or another copy of the app)",
            type=["json"],
            key="import-ratings",
            on_change=import_ratings,
            args=(store,),
        )
        if said := st.session_state.pop(IMPORTED, None):
            st.info(said)


IMPORTED = "ratings_imported"  # what the last import did


def import_ratings(store: Conversations) -> None:
    upload = st.session_state.get("import-ratings")
    if upload is None:
        return
    try:
        n = store.import_labels(json.loads(upload.getvalue().decode("utf-8")))
    except (ValueError, UnicodeDecodeError):
        st.session_state[IMPORTED] = "That file is not JSON: nothing was imported. Download the ratings again."
        return
    except CragError as exc:
        st.session_state[IMPORTED] = str(exc)
        return
    st.session_state[IMPORTED] = f"{n} rating{'s' if n != 1 else ''} imported (new, or newer than those kept)."
