"""The page's scope: the picker above the chat, each chat's own scope, answers that say where they were asked,
uploads into a folder, and the Files list grouped by folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import ui.state
from crag.conversations import Conversations
from crag.scope import TOP_LEVEL
from crag.store import Generation
from crag.types import FileResult
from tests import fakes
from tests.apptest import APP, app, ask, loaded, plain, saved, texts, use_pipeline

ALPHA, COURSES, TOP = "projects/alpha/widget.pdf", "courses/植物.pdf", "manual.pdf"
CHUNKS = [
    fakes.chunk("The widget needs two processor cores.", file=ALPHA, n=0),
    fakes.chunk("植物的光合作用需要阳光和水。", file=COURSES, n=1),
    fakes.chunk("The manual says the widget needs a fan.", file=TOP, n=2),
]
MANIFEST = [FileResult(file=f, status="indexed", pages=3, chunks=1) for f in (ALPHA, COURSES, TOP)]


@pytest.fixture
def indexed(monkeypatch: pytest.MonkeyPatch, files: Path) -> Path:
    """A page whose index holds three documents: one in projects/alpha, one in courses, one at the top level."""
    use_pipeline(monkeypatch, [0.9, 0.9, 0.9], chunks=CHUNKS)
    generation = Generation(
        id="gen-1", built_at="2026-11-26T10:00:00", embedder="hash", dimension=8, chunking={}, files=3, chunks=3
    )
    monkeypatch.setattr(
        ui.state, "index_contents", lambda settings, verify=True: ui.state.IndexContents(generation, list(MANIFEST))
    )
    return files


def picker(at: AppTest):
    return next(s for s in at.selectbox if s.label == "Ask in")


def retrieved_files(files: Path) -> set[str]:
    answer = saved(files)[-1].answer
    return {r.chunk.file for r in answer.trace.retrieved}


def test_the_picker_lists_every_knowledge_base_with_its_files(indexed: Path) -> None:
    at = app()
    assert not at.exception
    box = picker(at)
    assert box.value == "All documents"
    assert box.options == [
        "All documents",
        "Files folder (top level) — 1 file",
        "courses — 1 file",
        "projects — 1 file",
        "projects/alpha — 1 file",
        "Choose documents…",
    ]


def test_a_knowledge_base_with_files_the_build_failed_on_says_so_in_words() -> None:
    from crag.scope import TOP_LEVEL, KnowledgeBase
    from ui.scope import label

    assert label(KnowledgeBase(TOP_LEVEL, 3, 40, 1)) == "Files folder (top level) — 3 files, 1 could not be indexed"
    assert label(KnowledgeBase("projects/alpha", 1, 4)) == "projects/alpha — 1 file"


def test_a_chat_scoped_to_a_folder_answers_from_it_and_keeps_it_after_a_reload(indexed: Path) -> None:
    at = app()
    picker(at).set_value("projects/alpha").run()
    assert at.query_params["scope"] in ("projects/alpha", ["projects/alpha"]), (
        "a new chat's scope is in the address until it is asked"
    )
    ask(at, "How many cores does the widget need?")
    assert not at.exception
    assert retrieved_files(indexed) == {ALPHA}
    assert saved(indexed)[-1].answer.trace.scope == ("projects/alpha",)
    assert "in projects/alpha" in plain(texts(at.chat_message[1].caption)), "the answer says where it was asked"
    store = Conversations(indexed.parent / "chroma_db" / "conversations.sqlite3")
    [chat] = store.list()
    assert chat.scope == ("projects/alpha",) and "scope" not in at.query_params

    reloaded = AppTest.from_file(APP, default_timeout=60)
    reloaded.query_params["chat"] = chat.id
    reloaded = loaded(reloaded.run())
    assert picker(reloaded).value == "projects/alpha"
    reloaded.button(key="new_chat").click().run()
    assert picker(reloaded).value == "All documents", "a new chat asks every document"
    ask(reloaded, "How many cores does the widget need?")
    assert retrieved_files(indexed) == {ALPHA, COURSES, TOP}
    assert saved(indexed)[-1].answer.trace.scope == ()


def test_a_scope_changed_mid_chat_applies_from_the_next_question(indexed: Path) -> None:
    at = ask(app(), "光合作用需要什么？")
    assert retrieved_files(indexed) == {ALPHA, COURSES, TOP}
    picker(at).set_value("courses").run()
    ask(at, "光合作用需要什么？")
    first, second = [m.answer for m in saved(indexed) if m.answer is not None]
    assert (first.trace.scope, second.trace.scope) == ((), ("courses",)), "the first answer keeps where it was asked"
    assert retrieved_files(indexed) == {COURSES}


def test_chosen_documents_are_the_scope(indexed: Path) -> None:
    at = app()
    picker(at).set_value("Choose documents…").run()
    documents = next(m for m in at.multiselect if m.label == "Documents")
    assert documents.options == [ALPHA, COURSES, TOP]
    documents.select(COURSES).select(TOP).run()
    ask(at, "What does the widget need?")
    assert retrieved_files(indexed) == {COURSES, TOP}
    assert picker(at).value == "Choose documents…"


def test_a_folder_gone_from_the_knowledge_base_is_shown_missing_and_all_documents_is_offered(indexed: Path) -> None:
    store = Conversations(indexed.parent / "chroma_db" / "conversations.sqlite3")
    chat = store.create("Old project", scope=["projects/beta"])
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["chat"] = chat.id
    at = loaded(at.run())
    assert picker(at).value == "projects/beta" and "projects/beta — missing" in picker(at).options
    assert "no longer in the knowledge base" in texts(at.warning)

    ask(at, "How many cores does the widget need?")
    assert not at.exception
    refused = saved(indexed)[-1]
    assert not refused.complete and "projects/beta" in refused.error and "projects/alpha" in refused.error
    at.button(key=f"reask-{refused.id}").click().run()
    assert not at.exception
    assert Conversations(store.path).get(chat.id).scope == ()
    assert picker(at).value == "All documents"
    assert retrieved_files(indexed) == {ALPHA, COURSES, TOP}, "the question is asked again, in every document"


def test_the_files_list_is_grouped_by_folder_and_a_new_folder_takes_the_uploads(
    monkeypatch: pytest.MonkeyPatch, files: Path
) -> None:
    use_pipeline(monkeypatch, [0.9])
    for name in (ALPHA, TOP):
        (files / name).parent.mkdir(parents=True, exist_ok=True)
        (files / name).write_bytes(b"%PDF-1.4 not parsed here")
    at = app()
    lines = [plain(m.value) for m in at.sidebar.markdown if "folder_open" in m.value or " · **" in m.value]
    assert lines == [
        "**:material/folder_open: (top level)**",
        "🆕 not indexed yet · **manual.pdf**",
        "**:material/folder_open: projects/alpha**",
        "🆕 not indexed yet · **widget.pdf**",
    ]
    assert at.selectbox(key="upload_folder").options == ["(top level)", "projects", "projects/alpha"]

    at.text_input(key="new_folder").input("courses/植物学").run()
    at.button(key="create_folder").click().run()
    assert not at.exception
    assert (files / "courses" / "植物学").is_dir()
    assert at.selectbox(key="upload_folder").value == "courses/植物学", "the next uploads go into the new folder"

    at.text_input(key="new_folder").input("../outside").run()
    at.button(key="create_folder").click().run()
    assert "cannot be a folder name" in texts(at.sidebar.error)
    assert not (files.parent / "outside").exists()

    from types import SimpleNamespace

    from crag.config import load_settings
    from tests.pdfs import manual_pdf
    from ui.files import save

    pdf = manual_pdf(files.parent / "upload.pdf").read_bytes()
    notes = save(load_settings(), [SimpleNamespace(name="上传.pdf", getvalue=lambda: pdf)], "courses/植物学")
    assert (files / "courses" / "植物学" / "上传.pdf").read_bytes() == pdf
    assert "to **courses/植物学**" in notes[0][1]
    again = save(load_settings(), [SimpleNamespace(name="copy.pdf", getvalue=lambda: pdf)], TOP_LEVEL)
    assert again[0][0] == "info" and "as courses/植物学/上传.pdf" in plain(again[0][1]), (
        "a build would index one copy only"
    )
    assert not (files / "copy.pdf").exists()
