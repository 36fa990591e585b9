"""Folders as knowledge bases: a scope filters both halves of retrieval before the top k, and the near-miss check
judges a question against the scope's documents. Real PDFs (English and Chinese) in two folders, a nested one and
the top level; PyMuPDF, the built-in USE embedder, Chroma (embedded and a `chroma run` server) and BM25."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from crag.config import Settings, load_settings
from crag.ingest import sync
from crag.messages import near_miss_note, never_mentioned, no_answer_message
from crag.models import USEEmbedder
from crag.pipeline import Pipeline
from crag.retriever import Retriever
from crag.scope import TOP_LEVEL, EmptyScope, Scope, UnknownScope, knowledge_bases, resolve
from crag.store import IndexReader, open_store
from crag.types import Action, Chunk, FileResult, TermCheck
from tests.chroma_server import chroma_server
from tests.pdfs import folders_of_pdfs

pytestmark = pytest.mark.integration

WIDGET = "How much memory does the widget need?"
ZORBLAX = "How much memory does the Zorblax need?"
PARTS = "部件需要多少内存？"
PROJECTS = {"projects/gadget.pdf", "projects/alpha/zorblax.pdf", "projects/beta/sprocket.pdf"}


def settings_for(root: Path, **overrides: object) -> Settings:
    return load_settings(
        files_dir=root / "Files",
        chroma_dir=root / "db",
        parser="pymupdf",
        embed_backend="local",
        llm_backend="embedded",
        web_search=False,
        **overrides,
    )


@pytest.fixture(scope="module")
def embedder() -> USEEmbedder:
    return USEEmbedder()


@pytest.fixture(scope="module")
def kb(scoped_kb: Settings) -> Settings:
    return scoped_kb


@pytest.fixture(scope="module")
def retriever(kb: Settings, embedder: USEEmbedder) -> Retriever:
    return Retriever(kb, embedder)


@pytest.fixture(scope="module")
def reader(retriever: Retriever) -> IndexReader:
    return retriever.store.reader()


def test_every_folder_is_a_knowledge_base_with_its_counts(kb: Settings) -> None:
    found = {b.name: (b.files, b.chunks > 0) for b in knowledge_bases(open_store(kb).manifest())}
    assert found == {
        TOP_LEVEL: (1, True),
        "courses": (2, True),
        "projects": (3, True),  # its subfolders' documents too
        "projects/alpha": (1, True),
        "projects/beta": (1, True),
    }
    assert list(found)[0] == TOP_LEVEL


@pytest.mark.parametrize("mode", ["dense", "lexical", "hybrid"])
@pytest.mark.parametrize(
    ("question", "paths", "expected"),
    [
        (WIDGET, ["projects"], PROJECTS),  # a folder, its subfolders included
        (WIDGET, ["projects/alpha"], {"projects/alpha/zorblax.pdf"}),  # a nested folder
        (WIDGET, ["projects/beta/sprocket.pdf"], {"projects/beta/sprocket.pdf"}),  # a single file
        (ZORBLAX, [TOP_LEVEL], {"widget.pdf"}),  # the PDFs directly in the files folder
        (PARTS, ["courses"], {"courses/部件.pdf", "courses/齿轮.pdf"}),  # Chinese
        (PARTS, ["courses/齿轮.pdf"], {"courses/齿轮.pdf"}),
        (ZORBLAX, ["courses/齿轮.pdf", "projects/beta"], {"courses/齿轮.pdf", "projects/beta/sprocket.pdf"}),
    ],
)
def test_a_scoped_retrieval_returns_only_the_scope(
    retriever: Retriever, question: str, paths: list[str], expected: set[str], mode: str
) -> None:
    hits = retriever.retrieve(question, 4, mode, Scope.of(paths))
    assert {h.chunk.file for h in hits} <= expected
    if mode != "lexical" or question != ZORBLAX:  # BM25 finds no passage that shares no word with the question
        in_scope = sum(1 for c in retriever.store.reader().chunks if c.file in expected)
        assert len(hits) == min(4, in_scope), "k passages from the scope, not the top k filtered"


def test_the_scope_filters_before_the_top_k(retriever: Retriever) -> None:
    unscoped = retriever.retrieve(WIDGET, 2)
    assert {h.chunk.file for h in unscoped} == {"widget.pdf"}
    scoped = retriever.retrieve(WIDGET, 4, scope=Scope.of(["projects"]))
    assert len(scoped) == 4 and {h.chunk.file for h in scoped} <= PROJECTS


def test_the_lexical_half_keeps_the_index_scores_in_a_scope(reader: IndexReader) -> None:
    """A mask, not an index per folder: a passage scores in a scope what it scores among every document."""
    scope = Scope.of(["projects"])
    everywhere = [(h.chunk.id, h.score) for h in reader.lexical(WIDGET, 100) if h.chunk.file in PROJECTS]
    assert everywhere and [(h.chunk.id, h.score) for h in reader.lexical(WIDGET, 100, scope)] == everywhere


@pytest.mark.parametrize(
    "paths",
    [["projects/alpha", "courses/部件.pdf"], ["projects", "courses/部件.pdf"]],  # a third of the index, two thirds
    ids=["narrow", "wide"],
)
def test_the_dense_half_ranks_the_scope_as_the_whole_index_would(
    reader: IndexReader, embedder: USEEmbedder, paths: list[str]
) -> None:
    scope = Scope.of(paths)
    vector = embedder.embed([WIDGET])[0]
    everywhere = [h for h in reader.dense(vector, reader.n_docs) if scope.holds(h.chunk.file)]
    scoped = reader.dense(vector, 100, scope)
    assert [h.chunk.id for h in scoped] == [h.chunk.id for h in everywhere]
    assert all(math.isclose(a.score, b.score, abs_tol=1e-4) for a, b in zip(scoped, everywhere, strict=True))


def test_a_wide_scope_the_graph_misses_is_searched_exactly(
    reader: IndexReader, embedder: USEEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    scope, vector = Scope.of(["projects", "courses"]), embedder.embed([WIDGET])[0]
    expected = [h.chunk.id for h in reader.dense(vector, 3, scope)]
    monkeypatch.setattr(reader, "_nearest", lambda vector, n: [])  # the graph's nearest hold none of the scope's
    assert [h.chunk.id for h in reader.dense(vector, 3, scope)] == expected


@pytest.mark.parametrize("rows", [[0, 1, 2, 7, 8, 20], list(range(0, 300, 2))], ids=["runs", "scattered"])
def test_the_exact_search_reads_the_rows_of_the_scope(rows: list[int]) -> None:
    import numpy as np

    from crag.store.scoped import ScopeView, VectorCache

    chunks = [Chunk(id=f"c{n}", text="", file=f"f{n}.pdf", pages=(1,)) for n in range(300)]
    matrix = np.random.default_rng(7).standard_normal((300, 8)).astype(np.float32)
    fetched: list[str] = []

    def fetch(ids):
        fetched.extend(ids)
        return [matrix[int(i[1:])] for i in ids]

    view = ScopeView(Scope.of(["x"]), frozenset(), np.array(rows), chunks, None, VectorCache(chunks, fetch))
    query = matrix[rows[-1]]
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    expected = sorted(rows, key=lambda r: -float(unit[r] @ (query / np.linalg.norm(query))))[:5]
    assert [row for row, _ in view.dense(query, 5)] == expected
    assert [row for row, _ in view.dense(query, 5)] == expected and len(fetched) == len(rows), "fetched once"


def test_a_scope_of_every_document_searches_as_no_scope(retriever: Retriever, reader: IndexReader) -> None:
    whole = Scope.of([TOP_LEVEL, "courses", "projects"])
    assert reader.scoped(whole) is None
    hits = [(h.chunk.id, h.score) for h in retriever.retrieve(WIDGET, 5, scope=whole)]
    assert hits == [(h.chunk.id, h.score) for h in retriever.retrieve(WIDGET, 5)]


def test_the_near_miss_check_is_the_scopes_own(kb: Settings) -> None:
    pipeline = Pipeline.from_settings(kb)
    everywhere = pipeline.ask(ZORBLAX)
    assert everywhere.action is Action.CORRECT and everywhere.sources[0].file == "projects/alpha/zorblax.pdf"
    assert not everywhere.trace.scope

    scoped = pipeline.ask(ZORBLAX, scope=["projects/beta"])
    assert scoped.action is Action.INCORRECT and scoped.trace.scope == ("projects/beta",)
    assert scoped.text.startswith("The documents in `projects/beta` never mention “Zorblax”.")
    assert scoped.trace.terms.unknown == ("Zorblax",)
    assert {s.file for s in scoped.sources} == {"projects/beta/sprocket.pdf"}
    assert {h.chunk.file for h in scoped.trace.retrieved} == {"projects/beta/sprocket.pdf"}
    assert any("the documents in `projects/beta` never mention “Zorblax”" in note for note in scoped.trace.notes)

    chinese = pipeline.ask(PARTS, scope=["courses/部件.pdf"])
    assert chinese.trace.scope == ("courses/部件.pdf",) and {s.file for s in chinese.sources} == {"courses/部件.pdf"}


def test_an_unknown_scope_lists_the_knowledge_bases(kb: Settings, retriever: Retriever) -> None:
    with pytest.raises(UnknownScope) as unknown:
        retriever.check_scope(Scope.of(["projects/gamma"]))
    message = str(unknown.value)
    assert "“projects/gamma”" in message and unknown.value.missing == ("projects/gamma",)
    for listed in ("`(top level)` (1 file)", "`courses` (2 files)", "`projects` (3 files)", "`projects/alpha`"):
        assert listed in message
    with pytest.raises(UnknownScope, match="“pending” is in the files folder but not indexed yet: rebuild"):
        retriever.check_scope(Scope.of(["pending"]))
    with pytest.raises(UnknownScope, match="projects/gamma"):
        Pipeline.from_settings(kb).ask(WIDGET, scope=["projects/gamma"])
    with pytest.raises(UnknownScope, match="projects/gamma"):
        retriever.retrieve(WIDGET, 3, scope=Scope.of(["projects/gamma"]))


@pytest.mark.slow  # `chroma run`
def test_a_scope_on_a_chroma_server(tmp_path: Path, embedder: USEEmbedder) -> None:
    (tmp_path / "Files").mkdir()
    folders_of_pdfs(tmp_path / "Files")
    with chroma_server(tmp_path / "server") as url:
        settings = settings_for(tmp_path, chroma_url=url)
        sync(settings, embedder)
        retriever = Retriever(settings, embedder)
        for mode in ("dense", "lexical", "hybrid"):
            hits = retriever.retrieve(WIDGET, 3, mode, Scope.of(["projects/alpha"]))
            assert len(hits) == 2 and {h.chunk.file for h in hits} == {"projects/alpha/zorblax.pdf"}
        with pytest.raises(UnknownScope, match="`projects/beta`"):
            retriever.check_scope(Scope.of(["projects/gamma"]))


# ---------------------------------------------------------------------------------------------
# Without an index


def test_scope_paths_are_normalised_and_stay_inside_the_files_folder() -> None:
    assert Scope.of(["./projects/", "projects\\alpha", "projects"]).paths == ("projects", "projects/alpha")
    assert Scope.of(None).paths == () and not Scope.of([])
    for bad in ("../secrets", "projects/../../x", "/etc", "C:/Files", "", "  "):
        with pytest.raises(UnknownScope):
            Scope.of([bad])
    scope = Scope.of(["projects", TOP_LEVEL])
    assert scope.holds("projects/alpha/a.pdf") and scope.holds("top.pdf")
    assert not scope.holds("projects2/a.pdf") and not scope.holds("courses/a.pdf")


def test_a_scope_whose_documents_all_failed_says_so() -> None:
    manifest = [
        FileResult(file="ok.pdf", status="indexed", chunks=3),
        FileResult(file="bad/broken.pdf", status="failed", error="damaged"),
    ]
    assert [(b.name, b.files, b.other) for b in knowledge_bases(manifest)] == [(TOP_LEVEL, 1, 0), ("bad", 0, 1)]
    with pytest.raises(EmptyScope, match="no passage of the documents in `bad`"):
        resolve(Scope.of(["bad"]), manifest)
    assert resolve(Scope.of(["bad", "ok.pdf"]), manifest) == {"ok.pdf"}


def test_messages_name_the_scope_in_the_questions_language() -> None:
    asked, zh = "How much memory does the Zorblax need?", "Zorblax 需要多少内存？"
    assert never_mentioned(asked, ["Zorblax"]) == "Your documents never mention “Zorblax”."
    assert never_mentioned(zh, ["Zorblax"]) == "你的文档中没有提到“Zorblax”。"
    alpha = ["projects/alpha"]
    assert never_mentioned(asked, ["Zorblax"], alpha) == "The documents in `projects/alpha` never mention “Zorblax”."
    assert never_mentioned(zh, ["Zorblax"], ["课程"]) == "`课程` 里的文档中没有提到“Zorblax”。"
    two = never_mentioned(asked, ["Zorblax"], ["projects", "widget.pdf"])
    assert two == "The documents in `projects` and `widget.pdf` never mention “Zorblax”."
    found = TermCheck(("Zorblax",))
    assert no_answer_message(asked, Action.INCORRECT, found, "", "", False, scope=alpha).startswith(
        "I could not find this in the documents in `projects/alpha`."
    )
    assert no_answer_message(zh, Action.AMBIGUOUS, found, "", "", False, scope=["课程"]).startswith(
        "`课程` 里的文档中有相关段落"
    )
    unknown = TermCheck(("Zorblax",), ("Zorblax",), ("Zorblax",), decisive=True)
    assert near_miss_note(unknown, (), alpha).startswith("the documents in `projects/alpha` never mention “Zorblax”")
