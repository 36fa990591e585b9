"""Export and import of a knowledge base, on real PDFs and real indexes (the hashing embedder, so that no model loads):
an imported index answers as the exported one did; an archive that is damaged, tampered with or unsafe is refused,
saying why, and the index that answered still does, with nothing half-written left behind."""

from __future__ import annotations

import io
import json
import os
import stat
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from crag.archive import MANIFEST, ArchiveRefused, export_archive, import_archive, sha256_of
from crag.config import Settings, load_settings
from crag.conversations import Conversations, chats_file
from crag.feedback import Rating, Wrong
from crag.ingest import sync
from crag.models import EmbedderUnavailable
from crag.store import open_store
from crag.store.chroma import embedded_client
from tests.fakes import HashEmbedder
from tests.pdfs import folders_of_pdfs, manual_pdf, text_pdf
from tests.watching import CountingEmbedder, PlainParser, pipeline_over

pytestmark = pytest.mark.reliability

QUESTIONS = [
    "How many processor cores does the widget need?",
    "How much memory does the gadget need?",
    "What does the Zorblax manual describe in chapter 2?",
    "What are the limits of the sprocket?",
    "What is the maximum memory of the widget?",
    "Install the dependencies before you run the gadget?",
    "部件需要几个处理器核心？",
    "齿轮需要多少内存？",
    "What is feature number 2 of the sprocket?",
    "What is the default number of cores of the Zorblax?",
]


def hash_embedder_for(settings: Settings, name: str) -> HashEmbedder | None:
    return HashEmbedder() if name == HashEmbedder.name else None


def kb(root: Path) -> Settings:
    (root / "Files").mkdir(parents=True, exist_ok=True)
    return load_settings(
        files_dir=root / "Files", chroma_dir=root / "db", parser="pymupdf", web_search=False, llm_backend="embedded"
    )


def build(settings: Settings, embedder: HashEmbedder | None = None) -> None:
    sync(settings, embedder or HashEmbedder(), parser=PlainParser())


def answers(settings: Settings) -> list[tuple[str, list[tuple[str, tuple[int, ...]]]]]:
    pipeline = pipeline_over(settings, HashEmbedder())
    out = []
    for question in QUESTIONS:
        answer = pipeline.ask(question, web=False)
        out.append((answer.text, [(s.file, s.pages) for s in answer.sources]))
    return out


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, Path, Path]:
    """A knowledge base of six manuals in folders, built, and exported twice: without and with its PDFs."""
    root = tmp_path_factory.mktemp("exported")
    settings = kb(root)
    folders_of_pdfs(settings.files_dir)
    build(settings)
    bare, whole = root / "kb.crag", root / "kb-with-files.crag"
    assert export_archive(settings, bare).pdfs == 0
    assert export_archive(settings, whole, with_files=True).pdfs == 6
    return settings, bare, whole


def leftovers(settings: Settings) -> list[str]:
    """What an import may leave behind: staging folders, and collections or generations the pointer does not name."""
    found = [p.name for root in (settings.chroma_dir, settings.files_dir) if root.exists() for p in root.iterdir()]
    staged = [name for name in found if name.startswith(".crag-import-")]
    active = open_store(settings).active()
    names = [c.name for c in embedded_client(settings.chroma_dir / "chroma").list_collections()] if active else []
    previous = json.loads((settings.chroma_dir / "ACTIVE.json").read_text()).get("previous", {}).get("id")
    strays = [n for n in names if n.startswith("gen-") and n not in (active.id if active else "", previous)]
    return staged + strays


def test_an_imported_knowledge_base_answers_ten_questions_as_the_exported_one_did(
    exported: tuple[Settings, Path, Path], tmp_path: Path
) -> None:
    source, bare, _ = exported
    here = kb(tmp_path)  # another folder, empty: the PDFs stay behind
    imported = import_archive(here, bare, embedder_for=hash_embedder_for)
    assert (imported.files, imported.placed, imported.differs, imported.extra) == (6, (), (), ())
    assert len(imported.absent) == 6
    assert answers(here) == answers(source)
    assert leftovers(here) == []


def test_an_archive_with_its_pdfs_places_them_and_says_which_pdfs_of_the_folder_differ(
    exported: tuple[Settings, Path, Path], tmp_path: Path
) -> None:
    source, _, whole = exported
    here = kb(tmp_path)
    (here.files_dir / "widget.pdf").write_bytes((source.files_dir / "widget.pdf").read_bytes())  # the same
    (here.files_dir / "projects").mkdir()
    manual_pdf(here.files_dir / "projects" / "gadget.pdf", topic="gadget", pages=1)  # another version
    text_pdf(here.files_dir / "extra.pdf", ["The extra note says the flux is 42 units."])  # not in the archive
    mine = (here.files_dir / "projects" / "gadget.pdf").read_bytes()
    imported = import_archive(here, whole, embedder_for=hash_embedder_for)
    assert imported.differs == ("projects/gadget.pdf",) and imported.extra == ("extra.pdf",)
    assert sorted(imported.placed) == [
        "courses/部件.pdf",
        "courses/齿轮.pdf",
        "projects/alpha/zorblax.pdf",
        "projects/beta/sprocket.pdf",
    ]
    assert (here.files_dir / "projects" / "gadget.pdf").read_bytes() == mine  # the folder's copy is never overwritten
    assert answers(here) == answers(source)  # it answers at once, as built

    embedder = CountingEmbedder()
    report = sync(here, embedder, parser=PlainParser())  # the incremental sync the import offers
    read = {f.file for f in report.files if f.status == "indexed"}
    assert read == {"projects/gadget.pdf", "extra.pdf"}  # the placed PDFs were not read again


def test_files_imported_without_their_pdf_stay_through_syncs_until_the_pdf_comes(
    exported: tuple[Settings, Path, Path], tmp_path: Path
) -> None:
    source, bare, _ = exported
    here = kb(tmp_path)
    import_archive(here, bare, embedder_for=hash_embedder_for)
    text_pdf(here.files_dir / "new.pdf", ["The new note says the flux is 42 units."])
    build(here)
    records = {m.file: m for m in open_store(here).manifest()}
    assert records["new.pdf"].status == "indexed"
    assert records["widget.pdf"].detached and records["widget.pdf"].status == "unchanged"  # kept, not removed
    (here.files_dir / "widget.pdf").write_bytes((source.files_dir / "widget.pdf").read_bytes())
    embedder = CountingEmbedder()
    sync(here, embedder, parser=PlainParser())
    widget = next(m for m in open_store(here).manifest() if m.file == "widget.pdf")
    assert not widget.detached and embedder.documents == 0  # its PDF came: a file like another, nothing re-read


def test_an_export_leaves_out_a_pdf_changed_since_it_was_indexed(tmp_path: Path) -> None:
    settings = kb(tmp_path)
    manual_pdf(settings.files_dir / "widget.pdf", topic="widget")
    manual_pdf(settings.files_dir / "gadget.pdf", topic="gadget")
    build(settings)
    manual_pdf(settings.files_dir / "gadget.pdf", topic="gadget", pages=3)
    out = export_archive(settings, tmp_path / "kb.crag", with_files=True)
    assert out.pdfs == 1 and out.left_out and "gadget.pdf: changed since it was indexed" in out.left_out[0]
    names = zipfile.ZipFile(tmp_path / "kb.crag").namelist()
    assert "files/widget.pdf" in names and "files/gadget.pdf" not in names


def test_nothing_to_export_says_to_build_first(tmp_path: Path) -> None:
    with pytest.raises(ArchiveRefused, match="not built yet"):
        export_archive(kb(tmp_path), tmp_path / "kb.crag")
    assert not (tmp_path / "kb.crag").exists()


# ---------------------------------------------------------------------------------------------
# Refusals


def rezip(src: Path, dst: Path, change: Callable[[dict[str, bytes], dict], None], extra: list | None = None) -> Path:
    """A copy of the archive with its members changed by ``change(members, manifest)``; ``extra``: (ZipInfo, bytes)
    entries added as they are."""
    with zipfile.ZipFile(src) as zf:
        members = {name: zf.read(name) for name in zf.namelist()}
    manifest = json.loads(members.pop(MANIFEST))
    change(members, manifest)
    with zipfile.ZipFile(dst, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        zf.writestr(MANIFEST, json.dumps(manifest))
        for info, data in extra or ():
            zf.writestr(info, data)
    return dst


def relisted(members: dict[str, bytes], manifest: dict) -> None:
    """The manifest made to agree with the members again: sizes and hashes recomputed, as a careful forger would."""
    import hashlib

    for member in manifest["members"]:
        data = members[member["name"]]
        member["size"], member["sha256"] = len(data), hashlib.sha256(data).hexdigest()


def a_byte_changed(members: dict[str, bytes], manifest: dict) -> None:
    data = bytearray(members["index/chunks.jsonl"])
    data[40] ^= 1
    members["index/chunks.jsonl"] = bytes(data)


def a_newer_version(members: dict[str, bytes], manifest: dict) -> None:
    manifest["version"] = 99


def vectors_cut(members: dict[str, bytes], manifest: dict) -> None:
    import numpy as np

    vectors = np.load(io.BytesIO(members["index/vectors.npy"]))
    out = io.BytesIO()
    np.save(out, vectors[:-1])
    members["index/vectors.npy"] = out.getvalue()
    relisted(members, manifest)


def an_unlisted_member(members: dict[str, bytes], manifest: dict) -> None:
    members["index/notes.txt"] = b"not listed"


def a_size_that_differs(members: dict[str, bytes], manifest: dict) -> None:
    manifest["members"][0]["size"] += 1


def unchanged(members: dict[str, bytes], manifest: dict) -> None:
    pass


def link_info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


def a_record_outside_the_folder(members: dict[str, bytes], manifest: dict) -> None:
    """A file of the index renamed "../widget.pdf" in its record and its passages, the hashes made to agree: placing
    or syncing it would reach a file beside the files folder."""
    records = json.loads(members["index/manifest.json"])
    name = next(r["file"] for r in records if r["status"] == "indexed")
    for r in records:
        r["file"] = "../widget.pdf" if r["file"] == name else r["file"]
    members["index/manifest.json"] = json.dumps(records).encode()
    lines = [json.loads(line) for line in members["index/chunks.jsonl"].decode().splitlines()]
    for c in lines:
        c["file"] = "../widget.pdf" if c["file"] == name else c["file"]
    members["index/chunks.jsonl"] = "".join(json.dumps(c) + "\n" for c in lines).encode()
    relisted(members, manifest)


REFUSALS = {
    "a record outside the folder": (a_record_outside_the_folder, None, "outside the files folder"),
    "a byte changed": (a_byte_changed, None, "does not match its hash"),
    "a newer format": (a_newer_version, None, "newer version of this app"),
    "vectors cut, hashes redone": (vectors_cut, None, "its parts disagree"),
    "a member not listed": (an_unlisted_member, None, "its members and its manifest disagree"),
    "a size that differs": (a_size_that_differs, None, "bytes, not the"),
    "a path that climbs out": (unchanged, [(zipfile.ZipInfo("files/../../evil.pdf"), b"x")], "would leave the folder"),
    "an absolute path": (unchanged, [(zipfile.ZipInfo("/tmp/evil.pdf"), b"x")], "would leave the folder"),
    "a link": (unchanged, [(link_info("files/link.pdf"), b"/etc/passwd")], "a link or a folder entry"),
}


@pytest.fixture
def answering(tmp_path: Path) -> Settings:
    """A knowledge base of its own, built: what a refused import must leave answering."""
    here = kb(tmp_path / "here")
    manual_pdf(here.files_dir / "sprocket.pdf", topic="sprocket")
    build(here)
    return here


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_tampered_or_unsafe_archive_is_refused_and_the_old_index_still_answers(
    case: str, exported: tuple[Settings, Path, Path], answering: Settings, tmp_path: Path
) -> None:
    change, extra, reason = REFUSALS[case]
    _, _, whole = exported
    before, generation = answers(answering), open_store(answering).active()
    archive = rezip(whole, tmp_path / "tampered.crag", change, extra)
    with pytest.raises(ArchiveRefused, match=reason) as refused:
        import_archive(answering, archive, embedder_for=hash_embedder_for)
    assert "still does" in str(refused.value)
    assert open_store(answering).active() == generation and answers(answering) == before
    assert leftovers(answering) == []
    assert sorted(p.name for p in answering.files_dir.iterdir()) == ["sprocket.pdf"]  # no PDF placed
    assert not (tmp_path / "evil.pdf").exists() and not Path("/tmp/evil.pdf").exists()


def test_a_truncated_archive_is_refused(
    exported: tuple[Settings, Path, Path], answering: Settings, tmp_path: Path
) -> None:
    _, bare, _ = exported
    cut = tmp_path / "cut.crag"
    cut.write_bytes(bare.read_bytes()[: bare.stat().st_size // 2])
    before = answers(answering)
    with pytest.raises(ArchiveRefused, match="not a whole .crag archive"):
        import_archive(answering, cut, embedder_for=hash_embedder_for)
    assert answers(answering) == before and leftovers(answering) == []


def test_an_archive_of_another_embedder_is_refused(exported: tuple[Settings, Path, Path], answering: Settings) -> None:
    _, bare, _ = exported
    before = answers(answering)
    with pytest.raises(ArchiveRefused, match="fake:hash embeddings, which this installation does not have"):
        import_archive(answering, bare, embedder_for=lambda settings, name: None)

    def unavailable(settings: Settings, name: str):
        raise EmbedderUnavailable("Ollama is not reachable at http://127.0.0.1:9.", name)

    with pytest.raises(ArchiveRefused, match="cannot be used here now: Ollama is not reachable"):
        import_archive(answering, bare, embedder_for=unavailable)
    assert answers(answering) == before and leftovers(answering) == []


def test_a_disk_that_fills_during_the_import_leaves_nothing_half_written(
    exported: tuple[Settings, Path, Path], answering: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crag.store import IndexInaccessible
    from crag.store.common import blocked_is_said
    from crag.store.generation import GenerationWriter

    _, _, whole = exported
    before = answers(answering)

    def full(self, chunks, embeddings):
        with blocked_is_said(self.store.where):
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(GenerationWriter, "add", full)
    with pytest.raises(IndexInaccessible, match="disk is full"):
        import_archive(answering, whole, embedder_for=hash_embedder_for)
    monkeypatch.undo()
    assert answers(answering) == before and leftovers(answering) == []
    assert sorted(p.name for p in answering.files_dir.iterdir()) == ["sprocket.pdf"]


def test_a_pdf_that_cannot_be_placed_refuses_the_import_and_nothing_is_committed(
    exported: tuple[Settings, Path, Path], answering: Settings
) -> None:
    """A file where a folder of the archive's PDFs must go: the import is refused before it commits, the PDFs it put
    already are taken back, and the next sync finds the knowledge base that answered."""
    _, _, whole = exported
    before, generation = answers(answering), open_store(answering).active()
    (answering.files_dir / "projects").write_text("not a folder")
    with pytest.raises(ArchiveRefused, match="cannot be put into"):
        import_archive(answering, whole, embedder_for=hash_embedder_for)
    assert open_store(answering).active() == generation and answers(answering) == before
    assert sorted(p.name for p in answering.files_dir.iterdir()) == ["projects", "sprocket.pdf"]
    assert leftovers(answering) == []


def test_the_archive_lists_every_member_with_its_hash(exported: tuple[Settings, Path, Path]) -> None:
    settings, _, whole = exported
    with zipfile.ZipFile(whole) as zf:
        manifest = json.loads(zf.read(MANIFEST))
        listed = {m["name"]: m for m in manifest["members"]}
        assert set(listed) == set(zf.namelist()) - {MANIFEST}
        for name, member in listed.items():
            assert zf.getinfo(name).file_size == member["size"]
    assert manifest["format"] == "crag-archive" and manifest["generation"]["embedder"] == "fake:hash"
    assert manifest["generation"]["chunking"]["chunker"]  # the chunker's version travels
    assert listed["files/widget.pdf"]["sha256"] == sha256_of(settings.files_dir / "widget.pdf")
    assert {m["kind"] for m in listed.values()} == {"chunks", "vectors", "records", "lexical", "pdf"}
    assert os.path.getsize(whole) > 0


# ---------------------------------------------------------------------------------------------
# The command line


@pytest.mark.integration
def test_the_command_line_exports_and_imports_with_the_packaged_embedder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], closed_port_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crag.cli import main
    from crag.models import local_embedder

    monkeypatch.setenv("CRAG_OLLAMA_URL", closed_port_url)
    source = kb(tmp_path / "source")
    manual_pdf(source.files_dir / "widget.pdf", topic="widget")
    sync(source, local_embedder(source), parser=PlainParser())
    archive = tmp_path / "kb.crag"
    where = ["--files", str(source.files_dir), "--db", str(source.chroma_dir)]
    assert main(["export", str(archive), "--with-files", *where]) == 0
    assert "Wrote" in capsys.readouterr().out
    assert main(["export", str(archive), *where]) == 2  # never over a file unasked
    assert "add --force" in capsys.readouterr().err

    target = tmp_path / "target"
    (target / "Files").mkdir(parents=True)
    here = ["--files", str(target / "Files"), "--db", str(target / "db")]
    assert main(["import", str(archive), *here]) == 0
    out = capsys.readouterr().out
    assert "Imported kb.crag: 1 files" in out and "1 PDFs put into" in out
    assert (target / "Files" / "widget.pdf").read_bytes() == (source.files_dir / "widget.pdf").read_bytes()
    assert (
        main(["retrieve", "How many processor cores does the widget need?", "--json", "--db", str(target / "db")]) == 0
    )
    assert json.loads(capsys.readouterr().out)["results"][0]["file"] == "widget.pdf"


def test_the_command_line_says_why_an_import_is_refused(
    exported: tuple[Settings, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from crag.cli import main

    _, bare, _ = exported  # built with the tests' hashing embedder, which no installation has
    here = ["--files", str(tmp_path / "Files"), "--db", str(tmp_path / "db")]
    assert main(["import", str(bare), *here]) == 2
    err = capsys.readouterr().err
    assert "kb.crag was not imported: it was built with fake:hash embeddings" in err
    assert main(["import", str(tmp_path / "missing.crag"), *here]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_the_ratings_of_a_knowledge_base_travel_with_it(tmp_path: Path) -> None:
    """Rated answers are the user's own test set of this knowledge base: exported with it, imported with it."""
    source = kb(tmp_path / "source")
    manual_pdf(source.files_dir / "widget.pdf")
    build(source)
    answer = pipeline_over(source, HashEmbedder()).ask(QUESTIONS[0], web=False)
    chats = Conversations(chats_file(source))
    answer_id = chats.record(QUESTIONS[0], [], answer)
    chats.rate_answer(answer_id, Rating.DOWN, [Wrong.BADGE], "not this page")
    private = tmp_path / "without.crag"
    assert export_archive(source, private).ratings == 0, "a user's questions leave only when asked to"
    with zipfile.ZipFile(private) as zf:
        assert not [n for n in zf.namelist() if n.startswith("feedback/")]
    archive = tmp_path / "kb.crag"
    assert export_archive(source, archive, with_ratings=True).ratings == 1
    here = kb(tmp_path / "here")
    imported = import_archive(here, archive, embedder_for=hash_embedder_for)
    assert any("1 rating(s)" in note for note in imported.notes)
    [label] = Conversations(chats_file(here)).labels(None)
    assert (label.answer_id, label.rating, label.wrong, label.note) == (answer_id, "down", ("badge",), "not this page")
    assert label.answered.question == QUESTIONS[0]
