"""Small helpers shared by tests."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from crag.config import Settings, load_settings
from crag.evidence import evidence_parts
from crag.parts import Lead, Part, plain, quoted, quoted_texts, written
from crag.types import Action, Answer, Source, Strip
from tests.pdfs import manual_pdf

# Two sentences that made one offline answer take minutes (a rule that backtracked over a long run of letters: a
# Chinese clause is one, and so is a long name in a URL).
ISSUE_ZH = (
    "本软件包管理器自2023年起支持在所有主流操作系统上自动安装和更新依赖项以及配置文件，"
    "包括Linux、macOS、Windows、FreeBSD、OpenBSD、Solaris、AIX和HP-UX等平台。"
)
ISSUE_EN = (
    "Since version 2 the installer downloads https://example.org/packages/"
    f"{'abcdefghijklmnopqrstuvwxyz' * 2}abcdefgh/archive.tar.gz and then unpacks it."
)


def free_port() -> int:
    """A loopback port that nothing listens on right now, for a server about to start on it. For a port that must
    stay closed, use ``refused_port`` or ``hold_closed``: another test process may start a server on this one."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_REFUSING: list[socket.socket] = []


def refused_port() -> int:
    """A loopback port that refuses every connection for this process's life: bound but never listening, so no
    other server, another test process's included, can take it (as one can take a port merely closed)."""
    if not _REFUSING:
        _REFUSING.append(_bound(0))
    return _REFUSING[0].getsockname()[1]


@contextmanager
def hold_closed(url: str) -> Iterator[str]:
    """Keep the port of a server just stopped closed: bound, never listening, until the block ends."""
    with _bound(int(url.rsplit(":", 1)[1])):
        yield url


def _bound(port: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the stopped server's connections may be in TIME_WAIT
    s.bind(("127.0.0.1", port))
    return s


@contextmanager
def http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on a free loopback port, in a thread; yield the base URL; stop at the end."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def widget_kb(root: Path) -> Settings:
    """Settings over one manual, widget.pdf, not built: ``root/Files`` and ``root/db``, parsed with PyMuPDF."""
    files = root / "Files"
    files.mkdir()
    manual_pdf(files / "widget.pdf", topic="widget")
    return load_settings(
        files_dir=files, chroma_dir=root / "db", parser="pymupdf", llm_backend="embedded", embed_backend="local"
    )


def offline_kb(root: Path) -> Settings:
    """Settings for a knowledge base in ``root/Files`` and ``root/db`` as a user without a model server has it: the
    embedded backend, the packaged embedder, PyMuPDF, web search off, Ollama on a port nothing listens on."""
    return load_settings(
        files_dir=root / "Files",
        chroma_dir=root / "db",
        parser="pymupdf",
        embed_backend="local",
        llm_backend="embedded",
        web_search=False,
        ollama_url=f"http://127.0.0.1:{refused_port()}",
    )


# ---------------------------------------------------------------------------------------------
# An answer's parts, as tests read them


@dataclass(frozen=True)
class Said:
    """One run of a document's text an answer quotes: a quote's sentences, a code block, or a table's row."""

    quote: str
    n: int
    faq: str = ""
    kind: str = "quote"


def quotes_of(parts: Iterable[Part] | Answer) -> list[Said]:
    """What an answer (or its parts) quotes, in order; a table row by row, its header first."""
    found = parts.parts if isinstance(parts, Answer) else parts
    out: list[Said] = []
    for part in quoted(found):
        for i, text in enumerate(quoted_texts(part)):
            out.append(Said(text, part.n, part.faq if i == 0 else "", part.kind))
    return out


def own_text(answer: Answer) -> str:
    """What the model wrote, as kept, without the quotes under it."""
    return written(answer.parts)


def quotes_text(answer: Answer) -> str:
    """The quotes under a written answer (or an evidence answer's whole text), as the answer's text writes them."""
    first = next((i for i, p in enumerate(answer.parts) if isinstance(p, Lead)), len(answer.parts))
    return plain(answer.parts[first:]).strip()


def evidence_answer(
    chosen: Sequence[Strip], sources: Sequence[Source], language: str, action: Action, scope: Sequence[str] = ()
) -> str:
    """An evidence answer's text: ``crag.parts.plain`` of its parts."""
    return plain(evidence_parts(chosen, sources, language, action, scope))


def streamed_text(parts: Iterable[Part | None]) -> str:
    """What a stream of parts says, as the answer's text writes it (None: the answer goes on, nothing new)."""
    return plain(part for part in parts if part is not None)
