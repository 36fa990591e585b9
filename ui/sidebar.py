"""The sidebar below the chats: the knowledge base (status, files, upload, rebuild), the model (its loading, its
status, pulls), and the answer settings (``ui.settings``). Each part is a function of its own, drawn in order by
``render``: a new part of the sidebar is a new function there."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from crag.config import Settings
from crag.errors import CragError
from crag.models import NOT_INSTALLED_LABEL, PACKAGED_LABEL, embedded_missing, rebuild_offer
from crag.types import AnswerKind
from ui import archive, builds, files, state, watching
from ui import settings as answer_settings
from ui.text import built_at, error_text, human_bytes, md_escape

if TYPE_CHECKING:
    import crag.pipeline

REFRESH_LOADING = 0.5  # seconds between two looks at the models' loading


def render(
    settings: Settings, loading: state.Loading, kb: state.IndexContents, top: DeltaGenerator
) -> Callable[[], None]:
    """The sidebar below the chats; a running build's progress goes in ``top``, above them. Returns what to call once
    the page is drawn (``builds.rebuild``)."""
    with st.sidebar:
        st.divider()
        watch = knowledge_base(settings, loading.pipeline, kb, top)
        st.divider()
        model(settings, loading)
        st.divider()
        answer_settings.render(settings)
    return watch


# ---------------------------------------------------------------------------------------------
# Knowledge base


def knowledge_base(
    settings: Settings, pipeline: crag.pipeline.Pipeline | None, kb: state.IndexContents, top: DeltaGenerator
) -> Callable[[], None]:
    st.subheader("Knowledge base", anchor=False)
    if kb.error:
        st.error(kb.error)
    gen = kb.generation
    if gen is not None:
        with st.container(horizontal=True):
            st.metric("Files", f"{gen.files:,}")
            st.metric("Passages", f"{gen.chunks:,}")
        parsers = ", ".join(kb.parsers) or settings.parser
        st.caption(
            f"Built {built_at(gen.built_at)} · parser {md_escape(parsers)} · embeddings {md_escape(gen.embedder)}"
        )
    else:
        st.caption(f"Not built yet. Parser: {settings.parser}.")
    missing = pipeline.retriever.missing if pipeline is not None else None
    if missing and gen is not None and gen.embedder != missing.embedder:
        missing = None  # rebuilt since with another embedder: the next question finds it (``Retriever.current``)
    if missing:  # the index's embedder is missing: say the way out
        st.warning(error_text(missing), icon=":material/manage_search:")
    if gen is not None:  # a fragment, as the Rebuild button is: its click leaves an answer being written alone
        st.fragment(offer_multilingual)(settings, gen.embedder, said=missing is not None)
    files.files_list(settings, watching.listed(settings, kb.files))
    follow = watching.line(settings)
    # A running build reads the folder already; a watched folder is synced without a click.
    if state.builds(settings).running is None and state.watcher(settings) is None:
        if n := len(kb.pending):
            st.info(f"{n} new file{'s' if n > 1 else ''} in the folder: rebuild to index {'them' if n > 1 else 'it'}.")
        if n := len(kb.missing):
            st.warning(
                f"{n} indexed file{'s are' if n > 1 else ' is'} no longer in the folder: answers may still quote "
                f"{'them' if n > 1 else 'it'} until you rebuild."
            )
    files.upload(settings)
    archive.render(settings, gen is not None)
    watch = builds.rebuild(settings, top)

    def then() -> None:
        watch()
        follow()

    return then


def offer_multilingual(settings: Settings, embedder: str, said: bool = False) -> None:
    """For an index built with the English-only MiniLM: what a full rebuild changes (unless the warning of its missing
    embedder ``said`` it), and a button that starts it."""
    offer = rebuild_offer(embedder)
    if not offer:
        return
    if not said:
        st.info(offer, icon=":material/translate:")
    running = state.builds(settings).running is not None
    if st.button(
        "Full rebuild with multilingual embeddings",
        key="rebuild_multilingual",
        icon=":material/translate:",
        width="stretch",
        disabled=running,
    ):
        builds.start(settings, full=True)


# ---------------------------------------------------------------------------------------------
# Model


def model(settings: Settings, loading: state.Loading) -> None:
    """The model's status once it is loaded; meanwhile, that it loads, redrawn until it is (then the whole page)."""
    st.subheader("Model", anchor=False)
    if loading.done.is_set():
        model_status(settings, loading.pipeline)
    else:
        st.fragment(loading_status, run_every=REFRESH_LOADING)(settings)


def loading_status(settings: Settings) -> None:
    loading = state.models(settings)
    if loading.done.is_set():
        st.rerun()  # the whole page: the model's status, the chat box's state, the index checked
    st.markdown(
        f":blue[:material/hourglass_top:] **Loading the models** · {loading.seconds:.0f} s  \n"
        "The embedder loads and the index opens in the background. Questions asked meanwhile wait for them."
    )


def model_status(settings: Settings, pipeline: crag.pipeline.Pipeline | None) -> None:
    ss = st.session_state
    if pipeline is not None:
        backend = pipeline.backend
        st.markdown(f"**{md_escape(backend.name)}** · `{backend.model}`")
        st.caption(backend.reason)
        if pipeline.answer_kind(ss.get(answer_settings.ANSWER_MODE.key)) is AnswerKind.EVIDENCE:
            st.markdown(":blue[:material/format_quote:] Answers quote your documents: no model writes them.")
        elif backend.name == "embedded" and backend.model == NOT_INSTALLED_LABEL:  # written answers asked for
            st.warning(embedded_missing(settings), icon=":material/download:")
        elif backend.name == "embedded" and backend.model == PACKAGED_LABEL:
            st.warning(
                "The built-in 135M model writes the answers: it is weak and may invent facts. "
                "Check every answer against its sources, or choose quoted answers in Answer settings.",
                icon=":material/warning:",
            )
        else:  # the user's own model, or a server's
            st.markdown(
                ":blue[:material/edit_note:] The model writes the answers: only the sentences its sources back, each "
                "citing them, with the quotes they rest on under them."
            )
    else:
        st.markdown(":red[:material/error:] **No chat model**: see the message on the page.")
    ollama_status(settings, pipeline)
    if st.button(
        "Check again", key="check_models", icon=":material/sync:", help="Ask Ollama again and reload the model."
    ):
        state.forget_health()
        state.forget_pipeline()
        ss.pull_note = None
        st.rerun()
    note = ss.get("pull_note")
    if note:
        getattr(st, note[0])(note[1])


def ollama_status(settings: Settings, pipeline: crag.pipeline.Pipeline | None) -> None:
    """Whether Ollama answers and has the configured models, with a Pull button for each one it lacks."""
    health = state.ollama_health(settings.ollama_url)
    needs_ollama = settings.llm_backend == "ollama" or settings.embed_backend == "ollama"
    may_use_ollama = needs_ollama or settings.llm_backend == "auto" or settings.embed_backend == "auto"
    if health.reachable:
        st.markdown(f":green[:material/check_circle:] Ollama answers at `{health.url}`")
        models = [("chat", settings.chat_model), ("embeddings", settings.embed_model)]
        for role, name in models:
            if health.has(name):
                st.markdown(f":green[:material/check:] `{name}` ({role})")
                continue
            needed = (role == "chat" and settings.llm_backend == "ollama") or (
                role == "embeddings" and settings.embed_backend == "ollama"
            )
            fix = f"`{name}` ({role}) is not in Ollama: pull it here, or run `ollama pull {name}`."
            (st.error if needed else st.warning)(fix if needed else fix + " Until then the built-in model is used.")
            if st.button(f"Pull {name}", key=f"pull-{role}", icon=":material/download:", width="stretch"):
                pull(settings, name, role)
    elif needs_ollama:
        st.error(f"Ollama is not reachable at `{health.url}`: start it with `ollama serve`, or set CRAG_OLLAMA_URL.")
    elif not may_use_ollama:
        st.caption("Ollama is not used with these settings.")
    elif pipeline is None or health.url not in pipeline.backend.reason:
        # When the backend's reason above names the URL, it has said this already, with the fix.
        st.markdown(f":orange[:material/cloud_off:] Ollama is not reachable at `{health.url}`")
    if not health.reachable and may_use_ollama:
        st.caption(
            f"Configured models: `{settings.chat_model}` (chat), `{settings.embed_model}` (embeddings); "
            "whether Ollama has them is checked when it answers."
        )


def pull(settings: Settings, name: str, role: str) -> None:
    import crag.models

    ss = st.session_state
    bar = st.progress(0.0, text=f"Pulling `{name}`…")
    fraction = 0.0
    try:
        for p in crag.models.pull_model(settings.ollama_url, name):
            fraction = p.fraction if p.fraction is not None else fraction
            sizes = f" · {human_bytes(p.completed)} of {human_bytes(p.total)}" if p.total else ""
            bar.progress(fraction, text=f"`{name}`: {md_escape(p.status)}{sizes}")
    except CragError as exc:
        ss.pull_note = ("error", str(exc))
    else:
        then = " Run a full rebuild to index your files with it." if role == "embeddings" else ""
        ss.pull_note = ("success", f"Pulled `{name}`.{then}")
        state.forget_pipeline()  # auto mode may now choose Ollama
    state.forget_health()
    st.rerun()
