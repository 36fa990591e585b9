"""The Streamlit page. ``app.py`` calls ``ui.page.main``; the work is done by ``crag``.

- ``page``: the page layout and the order things are drawn in.
- ``state``: session state, what the process shares (the pipeline, loaded in the background; the build job
  runner; the conversation store), cached resources.
- ``settings``: the answer settings: their widgets, the options they give a question, kept in the page's URL.
- ``conversations``: the sidebar's chats: new, open, rename, export, delete.
- ``sidebar``: the knowledge base's status, the model's loading and status, pulls; the order of the sidebar's parts.
- ``files``: the Files list (live during a build), Remove a file, Add PDFs.
- ``builds``: Rebuild as a background job, its live progress, Cancel, its outcome.
- ``chat``: the open conversation, the question, the live stages and the streamed answer with its Stop button,
  saved as it goes.
- ``answer``: what sits under an answer: the badge line, how it was made, the export.
- ``sources``: the sources panel: file and pages, headings, snippet, the page image with the passage highlighted.
- ``text``: pure helpers (labels, escaping, formatting), testable without Streamlit.
"""
