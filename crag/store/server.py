"""The index on a Chroma server (``chroma run``), shared by every app instance that points at it.

Chroma is the single source of truth; nothing a reader needs is on the local disk:

    gen-<id>            one collection per generation: vectors, chunk text, and as metadata the chunk's
                        fields, its place in the generation and its lexical tokens (cut once, by the build)
    crag-index          "active": the pointer (the active generation, as JSON); "manifest:<id>": its manifest
    crag-build-lease    the build lease (see ``lease.py``)

A build writes a whole generation, then its manifest, then switches the pointer with one upsert. A build
killed halfway leaves the pointer on the previous generation; the next build deletes the orphans.
Each process builds the lexical index (BM25) in memory from the active generation's documents and their
tokens when it opens that generation, and follows a switch within ``POINTER_MAX_AGE`` of it.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

from crag.errors import CragError
from crag.store.chroma import is_missing, server_client, unreachable
from crag.store.common import Generation, IndexUnavailable, RebuildNeeded, chunk_from_json, chunk_to_json
from crag.store.generation import GenerationWriter, IndexReader, Opened, build_lexical, chunk_tokens
from crag.store.lease import UNIT, Lease
from crag.store.local import Store
from crag.types import Chunk, FileResult

T = TypeVar("T")
META = "crag-index"
LEASE = "crag-build-lease"
POINTER = "active"
READ_BATCH = 2000  # records per request while a reader loads a generation

# Per process and server: the last pointer read (monotonic time, generation) and the open reader,
# shared by every Store object, so the pages, the API and the retriever load a generation once.
_pointers: dict[str, tuple[float, Generation | None]] = {}
_readers: dict[str, IndexReader] = {}
_pointer_lock = threading.Lock()
_reader_lock = threading.Lock()


def _manifest_id(generation: str) -> str:
    return f"manifest:{generation}"


class ServerStore(Store):
    """The index on a Chroma server: the same interface as the embedded ``Store``."""

    def __init__(self, root: Path, url: str, headers: Mapping[str, str] | None = None, lease_seconds: float = 30.0):
        super().__init__(root)  # the local folder keeps only what is not the index (conversations, caches)
        self.url = url
        self.headers = dict(headers or {})
        self.lease_seconds = lease_seconds
        self._meta_collection: Any = None
        self._lease: Lease | None = None

    @property
    def where(self) -> str:
        return f"on the Chroma server at {self.url}"

    @contextmanager
    def _reach(self) -> Iterator[None]:
        """Turn a server that does not answer (or refuses us) into a message that says what to do."""
        try:
            yield
        except CragError:
            raise
        except Exception as exc:
            why = unreachable(exc)
            if why is None:
                raise
            raise IndexUnavailable(
                f"The Chroma server at {self.url} cannot be used ({why}): start it "
                "(`chroma run --path chroma_server --host 0.0.0.0 --port 8000`), check CRAG_CHROMA_URL and "
                "CRAG_CHROMA_TOKEN, or unset CRAG_CHROMA_URL to use a local index."
            ) from None

    @property
    def client(self) -> Any:
        if self._client is None:
            with self._reach():
                self._client = server_client(self.url, self.headers)
        return self._client

    def _small(self, name: str) -> Any:
        with self._reach():
            return self.client.get_or_create_collection(name, embedding_function=None)

    def _meta(self) -> Any:
        """The small collection of the pointer and the manifests. Its handle names it by id, so a handle
        whose collection was deleted (by hand, or by an older version's discard) is fetched anew once."""
        if self._meta_collection is None:
            self._meta_collection = self._small(META)
        return self._meta_collection

    def _in_meta(self, op: Callable[[Any], T]) -> T:
        with self._reach():
            try:
                return op(self._meta())
            except Exception as exc:
                if not is_missing(exc):
                    raise
                self._meta_collection = None
                return op(self._meta())

    def set_aside(self, damage: RebuildNeeded) -> str:
        """A pointer that cannot be read is kept as another record, and the build that follows writes a new one. The
        generations it may name go at the next build's cleanup, once a new one answers."""
        aside = f"{POINTER}.broken-{time.strftime('%Y%m%d-%H%M%S')}"
        got = self._in_meta(lambda meta: meta.get(ids=[POINTER], include=["documents"]))
        if got["ids"]:
            self._in_meta(lambda meta: meta.upsert(ids=[aside], embeddings=UNIT, documents=got["documents"]))
            self._in_meta(lambda meta: meta.delete(ids=[POINTER]))
        with _pointer_lock:
            _pointers.pop(self.url, None)
        with _reader_lock:
            _readers.pop(self.url, None)
        return (
            f"The index pointer {self.where} could not be read; it was kept as the record {aside} of the collection "
            f"{META}, and this build indexed every PDF anew."
        )

    def active(self, max_age: float = 0.0) -> Generation | None:
        """The generation that answers. With ``max_age``, a pointer read that recently is trusted: a
        query costs no request, and a switch is seen within ``max_age`` seconds."""
        if max_age > 0:
            with _pointer_lock:
                seen = _pointers.get(self.url)
            if seen is not None and time.monotonic() - seen[0] <= max_age:
                return seen[1]
        got = self._in_meta(lambda meta: meta.get(ids=[POINTER], include=["documents"]))
        generation = None
        if got["ids"]:
            try:
                generation = Generation(**json.loads(got["documents"][0]))
            except (ValueError, TypeError) as exc:
                with _pointer_lock:
                    _pointers.pop(self.url, None)  # no query may trust an earlier read of it now
                raise RebuildNeeded(f"The index pointer {self.where} is damaged ({exc}): rebuild the index.") from None
        self._remember(generation)
        return generation

    def _remember(self, generation: Generation | None) -> None:
        with _pointer_lock:
            _pointers[self.url] = (time.monotonic(), generation)

    def manifest(self) -> list[FileResult]:
        gen = self.active()
        return self._manifest(gen.id) if gen else []

    def _manifest(self, generation: str) -> list[FileResult]:
        got = self._in_meta(lambda meta: meta.get(ids=[_manifest_id(generation)], include=["documents"]))
        if not got["ids"]:
            raise RebuildNeeded(f"The index {self.where} has no manifest for {generation}: rebuild the knowledge base.")
        try:
            return [FileResult.from_json(m) for m in json.loads(got["documents"][0])]
        except (ValueError, TypeError, KeyError) as exc:
            raise RebuildNeeded(f"The manifest {self.where} is damaged ({exc}): rebuild the knowledge base.") from None

    @contextmanager
    def build_lock(self) -> Iterator[None]:
        """One build at a time across every machine that uses the server: the lease, renewed while held."""
        lease = Lease(self._small(LEASE), self.lease_seconds)
        with self._reach():
            lease.acquire()
        stop = threading.Event()

        def heartbeat() -> None:
            while not stop.wait(lease.ttl / 3):
                try:
                    if not lease.renew():
                        return  # taken over: the commit's check refuses to switch
                except Exception:  # noqa: BLE001 - a server hiccup: the next beat tries again
                    continue

        beat = threading.Thread(target=heartbeat, name="crag-build-lease", daemon=True)
        beat.start()
        self._lease = lease
        try:
            yield
        finally:
            self._lease = None
            stop.set()
            beat.join()
            with suppress(Exception):  # an unreleased lease expires by itself
                lease.release()

    def collect_garbage(self) -> list[str]:
        """Remove generations (and manifests) that are not active: leftovers of builds that died."""
        gen = self.active()
        keep = gen.id if gen else None
        removed = []
        with self._reach():
            for collection in self.client.list_collections():
                if collection.name.startswith("gen-") and collection.name != keep:
                    self.client.delete_collection(collection.name)
                    removed.append(collection.name)
        ids = self._in_meta(lambda meta: meta.get(include=[])["ids"])
        stale = [i for i in ids if i.startswith("manifest:") and i != _manifest_id(keep or "")]
        if stale:
            self._in_meta(lambda meta: meta.delete(ids=stale))
        return sorted(set(removed) | {i.removeprefix("manifest:") for i in stale})

    def verify(self) -> str | None:
        """None when the active generation opens and agrees with its manifest; else what is wrong and the fix.
        Cheap after the first call: the reader is loaded once per generation and process."""
        try:
            self.reader()
        except CragError as exc:
            return str(exc)
        return None

    def writer(self, embedder: str, dimension: int, chunking: dict[str, Any]) -> GenerationWriter:
        with self._reach():
            return ServerWriter(self, embedder, dimension, chunking)

    def reader(self) -> IndexReader | None:
        """The active generation, opened; shared by the process until the pointer moves."""
        for attempt in range(3):
            gen = self.active()
            if gen is None:
                return None
            with _reader_lock:  # one load at a time: a second caller waits, then shares it
                cached = _readers.get(self.url)
                if cached is not None and cached.generation.id == gen.id:
                    return cached
                try:
                    reader = IndexReader(self, gen)
                except RebuildNeeded:
                    # A newer build may have switched and dropped this generation while it loaded.
                    now = self.active()
                    if attempt < 2 and now is not None and now.id != gen.id:
                        continue
                    raise
                _readers[self.url] = reader
                return reader
        return None  # not reached: the last attempt returns or raises

    def _open(self, generation: Generation) -> Opened:
        try:
            with self._reach():
                collection = self.client.get_collection(generation.id)
                total = collection.count()
                records: list[tuple[int, Chunk, list[str] | None]] = []
                for offset in range(0, total, READ_BATCH):
                    got = collection.get(include=["documents", "metadatas"], limit=READ_BATCH, offset=offset)
                    for rid, text, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True):
                        data = {**json.loads(meta["chunk"]), "id": rid, "text": text}
                        tokens = meta["tokens"].split() if "tokens" in meta else None
                        records.append((int(meta["seq"]), chunk_from_json(data), tokens))
        except (ValueError, TypeError, KeyError) as exc:
            raise RebuildNeeded(f"The index {self.where} is damaged ({exc}): rebuild the knowledge base.") from None
        except Exception as exc:  # noqa: BLE001 - chromadb raises its own types for a missing collection
            if isinstance(exc, CragError):
                raise
            raise RebuildNeeded(f"The index {self.where} is damaged ({exc}): rebuild the knowledge base.") from None
        records.sort(key=lambda r: r[0])
        chunks = [chunk for _, chunk, _ in records]
        lexical = build_lexical(chunks, [tokens for _, _, tokens in records])
        return Opened(chunks, collection, lexical, self._manifest(generation.id))


class ServerWriter(GenerationWriter):
    """Writes every chunk's fields into its collection; ``commit`` records the manifest, then switches."""

    store: ServerStore

    def _metadatas(self, chunks: Sequence[Chunk], first: int) -> list[dict[str, Any]]:
        out = []
        for n, chunk in enumerate(chunks):
            fields = chunk_to_json(chunk)
            del fields["id"], fields["text"]  # the record's id and document
            # The tokens are cut once, here, rather than by every reader that opens the generation: jieba
            # is most of a reader's open time. The embedded index likewise stores the BM25 its build made.
            tokens = " ".join(chunk_tokens(chunk))  # a token holds no space (text.TOKEN, jieba on Han runs)
            chunk_json = json.dumps(fields, ensure_ascii=False)
            out.append({"file": chunk.file, "seq": first + n, "chunk": chunk_json, "tokens": tokens})
        return out

    def commit(self, manifest: list[FileResult]) -> Generation:
        store = self.store
        gen = self.generation(manifest)
        entries = json.dumps([dataclasses.asdict(m) for m in manifest], ensure_ascii=False)
        with store._reach():
            stored = self.collection.count()
            if stored != len(self.chunks):
                raise CragError(
                    f"The new index {store.where} holds {stored} of its {len(self.chunks)} chunks: run the build "
                    "again. The previous knowledge base still answers."
                )
            store._in_meta(lambda meta: meta.upsert(ids=[_manifest_id(self.id)], embeddings=UNIT, documents=[entries]))
            if store._lease is not None:
                store._lease.check()
            previous = store.active()
            pointer = json.dumps(dataclasses.asdict(gen), ensure_ascii=False)
            store._in_meta(  # the switch
                lambda meta: meta.upsert(
                    ids=[POINTER], embeddings=UNIT, documents=[pointer], metadatas=[{"generation": gen.id}]
                )
            )
            store._remember(gen)
            if previous and previous.id != self.id:
                # Readers elsewhere still on it fail one query, re-read the pointer and follow (retriever.py).
                with suppress(Exception):
                    store.client.delete_collection(previous.id)
                    store._in_meta(lambda meta: meta.delete(ids=[_manifest_id(previous.id)]))
        return gen
