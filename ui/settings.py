"""The answer settings: their widgets in the sidebar, the options they give each question, kept in the page's URL.

A reload keeps what the user chose. Each setting that differs from the app's default (its ``CRAG_`` setting) is
written into the URL's query when it changes (``?answer=generated&top_k=3``) and read back when a session starts.
The URL rather than the conversation: the settings belong to the browser tab and hold for every chat in it (a New
chat keeps them), a link or a bookmark carries them, and a URL that names a setting shows that it is not the default.
A value the URL cannot hold (edited by hand, or from another version) is dropped, and the default applies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import streamlit as st

from crag.config import Settings

ANSWER_MODES = {
    "auto": "auto: quote the documents on the built-in model, a written answer on Ollama/OpenAI",
    "evidence": "quote the documents (no model writes the answer)",
    "generated": "a model writes the answer (the built-in 135M model is weak and may invent facts)",
}
EVALUATORS = {
    "auto": "auto: an LLM grader on Ollama/OpenAI, similarity on the embedded model",
    "llm": "LLM grader (schema-constrained)",
    "similarity": "similarity (embeddings and word overlap, no LLM call)",
}


@dataclass(frozen=True, kw_only=True)
class Setting:
    """One answer setting: its widget's key, its name in the URL, its default, and how the URL writes it."""

    key: str
    param: str
    default: Callable[[Settings], Any]
    read: Callable[[str, Settings], Any]  # the URL's text as a value; ValueError when it is not one
    write: Callable[[Any], str]


def _top_k(text: str, base: Settings) -> int:
    value = int(text)
    if not 1 <= value <= top_k_max(base):
        raise ValueError(text)
    return value


def _thresholds(text: str, base: Settings) -> tuple[float, float]:
    lower, upper = sorted(float(v) for v in text.split(","))  # two values, or ValueError
    if not -1.0 <= lower <= upper <= 1.0:
        raise ValueError(text)
    return lower, upper


def _choice(choices: dict[str, str]) -> Callable[[str, Settings], str]:
    def read(text: str, base: Settings) -> str:
        if text not in choices:
            raise ValueError(text)
        return text

    return read


def _on_off(text: str, base: Settings) -> bool:
    if text not in ("on", "off"):
        raise ValueError(text)
    return text == "on"


TOP_K = Setting(key="set_top_k", param="top_k", default=lambda b: b.top_k, read=_top_k, write=str)
THRESHOLDS = Setting(
    key="set_thresholds",
    param="thresholds",
    default=lambda b: (b.lower_threshold, b.upper_threshold),
    read=_thresholds,
    write=lambda v: f"{v[0]:g},{v[1]:g}",
)
WEB_LABEL = "Search the web when the documents fall short"
WEB = Setting(
    key="set_web", param="web", default=lambda b: b.web_search, read=_on_off, write=lambda v: "on" if v else "off"
)
ANSWER_MODE = Setting(
    key="set_answer", param="answer", default=lambda b: b.answer_mode, read=_choice(ANSWER_MODES), write=str
)
EVALUATOR = Setting(
    key="set_evaluator", param="evaluator", default=lambda b: b.evaluator, read=_choice(EVALUATORS), write=str
)
SETTINGS = (TOP_K, THRESHOLDS, WEB, ANSWER_MODE, EVALUATOR)


def top_k_max(base: Settings) -> int:
    return max(20, base.top_k)


def _from_url(setting: Setting, base: Settings) -> Any:
    """The setting's value in the URL, or its default when the URL has none it can use (and then drops it)."""
    text = st.query_params.get(setting.param)
    if text is None:
        return setting.default(base)
    try:
        return setting.read(text, base)
    except ValueError:
        del st.query_params[setting.param]
        return setting.default(base)


def remember(setting: Setting, base: Settings) -> None:
    """Keep the setting's new value in the URL, or take it out when it is the default again."""
    value = st.session_state[setting.key]
    if value == setting.default(base):
        if setting.param in st.query_params:
            del st.query_params[setting.param]
    else:
        st.query_params[setting.param] = setting.write(value)


def options(base: Settings) -> dict[str, Any]:
    """This session's answer settings, as ``Pipeline.stream`` options: changing one reloads nothing."""
    ss = st.session_state
    for setting in SETTINGS:
        if setting.key not in ss:  # a session's first run: what the URL says, else the default
            ss[setting.key] = _from_url(setting, base)
    if not base.web_search:  # off for the app (CRAG_WEB_SEARCH): no session can turn it on, and none shows it on
        ss[WEB.key] = False
    lower, upper = sorted(float(v) for v in ss[THRESHOLDS.key])  # a range slider keeps them ordered; be sure
    return {
        "top_k": int(ss[TOP_K.key]),
        "lower_threshold": lower,
        "upper_threshold": upper,
        "web": bool(ss[WEB.key]),
        "evaluator": ss[EVALUATOR.key],
        "answer_mode": ss[ANSWER_MODE.key],
    }


def render(base: Settings) -> None:
    """The sidebar's Answer settings."""

    def kept(setting: Setting) -> dict[str, Any]:
        return {"key": setting.key, "on_change": remember, "args": (setting, base)}

    with st.expander("Answer settings", icon=":material/tune:"):
        st.slider("Passages retrieved (top-k)", 1, top_k_max(base), **kept(TOP_K))
        st.slider(
            "Thresholds (lower, upper)",
            -1.0,
            1.0,
            step=0.05,
            help="A passage scoring at or above the upper threshold makes the action Correct; "
            "when all score below the lower one it is Incorrect; otherwise Ambiguous.",
            **kept(THRESHOLDS),
        )
        st.toggle(
            WEB_LABEL,
            disabled=not base.web_search,
            help="Needs an internet connection: turn it off when you work offline."
            if base.web_search
            else "Off for this app (CRAG_WEB_SEARCH=off): set CRAG_WEB_SEARCH=on and restart the app to allow it.",
            **kept(WEB),
        )
        st.selectbox("Answers", list(ANSWER_MODES), format_func=ANSWER_MODES.__getitem__, **kept(ANSWER_MODE))
        st.selectbox("Retrieval evaluator", list(EVALUATORS), format_func=EVALUATORS.__getitem__, **kept(EVALUATOR))
        st.caption(
            "Changes apply to the next question and stay in the page's address, so a reload keeps them. "
            "Defaults come from the CRAG_* settings."
        )
