"""The HTTP API (``python -m crag serve``): ask, index and health over FastAPI, on the same core.

Routes call what the CLI and the UI call: ``Pipeline.stream`` for answers, ``AnswerOut`` for their
JSON, the build job runner (``crag.jobs``) for builds, ``Store`` for the manifest. Nothing here decides
how a question is answered or a file indexed.

- ``app``: ``create_app``, a small factory that includes one ``APIRouter`` per concern: ``ask`` (/ask),
  ``index`` (/index, /files), ``health`` (/health) and ``openai_compat`` (/v1: the same answers in OpenAI's
  chat-completions format, for any chat client; its models in ``openai_schemas``). ``errors``: the error
  handlers; ``schemas``: requests and responses; ``http``: JSON responses, Server-Sent Events (sse-starlette),
  errors and their status, the bearer token; ``service``: the state behind the routes (the pipeline, built on
  first use; the build jobs; health) and answers, whole or as events.
- The pipeline is synchronous (llama.cpp runs in this process), so routes are plain ``def`` functions
  that FastAPI runs in its thread pool, and a streamed answer is made by a worker thread that feeds an
  asyncio queue the response drains. A client that leaves cancels the stream, and the worker ends the model's.
- Errors are JSON ``{"error": message}`` where the message says what to do; under ``/v1`` they take
  OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``, with the same messages. Unexpected
  failures, and a model's own error when it fails mid-answer, are logged; clients get a message that leaks
  nothing.
"""

from crag.api.app import app_from_environment, create_app

__all__ = ["app_from_environment", "create_app"]
