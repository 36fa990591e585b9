"""The layout-model parser: MinerU 2.5 through ``mineru_vl_utils.MinerUClient``.

MinerU reads page images in two steps: one layout request per page (boxes, types and reading
order), then one recognition request per box (text, tables as HTML, equations as LaTeX). The
client runs against a MinerU server (http-client backend: an OpenAI-compatible vLLM/sglang
server) or a local model folder (transformers backend). A page MinerU cannot read is parsed
with the fallback parser instead, so one bad page or a stopped server never loses a document.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from loguru import logger  # mineru-vl-utils logs through loguru
from mineru_vl_utils import MinerUClient
from mineru_vl_utils import __version__ as MINERU_VL_VERSION

from crag.errors import ConfigError
from crag.ingest.base import PageProgress, Parser, PDFError
from crag.ingest.pymupdf import PyMuPDFParser, page_sizes, render_page
from crag.types import Block, ParsedPDF

# The client logs each page's raw layout output at DEBUG to stderr; our warnings carry what matters.
# MINERU_VL_DEBUG_ENABLE, the client's own debug switch, brings its logs back.
if not os.getenv("MINERU_VL_DEBUG_ENABLE"):
    logger.disable("mineru_vl_utils")

# MinerU block types (mineru_vl_utils.structs.BlockType) to ours; anything else becomes text.
TYPE_MAP = {
    "text": "text",
    "ref_text": "text",
    "index": "text",
    "phonetic": "text",
    "page_footnote": "footnote",  # content, placed after the paragraph it interrupts, as with the PyMuPDF parser
    "title": "title",
    "doc_title": "title",
    "paragraph_title": "title",
    "table": "table",
    "equation": "equation",
    "equation_block": "equation",
    "formula_number": "equation",
    "code": "code",
    "algorithm": "code",
    "list": "list",
    "list_item": "list",
    "caption": "caption",
    "table_caption": "caption",
    "image_caption": "caption",
    "code_caption": "caption",
    "footnote": "caption",  # notes under a table or figure belong with it, like its caption
    "table_footnote": "caption",
    "image_footnote": "caption",
    "header": "header",
    "aside_text": "header",  # margin stamps (arXiv ids, line numbers): paratext the chunker drops
    "footer": "footer",
    "page_number": "footer",
    "image": "image",
    "chart": "image",
    "image_block": "image",
}
TITLE_LEVELS = {"doc_title": 1, "title": 1, "paragraph_title": 2}
# Containers are never sent for recognition; their members are separate blocks with the text.
CONTAINERS = {"list", "image_block", "equation_block"}
PAGE_DPI = 200  # what MinerU's own pipeline renders at; crops are recognised at this resolution
MAX_FAILURES = 3  # pages in a row MinerU fails on (errors, timeouts) before a build stops asking it


def _inside(inner: Sequence[float], outer: Sequence[float], threshold: float = 0.9) -> bool:
    """Whether most of ``inner`` lies within ``outer`` (MinerU's own containment rule)."""
    width = min(inner[2], outer[2]) - max(inner[0], outer[0])
    height = min(inner[3], outer[3]) - max(inner[1], outer[1])
    area = (inner[2] - inner[0]) * (inner[3] - inner[1])
    return width > 0 and height > 0 and area > 0 and width * height / area >= threshold


def to_blocks(content_blocks: Sequence[Mapping[str, Any]], page: int, size: tuple[float, float]) -> list[Block]:
    """Turn MinerU's ContentBlocks for one page (reading order, bbox in [0, 1]) into our Blocks.

    List items come back from MinerU as text blocks inside an unrecognised ``list`` container,
    so text inside a list becomes a ``list`` block and the empty container is dropped.
    """
    width, height = size
    lists = [b["bbox"] for b in content_blocks if b["type"] == "list"]
    blocks: list[Block] = []
    for raw in content_blocks:
        kind = TYPE_MAP.get(raw["type"], "text")
        text = (raw.get("content") or "").strip()
        if raw["type"] in CONTAINERS and not text:
            continue
        if kind == "text" and any(_inside(raw["bbox"], box) for box in lists):
            kind = "list"
        if not text and kind != "image":  # a figure has no text but is still a block, as in PyMuPDF
            continue
        x0, y0, x1, y1 = raw["bbox"]
        blocks.append(
            Block(
                type=kind,
                text=text,
                page=page,
                bbox=(x0 * width, y0 * height, x1 * width, y1 * height),
                order=len(blocks),
                level=TITLE_LEVELS.get(raw["type"], 1) if kind == "title" else 0,
            )
        )
    return blocks


def _reason(exc: BaseException) -> str:
    """A one-line, bounded reason for a warning (server error bodies can be long)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _ocr_relay(on_page: PageProgress | None, done: int, count: int) -> PageProgress | None:
    """Progress of the fallback on one page: when it reads the page with OCR, it shows as page ``done``."""
    if on_page is None:
        return None

    def relay(_done: int, _count: int, stage: str = "parsing", /) -> None:
        if stage == "ocr":
            on_page(done, count, stage)

    return relay


def _shifted(on_page: PageProgress | None, before: int) -> PageProgress | None:
    """Progress of the fallback on the last pages of a file, as pages of the whole file."""
    if on_page is None:
        return None

    def relay(done: int, count: int, *stage: str) -> None:
        on_page(before + done, before + count, *stage)

    return relay


def _label(parser: Parser) -> str:
    return {"pymupdf": "PyMuPDF", "mineru": "MinerU"}.get(parser.name, parser.name)


def models_url(url: str) -> str:
    """The models URL the http-client backend queries, built by its rules ("" for a non-http URL).

    A trailing ``/vN`` names the API version; otherwise only scheme and host count unless the
    URL ends with ``/`` (a proxy prefix). See ``HttpVlmClient._parse_server_url``.
    """
    normalized = url.strip().rstrip("/")
    versioned = re.fullmatch(r"^(https?://[^/]+(?:/.+?)?)/(v\d+)", normalized)
    if versioned:
        return f"{versioned.group(1)}/{versioned.group(2)}/models"
    host = re.match(r"^(https?://[^/]+)", normalized)
    if not host:
        return ""  # not an http(s) URL
    base = normalized if url.strip().endswith("/") else host.group(1)
    return f"{base}/v1/models"


def mineru_reachable(url: str, timeout: float = 2.0) -> bool:
    """Whether a MinerU server answers at ``url`` with a model list, as the client needs at start."""
    # urllib, not httpx: each third-party library is imported by one module of crag, and httpx's is models/ollama.py.
    api_key = os.getenv("MINERU_VL_API_KEY", "").strip()  # the client sends it, so the probe must too
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    endpoint = models_url(url)
    if not endpoint:
        return False
    try:
        with urllib.request.urlopen(urllib.request.Request(endpoint, headers=headers), timeout=timeout) as resp:
            return resp.status == 200 and bool(json.load(resp).get("data"))
    except (OSError, ValueError, AttributeError):  # refused, HTTP errors and timeouts are OSErrors
        return False


class MinerUParser(Parser):
    name = "mineru"
    version = f"mineru-vl-utils {MINERU_VL_VERSION} + MinerU2.5"

    def __init__(
        self,
        *,
        server_url: str | None = None,
        model_path: Path | None = None,
        fallback: Parser | None = None,
        timeout: float = 120.0,
        dpi: int = PAGE_DPI,
        max_pages: int | None = None,
        max_failures: int = MAX_FAILURES,
    ) -> None:
        if server_url is None:  # a server, when given too, wins: it is faster than local weights
            if model_path is None:
                raise ConfigError(
                    "MinerU needs a server URL (CRAG_MINERU_URL) or a model folder (CRAG_MINERU_MODEL_PATH). "
                    "Set one of them, or set CRAG_PARSER=pymupdf."
                )
            if importlib.util.find_spec("transformers") is None:
                raise ConfigError(
                    'The local MinerU model needs transformers: pip install "mineru-vl-utils[transformers]". '
                    "Or run a MinerU server and set CRAG_MINERU_URL instead of CRAG_MINERU_MODEL_PATH."
                )
            if not Path(model_path).is_dir():
                raise ConfigError(
                    f"CRAG_MINERU_MODEL_PATH={model_path} is not a folder. Download the model "
                    "(e.g. `huggingface-cli download opendatalab/MinerU2.5-2509-1.2B --local-dir <folder>`) "
                    "and point the setting at it."
                )
        self.server_url = server_url
        self.model_path = Path(model_path) if server_url is None and model_path is not None else None
        self.fallback = fallback or PyMuPDFParser()
        self.timeout = timeout
        self.dpi = dpi
        self.max_pages = max_pages
        self.max_failures = max_failures
        self.gave_up = ""  # why MinerU is not asked for the rest of this build (its circuit breaker); "" while it is
        self._failures = 0  # pages MinerU failed on in a row
        self._ocr_pages = 0  # pages of the file being parsed that the fallback read with OCR
        self._client: MinerUClient | None = None

    def _connect(self) -> MinerUClient:
        """Create the client on first use: it asks the server for its model, or loads the weights."""
        if self._client is None:
            if self.server_url is not None:
                self._client = MinerUClient(
                    backend="http-client",
                    server_url=self.server_url,
                    http_timeout=self.timeout,
                    connect_timeout=min(self.timeout, 10.0),
                    max_retries=1,  # the client retries timeouts too; more would multiply the timeout
                    use_tqdm=False,
                )
            else:
                self._client = MinerUClient(backend="transformers", model_path=str(self.model_path), use_tqdm=False)
        return self._client

    def parse(self, path: Path, pages: Sequence[int] | None = None, on_page: PageProgress | None = None) -> ParsedPDF:
        sizes = page_sizes(path, self.max_pages)  # rejects unreadable and too long files before any request
        wanted = list(pages) if pages is not None else list(range(1, len(sizes) + 1))
        missing = [p for p in wanted if not 1 <= p <= len(sizes)]
        if missing:
            raise PDFError(f"{path.name}: has {len(sizes)} pages, so page {missing[0]} cannot be parsed.")
        label = _label(self.fallback)
        if self.gave_up:
            result = self.fallback.parse(path, wanted, on_page)
            note = f"MinerU not asked for the rest of this build: {self.gave_up}; parsed with {label}"
            return replace(result, warnings=(note, *result.warnings))
        try:
            client = self._connect()
        except Exception as exc:  # noqa: BLE001 - any start-up failure means: use the fallback
            where = self.server_url or self.model_path
            result = self.fallback.parse(path, wanted, on_page)
            note = f"MinerU unavailable at {where} ({_reason(exc)}); parsed with {label}"
            return replace(result, warnings=(note, *result.warnings))

        blocks: list[Block] = []
        warnings: list[str] = []
        parsed_by: Parser = self
        self._ocr_pages = 0
        for done, number in enumerate(wanted, start=1):
            if self.gave_up:  # in the middle of this file: its other pages go to the fallback
                blocks += self._rest(path, wanted[done - 1 :], warnings, _shifted(on_page, done - 1))
                parsed_by = self.fallback  # so the next sync with MinerU back parses the file again
                break
            try:
                image = render_page(path, number, self.dpi)
                read = to_blocks(client.two_step_extract(image), number, sizes[number - 1])
            except Exception as exc:  # noqa: BLE001 - one bad page must not lose the document
                failure: str | None = f"MinerU failed ({_reason(exc)})"
                page_blocks: list[Block] | None = None
                self._failed(exc)
            else:  # garbled layout output also ends here
                failure = None if any(b.text for b in read) else "MinerU recognised no text"
                page_blocks = read
                self._failures = 0
            if failure is not None:
                relay = _ocr_relay(on_page, done, len(wanted))
                page_blocks = self._fallback_page(path, number, failure, page_blocks, warnings, relay)
            blocks.extend(page_blocks or ())  # a list here: read, or the fallback's
            if on_page:
                on_page(done, len(wanted))
        if wanted and not any(b.text for b in blocks):
            raise PDFError(
                f"{path.name}: neither MinerU nor {label} found any text "
                f"({'; '.join(warnings) or 'blank or image-only pages'}). Check that the file shows text when opened."
            )
        return ParsedPDF(
            blocks=tuple(blocks),
            pages=len(wanted),
            parser=parsed_by.name,
            parser_version=parsed_by.version,
            warnings=tuple(warnings),
            ocr_pages=self._ocr_pages,
        )

    def _rest(
        self,
        path: Path,
        pages: list[int],
        warnings: list[str],
        on_page: PageProgress | None,
    ) -> list[Block]:
        """The pages of a file left when MinerU was given up, parsed with the fallback."""
        label = _label(self.fallback)
        warnings.append(
            f"MinerU given up for this build: {self.gave_up}; pages {pages[0]}-{pages[-1]} parsed with {label}"
        )
        try:
            rest = self.fallback.parse(path, pages, on_page)
        except PDFError as exc:  # no text on any of these pages; the others may have some
            warnings.append(f"pages {pages[0]}-{pages[-1]}: {label} found no text either ({_reason(exc)})")
            return []
        warnings.extend(rest.warnings)
        self._ocr_pages += rest.ocr_pages
        return list(rest.blocks)

    def _failed(self, exc: BaseException) -> None:
        """Count a page MinerU failed on; after ``max_failures`` in a row, give up on it for this parser's life
        (one build: ``sync`` makes a parser per build). A server that is down or overloaded would otherwise
        cost a timeout on every page left."""
        self._failures += 1
        if self._failures >= self.max_failures:
            self.gave_up = f"it failed on {self._failures} pages in a row (last: {_reason(exc)})"

    def _fallback_page(
        self,
        path: Path,
        number: int,
        failure: str,
        mineru_blocks: list[Block] | None,
        warnings: list[str],
        on_page: PageProgress | None = None,
    ) -> list[Block]:
        """Parse one page with the fallback parser and say so in ``warnings``.

        ``mineru_blocks`` is what MinerU found on the page (no text), or None when it failed outright.
        """
        label = _label(self.fallback)
        try:
            result = self.fallback.parse(path, [number], on_page)
        except PDFError as exc:  # e.g. no text layer on this page
            result, why = None, _reason(exc)
        else:
            why = "no text"
        if result is not None and any(b.text for b in result.blocks):
            warnings.append(f"page {number}: {failure}; parsed with {label}")
            warnings.extend(result.warnings)
            self._ocr_pages += result.ocr_pages
            return list(result.blocks)
        if mineru_blocks is not None:  # no text for either parser: a blank or figures-only page
            return mineru_blocks
        warnings.append(f"page {number}: {failure}, and {label} found no text either ({why}); page skipped")
        return []
