"""Ingestion: the user's PDFs become chunks in the index.

- ``sync``: the build (scan the files folder, parse, chunk, embed, write a generation). Incremental.
- ``base``: the parser interface; ``pymupdf`` (offline layout parser), ``ocr`` and ``ocr_layout``
  (scanned pages), ``mineru`` (MinerU 2.5 through a server); ``chunking``; ``uploads`` (saving uploads).
"""

from crag.ingest.sync import SyncReport, choose_parser, file_hash, scan, sync

__all__ = ["SyncReport", "choose_parser", "file_hash", "scan", "sync"]
