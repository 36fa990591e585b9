"""The HTTP API (``python -m crag serve``): ask, index and health over FastAPI, on the same core.

Routes call what the CLI and the UI call: ``Pipeline.stream`` for answers, ``AnswerOut`` for their
JSON, the build job runner (``crag.jobs``) for builds, ``Store`` for the manifest. Nothing here decides
how a question is answered or a file indexed.

- ``schemas``: requests and responses; ``http``: JSON responses, errors and their status, the bearer
  token; ``service``: the pipeline (built on first use), answers as JSON or Server-Sent Events, health;
  ``app``: the routes and error handlers; ``openai_compat`` and ``openai_schemas``: ``/v1``, the same
  answers in OpenAI's chat-completions format, for any chat client.
- The pipeline is synchronous (llama.cpp runs in this process), so routes are plain ``def`` functions
  that FastAPI runs in its thread pool, and a streamed answer is produced by a worker thread that feeds
  a queue the response drains.
- Errors are JSON ``{"error": message}`` where the message says what to do; under ``/v1`` they take
  OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``, with the same messages. Unexpected
  failures are logged and answered with a generic 500 that leaks nothing.
"""

from crag.api.app import app_from_environment, create_app

__all__ = ["app_from_environment", "create_app"]
