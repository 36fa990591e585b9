"""The index: Chroma (dense) and BM25 (lexical), written in generations and swapped atomically.

Two backends with one interface. Unset ``CRAG_CHROMA_URL``: embedded Chroma and BM25 files in a
local folder (``local.Store``). Set: a Chroma server holds everything, shared by every app instance
that points at it (``server.ServerStore``). ``open_store`` picks the one the settings ask for.
chromadb is imported by ``chroma.py`` only, bm25s by ``lexical.py`` only.
"""

from __future__ import annotations

from crag.config import Settings
from crag.store.common import (
    RRF_K,
    Blocked,
    BuildInProgress,
    ChromaUnreadable,
    Generation,
    IndexInaccessible,
    IndexUnavailable,
    Mode,
    RebuildNeeded,
    chunk_from_json,
    chunk_to_json,
    fuse,
    fuse_top,
    index_text,
)
from crag.store.generation import GenerationWriter, IndexReader
from crag.store.lexical import bm25_rank
from crag.store.local import Store, read_manifest
from crag.store.server import ServerStore

# How old a pointer read may be when a query trusts it: readers of a server follow a switch within
# this many seconds, and a query costs no request to learn that nothing changed.
POINTER_MAX_AGE = 1.0


def open_store(settings: Settings) -> Store:
    """The index the settings name: a Chroma server when ``CRAG_CHROMA_URL`` is set, else ``CRAG_CHROMA_DIR``."""
    if settings.chroma_url:
        return ServerStore(
            settings.chroma_dir, settings.chroma_url, settings.chroma_headers(), settings.build_lease_seconds
        )
    return Store(settings.chroma_dir)


__all__ = [
    "POINTER_MAX_AGE",
    "RRF_K",
    "Blocked",
    "BuildInProgress",
    "ChromaUnreadable",
    "Generation",
    "GenerationWriter",
    "IndexInaccessible",
    "IndexReader",
    "IndexUnavailable",
    "Mode",
    "RebuildNeeded",
    "ServerStore",
    "Store",
    "bm25_rank",
    "chunk_from_json",
    "chunk_to_json",
    "fuse",
    "fuse_top",
    "index_text",
    "open_store",
    "read_manifest",
]
