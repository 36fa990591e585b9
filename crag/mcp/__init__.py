"""The knowledge base over the Model Context Protocol (official ``mcp`` SDK): ``python -m crag mcp`` (stdio), and
``/mcp`` (Streamable HTTP) on ``python -m crag serve``.

- ``server``: the SDK's ``MCPServer`` with the tools ``search`` (graded evidence, no model call), ``ask`` (the CRAG
  answer with its cited sources and warnings) and ``list_documents``, and each indexed document's pages as
  resources at ``crag://files/<file>?page=N``; the stdio and HTTP transports. The SDK is imported there only.
- ``knowledge``: what the tools ask of the core, one ``Pipeline.ask`` per answer as in the CLI and the API; the
  scope of a call reaches the core in one place.
- ``outputs``: each tool's output model (``ask``'s is the answer contract, ``crag.contract``) and readable text.
"""

from crag.mcp.knowledge import ToolBackend
from crag.mcp.server import create_server, http_app, serve_stdio

__all__ = ["ToolBackend", "create_server", "http_app", "serve_stdio"]
