"""Streamlit UI: widgets, session state and rendering. The work is done by ``crag``."""

from __future__ import annotations

import streamlit as st

from crag import pipeline as crag_pipeline
from crag.config import load_settings
from crag.errors import CragError

st.set_page_config(page_title="CRAG knowledge base", page_icon="📚", layout="wide")


@st.cache_resource(show_spinner="Loading the model…")
def get_pipeline() -> crag_pipeline.Pipeline:
    return crag_pipeline.Pipeline.from_settings(load_settings())


def sidebar(pipeline: crag_pipeline.Pipeline | None) -> None:
    with st.sidebar:
        st.header("Model")
        if pipeline is not None:
            backend = pipeline.backend
            st.markdown(f"**{backend.name}** · `{backend.model}`")
            st.caption(backend.reason)
        if st.button("New chat", use_container_width=True):
            st.session_state.messages = []
            st.rerun()


def main() -> None:
    st.title("📚 Knowledge base chat")
    st.session_state.setdefault("messages", [])

    pipeline: crag_pipeline.Pipeline | None = None
    try:
        pipeline = get_pipeline()
    except CragError as exc:
        st.error(str(exc))
    sidebar(pipeline)

    for message in st.session_state.messages:
        with st.chat_message(message["role"]):
            st.text(message["content"]) if message["role"] == "user" else st.markdown(message["content"])

    prompt = st.chat_input("Ask a question about your documents", disabled=pipeline is None)
    if not prompt or pipeline is None:
        return
    st.session_state.messages.append({"role": "user", "content": prompt})
    with st.chat_message("user"):
        st.text(prompt)
    with st.chat_message("assistant"):
        stream = pipeline.stream(prompt)
        try:
            st.write_stream(stream)
            answer = stream.answer
            text = answer.text
            st.caption(f"{answer.backend} · {answer.model} · {answer.timings['generate']:.1f} s")
        except Exception as exc:  # noqa: BLE001 - the page must survive any failure of the model
            text = f"{stream.text}\n\n*(incomplete: {exc})*"
            st.error(f"The answer stopped: {exc}. Check the model server, then ask again.")
        st.session_state.messages.append({"role": "assistant", "content": text})


main()
