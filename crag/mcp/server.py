"""The MCP server, on the official SDK (``MCPServer``): the tools, the page resources, and the two transports.

The SDK is imported here only. Tools are plain functions that the SDK runs on worker threads (the pipeline is
synchronous); each returns its output model as structured content and the same as readable text. A ``CragError``
becomes a tool error with its message, the one the app shows; anything else is the SDK's generic tool error, its
traceback in the server's log.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, Resource, TextContent, ToolAnnotations
from pydantic import BaseModel, Field
from starlette.applications import Starlette

import crag
from crag.contract import MAX_TURN, MAX_TURNS, Turn
from crag.errors import CragError, said
from crag.mcp.knowledge import HELD, ToolBackend
from crag.mcp.outputs import (
    REMEDIES,
    AskOut,
    DocumentsOut,
    SearchOut,
    ask_out,
    ask_text,
    documents_out,
    documents_text,
    page_uri,
    search_out,
    search_text,
)
from crag.text import MAX_QUESTION_CHARS

INSTRUCTIONS = (
    "A knowledge base of the user's PDFs, answered with Corrective RAG. `search` returns the graded passages for a "
    "question without calling a model; `ask` returns an answer that cites its sources as [n], with the file and "
    "page of each; `list_documents` lists the documents. Each page's text is a resource, crag://files/<file>?page=N: "
    "read it to check a citation. Quote the sources' [n] when you pass an answer on, and pass its warnings on too."
)

Question = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_TURN,
        description=f"The question, in the documents' language for the best results; at most {MAX_QUESTION_CHARS} "
        "characters once control characters are removed.",
    ),
]
ScopeArgument = Annotated[
    list[str] | None,
    Field(
        description="Folders (knowledge bases) or files to search in, relative to the files folder: a folder holds its "
        "subfolders, and `(top level)` is the PDFs directly in it. Leave it out for every document; "
        "list_documents lists the folders."
    ),
]


@contextmanager
def user_errors() -> Iterator[None]:
    """A ``CragError`` is the user's to act on: a tool error with its message, not a protocol error."""
    try:
        yield
    except CragError as exc:
        raise ToolError(said(str(exc), exc.remedy, REMEDIES)) from None


def result(out: BaseModel, text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=out.model_dump(mode="json"))


class KnowledgeServer(MCPServer):
    """The SDK's server, listing each indexed document as a resource (the SDK lists only fixed ones)."""

    def __init__(self, knowledge: ToolBackend) -> None:
        super().__init__("crag", version=crag.__version__, instructions=INSTRUCTIONS, log_level="WARNING")
        self.knowledge = knowledge

    async def list_resources(self) -> list[Resource]:
        try:
            documents = await anyio.to_thread.run_sync(self.knowledge.documents, None)
        except CragError:  # a damaged index: the tools say so and what to do
            return []
        return [
            Resource(
                uri=page_uri(f.file),
                name=f.file,
                title=f"{f.file}, the text of its {f.pages} pages",
                description=f"Add ?page=N (1 to {f.pages}) for one page.",
                mime_type="text/plain",
            )
            for f in documents.files
            if f.status in HELD
        ]


def create_server(knowledge: ToolBackend) -> MCPServer:
    """The tools ``search``, ``ask`` and ``list_documents``, and each indexed document's pages as resources."""
    server = KnowledgeServer(knowledge)
    reading = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    @server.tool(title="Search the documents", annotations=reading)
    def search(
        question: Question, scope: ScopeArgument = None, k: Annotated[int | None, Field(ge=1, le=50)] = None
    ) -> Annotated[CallToolResult, SearchOut]:
        """The passages of the user's documents that come closest to a question, each graded for relevance, with
        the CRAG action for the set (correct, ambiguous, incorrect) and the question's terms no passage mentions
        (near misses). No model is called. `k`: how many passages (default: the server's CRAG_TOP_K)."""
        with user_errors():
            out = search_out(knowledge.search(question, scope, k), knowledge.printed)
        return result(out, search_text(out))

    @server.tool(title="Ask the documents", annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True))
    def ask(
        question: Question,
        scope: ScopeArgument = None,
        history: Annotated[list[Turn] | None, Field(max_length=MAX_TURNS)] = None,
    ) -> Annotated[CallToolResult, AskOut]:
        """The knowledge base's answer to a question, made with Corrective RAG: quoted from the documents or
        written from them, citing its sources as [n] with file and page (or URL, when the web was searched), and
        the warnings to pass on. `history`: the conversation so far, oldest first, for a follow-up question."""
        turns = tuple((t.role, t.content) for t in history or ())
        with user_errors():
            answer = knowledge.ask(question, scope, turns)
            out = ask_out(answer, knowledge.pipeline().backend, knowledge.printed)
        return result(out, ask_text(out))

    @server.tool(title="List the documents", annotations=reading)
    def list_documents(scope: ScopeArgument = None) -> Annotated[CallToolResult, DocumentsOut]:
        """The documents of the knowledge base, by folder: each file's status (indexed, failed, skipped), pages,
        passages and, for a failure, the reason."""
        with user_errors():
            documents = knowledge.documents(scope)
        generation = documents.generation.id if documents.generation else None
        out = documents_out(generation, documents.files, HELD)
        return result(out, documents_text(out))

    @server.resource("crag://files/{+file}{?page}", name="document", title="A document's text", mime_type="text/plain")
    def document(file: str, page: str | None = None) -> str:
        """The text of an indexed document's page (`?page=N`, from 1, as citations give it), or of every page."""
        try:
            number = int(page) if page is not None else None
        except ValueError:
            raise ResourceNotFoundError(f"page must be a number from 1: “{(page or '')[:20]}” is not.") from None
        try:
            pages = knowledge.page_texts(file, number)
        except CragError as exc:
            raise ResourceNotFoundError(str(exc)) from None
        return "\n\n".join(page_text(file, n, label, text) for n, label, text in pages)

    return server


def page_text(file: str, page: int, label: str, text: str) -> str:
    printed = f" (printed {label})" if label and label != str(page) else ""
    text = text or "[No text layer on this page: it is an image. The index holds what OCR read of it: search finds it.]"
    return f"## {file}, page {page}{printed}\n\n{text}"


def serve_stdio(knowledge: ToolBackend) -> None:
    """Serve over stdin and stdout until the client closes them (``python -m crag mcp``)."""
    create_server(knowledge).run("stdio")


def http_app(server: MCPServer, max_body: int) -> Starlette:
    """Streamable HTTP at /mcp, stateless: each request stands alone, of at most ``max_body`` bytes. The SDK's own
    Host and Origin check is off: the HTTP API it joins checks every route by one rule (its bearer token, or
    ``crag.api.guards.HostCheck`` without one), so a name allowed for a reverse proxy is allowed at /mcp too."""
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return server.streamable_http_app(
        streamable_http_path="/mcp", stateless_http=True, transport_security=security, max_request_body_size=max_body
    )
