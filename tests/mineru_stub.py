"""A loopback stand-in for a MinerU 2.5 server, for driving the real ``MinerUClient`` in tests.

It speaks what the client's http-client backend uses of the OpenAI-compatible API that
``mineru-vllm-server`` / sglang offer: ``GET /v1/models`` (the client asks it for the model name)
and non-streaming ``POST /v1/chat/completions`` with one PNG and one prompt per request.

It answers like a perfect model for the two pages in ``PAGES``. The test PDF fills every box
with its own light colour, so the stub can tell from the pixels which page a layout request
shows and which box a recognition request crops: a wrong crop or prompt gets an HTTP 400.
"""

from __future__ import annotations

import base64
import io
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from PIL import Image

MODEL_ID = "opendatalab/MinerU2.5-2509-1.2B"
PAGE_SIZE = (595.0, 842.0)  # A4 in points

# The client's prompts (mineru_vl_utils.mineru_client.DEFAULT_PROMPTS) and what each asks for.
LAYOUT_PROMPT = "\nLayout Detection:"
PROMPT_KINDS = {
    "\nText Recognition:": "text",
    "\nTable Recognition:": "table",
    "\nFormula Recognition:": "equation",
    "\nImage Analysis:": "image",
}
BLOCK_PROMPT_KIND = {"table": "table", "equation": "equation", "image": "image", "chart": "image"}  # else text


def _tint(k: int) -> tuple[int, int, int]:
    return (255 - 6 * k, 248, 236)


@dataclass(frozen=True)
class StubBlock:
    type: str  # MinerU layout type
    box: tuple[int, int, int, int]  # x0 y0 x1 y1 in thousandths of the page, as the model writes them
    answer: str = ""  # the model's recognition output: text, OTSL for tables, LaTeX for equations
    printed: str = ""  # what the test PDF shows in the box
    color: tuple[int, int, int] | None = None  # the box's fill in the test PDF; None for containers


TABLE_OTSL = "<fcel>Region<fcel>Revenue<nl><fcel>North<fcel>120<nl><fcel>South<fcel>95<nl>"
EQUATION = r"r = \frac{R_{t}}{R_{t-1}} - 1"

PAGES: tuple[tuple[StubBlock, ...], ...] = (
    (
        StubBlock("header", (100, 30, 500, 50), "CRAG test report", "CRAG test report", _tint(1)),
        StubBlock("title", (100, 80, 700, 120), "Quarterly Results", "Quarterly Results", _tint(2)),
        StubBlock(
            "text",
            (100, 140, 900, 260),
            "Revenue grew in every region this quarter. The table lists the totals by region.",
            "Revenue grew in every region this quarter. The table lists the totals by region.",
            _tint(3),
        ),
        StubBlock("table", (100, 290, 700, 420), TABLE_OTSL, "Region   Revenue\nNorth   120\nSouth   95", _tint(4)),
        StubBlock(
            "table_caption",
            (100, 430, 500, 470),
            "Table 1: Revenue by region.",
            "Table 1: Revenue by region.",
            _tint(5),
        ),
        StubBlock("equation", (300, 500, 700, 550), EQUATION, "r = R(t) / R(t-1) - 1", _tint(6)),
        StubBlock("footer", (100, 950, 900, 970), "Confidential draft", "Confidential draft", _tint(7)),
    ),
    (
        StubBlock("header", (100, 30, 500, 50), "CRAG test report", "CRAG test report", _tint(8)),
        StubBlock("paragraph_title", (100, 80, 700, 120), "Method", "Method", _tint(9)),
        StubBlock(
            "text",
            (100, 140, 900, 240),
            "We collected the invoices of every branch and checked each total twice.",
            "We collected the invoices of every branch and checked each total twice.",
            _tint(10),
        ),
        StubBlock("list", (100, 260, 900, 400)),
        StubBlock(
            "list_item", (120, 270, 880, 320), "First, export the invoices.", "First, export the invoices.", _tint(11)
        ),
        StubBlock("list_item", (120, 340, 880, 390), "Second, sum the totals.", "Second, sum the totals.", _tint(12)),
        StubBlock("page_number", (450, 950, 550, 970), "2", "2", _tint(13)),
    ),
)


def layout_answer(blocks: tuple[StubBlock, ...]) -> str:
    """MinerU 2.5's layout output: one box per line, in reading order, coordinates in 0..1000."""
    return "\n".join(
        f"<|box_start|>{b.box[0]:03d} {b.box[1]:03d} {b.box[2]:03d} {b.box[3]:03d}<|box_end|>"
        f"<|ref_start|>{b.type}<|ref_end|><|rotate_up|>"
        for b in blocks
    )


@dataclass(frozen=True)
class StubRequest:
    method: str
    path: str
    kind: str = ""  # "models", "layout", or the recognition kind: "text", "table", "equation", "image"
    page: int | None = None  # 1-based page the image shows
    block: StubBlock | None = None  # the box a recognition crop shows
    images: tuple[tuple[int, int], ...] = ()  # (width, height) of each PNG received
    body: dict = field(default_factory=dict)  # the JSON body, image data replaced by "<png WxH>"
    status: int = 200


class _Reject(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _dominant(image: Image.Image) -> list[tuple[int, tuple[int, int, int]]]:
    colors = image.convert("RGB").getcolors(image.width * image.height) or []
    return sorted(colors, reverse=True)


def _close(a: tuple[int, int, int], b: tuple[int, int, int]) -> bool:
    return max(abs(x - y) for x, y in zip(a, b, strict=True)) <= 2


class MinerUStub:
    """Start with ``with MinerUStub() as stub:``; ``stub.url`` is the server URL for the client."""

    def __init__(self, pages: tuple[tuple[StubBlock, ...], ...] = PAGES) -> None:
        self.pages = pages
        self.fail_pages: set[int] = set()  # layout requests for these pages get HTTP 500
        self.garbled_pages: set[int] = set()  # layout requests for these pages get text that is no layout
        self.delays: dict[int, float] = {}  # page -> seconds to wait before answering its layout request
        self.requests: list[StubRequest] = []
        self._stop = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._server.block_on_close = False  # a request held by `delays` must not hold up stop()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> MinerUStub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()

    def chat_requests(self, kind: str | None = None) -> list[StubRequest]:
        return [r for r in self.requests if r.path == "/v1/chat/completions" and (kind is None or r.kind == kind)]

    # -- recognising what the client sent --------------------------------------------------------------

    def _page_of(self, image: Image.Image) -> int:
        """The page most of whose box colours appear in a (resized) page image."""
        present = [color for count, color in _dominant(image) if count >= 20]
        hits = [sum(any(_close(b.color, c) for c in present) for b in page if b.color) for page in self.pages]
        if max(hits) == 0:
            raise _Reject(400, "stub: the image shows none of the known pages")
        return hits.index(max(hits)) + 1

    def _block_of(self, image: Image.Image) -> tuple[int, StubBlock]:
        """The box a crop shows: its most common colour is the box's fill."""
        color = _dominant(image)[0][1]
        for number, page in enumerate(self.pages, start=1):
            for block in page:
                if block.color and _close(block.color, color):
                    return number, block
        raise _Reject(400, f"stub: the crop (dominant colour {color}) matches no box")

    def _answer(self, body: dict, record: dict) -> str:
        """The model's answer to a chat request; fills ``record`` with what the request was."""
        if body.get("model") != MODEL_ID:
            raise _Reject(404, f"The model `{body.get('model')}` does not exist.")
        user = [m for m in body.get("messages", []) if m.get("role") == "user"]
        parts = user[-1]["content"] if user and isinstance(user[-1].get("content"), list) else []
        urls = [p["image_url"]["url"] for p in parts if p.get("type") == "image_url"]
        texts = [p["text"] for p in parts if p.get("type") == "text"]
        if len(urls) != 1 or len(texts) != 1 or not urls[0].startswith("data:image/png;base64,"):
            raise _Reject(400, "stub: expected one PNG data URL and one text prompt in the user message")
        image = Image.open(io.BytesIO(base64.b64decode(urls[0].split(",", 1)[1])))
        prompt = texts[0]
        record["images"] = (image.size,)

        if prompt == LAYOUT_PROMPT:
            page = self._page_of(image)
            record.update(kind="layout", page=page)
            if self._stop.wait(self.delays.get(page, 0)):
                raise _Reject(503, "stub: shutting down")
            if page in self.fail_pages:
                raise _Reject(500, f"stub: simulated failure on page {page}")
            if page in self.garbled_pages:
                return "I am sorry, this page is unreadable."
            return layout_answer(self.pages[page - 1])

        kind = PROMPT_KINDS.get(prompt)
        if kind is None:
            raise _Reject(400, f"stub: unknown prompt {prompt!r}")
        page, block = self._block_of(image)
        record.update(kind=kind, page=page, block=block)
        if BLOCK_PROMPT_KIND.get(block.type, "text") != kind:
            raise _Reject(400, f"stub: a {block.type} box was sent with the {kind} prompt")
        return block.answer

    # -- HTTP --------------------------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, message: str) -> None:
                # vLLM's error shape
                self._send(status, {"object": "error", "message": message, "type": "BadRequestError", "code": status})

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path != "/v1/models":
                    stub.requests.append(StubRequest("GET", self.path, status=404))
                    self._error(404, "Not Found")
                    return
                stub.requests.append(StubRequest("GET", self.path, kind="models"))
                model = {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "vllm", "max_model_len": 16384}
                self._send(200, {"object": "list", "data": [model]})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if self.path != "/v1/chat/completions":
                    stub.requests.append(StubRequest("POST", self.path, status=404))
                    self._error(404, "Not Found")
                    return
                record: dict = {"method": "POST", "path": self.path, "body": _without_images(body)}
                try:
                    content = stub._answer(body, record)
                except _Reject as exc:
                    stub.requests.append(StubRequest(**record, status=exc.status))
                    self._error(exc.status, str(exc))
                    return
                stub.requests.append(StubRequest(**record))
                self._send(
                    200,
                    {
                        "id": f"chatcmpl-{len(stub.requests)}",
                        "object": "chat.completion",
                        "created": 0,
                        "model": MODEL_ID,
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": content},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    },
                )

        return Handler


def _without_images(body: dict) -> dict:
    """The body with each image data URL replaced by its size, so records stay small."""
    shown = json.loads(json.dumps(body))
    for message in shown.get("messages", []):
        for part in message.get("content") if isinstance(message.get("content"), list) else []:
            if part.get("type") == "image_url":
                image = Image.open(io.BytesIO(base64.b64decode(part["image_url"]["url"].split(",", 1)[1])))
                part["image_url"]["url"] = f"<png {image.width}x{image.height}>"
    return shown
