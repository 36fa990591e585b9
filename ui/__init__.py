"""The Streamlit page. ``app.py`` calls ``ui.page.main``; the work is done by ``crag``.

- ``page``: the page layout and the order things are drawn in.
- ``state``: session state, the settings the sidebar changes, what the process shares (the build job
  runner, the conversation store), cached resources.
- ``conversations``: the sidebar's chats: new, open, rename, delete.
- ``sidebar``: knowledge base status and files, upload, model status and pull, answer settings.
- ``builds``: Rebuild as a background job, its live progress, Cancel, its outcome.
- ``chat``: the open conversation, the question, the live stages and the streamed answer, saved as it goes.
- ``answer``: what sits under an answer: the action badge, how it was made, the sources, the export.
- ``text``: pure helpers (labels, escaping, formatting), testable without Streamlit.
"""
