"""The Streamlit page. ``app.py`` calls ``ui.page.main``; the work is done by ``crag``.

- ``page``: the page layout and the order things are drawn in.
- ``state``: session state, the settings the sidebar changes, cached resources.
- ``sidebar``: knowledge base status, upload, rebuild, model status and pull, answer settings.
- ``chat``: history, the question, the live stages and the streamed answer.
- ``answer``: what sits under an answer: the action badge, how it was made, the sources.
- ``text``: pure helpers (labels, escaping, formatting), testable without Streamlit.
"""
