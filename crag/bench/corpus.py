"""The benchmark corpus: thirteen public PDFs taken from Debian packages, fetched once and cached.

Debian packages are used as the source because they are versioned, mirrored, and reachable through
``apt-get`` on machines whose only network access is a Debian mirror. ``questions.jsonl`` cites page
indices of exactly these builds, so each entry records the page count and hash it was written against.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CORPUS", "CorpusFile", "default_cache_dir", "fetch_corpus"]


@dataclass(frozen=True, kw_only=True)
class CorpusFile:
    """One PDF of the corpus and where it comes from."""

    package: str
    """Debian package that ships the file."""
    member: str
    """Path of the file inside the package (``dpkg -c``); a ``.gz`` twin is accepted too."""
    lang: str
    pages: int
    """Page count of the build the questions were written against."""
    sha256: str
    """Hash of that build (Debian bookworm); another build may move answers to other pages."""
    title: str
    split: str = "dev"
    """``dev``: questions on it may be used while tuning; ``test``: held out for the final measurement;
    ``holdout``: a later, fresh measurement (``holdout.jsonl``), written by someone who never ran the app;
    ``first``: a newcomer's first manual, asked only by the first questions (``first.jsonl``);
    ``newcomer``: a long manual nobody here had used, asked only by ``newcomer.jsonl``."""


CORPUS: dict[str, CorpusFile] = {
    "R-FAQ.pdf": CorpusFile(
        package="r-doc-pdf",
        member="usr/share/R/doc/manual/R-FAQ.pdf",
        lang="en",
        pages=52,
        sha256="de8768520d4fb90dad64c28483ffb92dca7dd9d8dc8556905b35c2e62a939255",
        title="R FAQ: Frequently Asked Questions on R (version 2022-09-08)",
    ),
    "R-data.pdf": CorpusFile(
        package="r-doc-pdf",
        member="usr/share/R/doc/manual/R-data.pdf",
        lang="en",
        pages=41,
        sha256="9381a39ffeb8545a745c2618ba955b4ae4e10b9c8373cd5bc1984fff8318f8ca",
        title="R Data Import/Export (R 4.2.2 Patched)",
    ),
    # Shipped by texlive-lang-chinese itself (not a -doc package), uncompressed, under texlive-doc.
    "ctex-faq.pdf": CorpusFile(
        package="texlive-lang-chinese",
        member="usr/share/doc/texlive-doc/latex/ctex-faq/ctex-faq.pdf",
        lang="zh",
        pages=41,
        sha256="99a72a3158ced551d516d926fa27c69606a1b02366aeaa79d376a8d60fae3fb2",
        title="CTeX FAQ 常见问题集 v0.4 beta",
    ),
    # The test documents: other topics than R and the CTeX FAQ, two in English and two in Chinese.
    # debian-faq and bzip2-doc ship their PDFs gzipped (``.pdf.gz``); _install unzips them.
    "debian-faq.en.pdf": CorpusFile(
        package="debian-faq",
        member="usr/share/doc/debian/FAQ/debian-faq.en.pdf",
        lang="en",
        pages=73,
        sha256="ea67ca925863324d97a30b5c926aed95efc687c689aa16788c9bed54525c0b47",
        title="The Debian GNU/Linux FAQ (May 31, 2022)",
        split="test",
    ),
    "bzip2-manual.pdf": CorpusFile(
        package="bzip2-doc",
        member="usr/share/doc/bzip2/manual.pdf",
        lang="en",
        pages=38,
        sha256="1dd1f12b3dcb0894481708881ed8d052c769f3820c06839c702c8cfad973d7d3",
        title="bzip2 and libbzip2, version 1.0.8: A program and library for data compression",
        split="test",
    ),
    "maint-guide.zh-cn.pdf": CorpusFile(
        package="maint-guide-zh-cn",
        member="usr/share/doc/maint-guide-zh-cn/maint-guide.zh-cn.pdf",
        lang="zh",
        pages=63,
        sha256="6e3d3247fc675e6678d59663f886472ef7369c82c69036eb631d3651a4913709",
        title="Debian 新维护者手册 (Debian New Maintainers' Guide, 1.2.53)",
        split="test",
    ),
    "asymptote-faq-zh-cn.pdf": CorpusFile(
        package="texlive-lang-chinese",
        member="usr/share/doc/texlive-doc/support/asymptote-faq-zh-cn/asymptote-faq-zh-cn.pdf",
        lang="zh",
        pages=26,
        sha256="4e73c77b7d298930de121ce9e7dabcc2fc07d7140fac7d4d98e620f1d80920e2",
        title="Asymptote 中的常见问题（FAQ）",
        split="test",
    ),
    # The holdout documents: the held-out set of ``holdout.jsonl`` asks about them, in a knowledge base of all nine.
    "R-lang.pdf": CorpusFile(
        package="r-doc-pdf",
        member="usr/share/R/doc/manual/R-lang.pdf",
        lang="en",
        pages=69,
        sha256="4a6120ba505021d7c208078b575fe3f5d5dc91636dcf17de8a4208adda90d7dc",
        title="R Language Definition (R 4.2.2 Patched)",
        split="holdout",
    ),
    "texlive-zh-cn.pdf": CorpusFile(
        package="texlive-lang-chinese",
        member="usr/share/doc/texlive-doc/texlive/texlive-zh-cn/texlive-zh-cn.pdf",
        lang="zh",
        pages=45,
        sha256="1bee53943ad19bfc5889dcc19f29db1f502172129f79d7be24e0cd7a55a32f26",
        title="TeX Live 指南—2020",
        split="holdout",
    ),
    # A newcomer's first manuals: only the first questions (``first.jsonl``) ask about them, and no knowledge base of
    # the dev, test or holdout benchmarks holds them.
    "R-intro.pdf": CorpusFile(
        package="r-doc-pdf",
        member="usr/share/R/doc/manual/R-intro.pdf",
        lang="en",
        pages=113,
        sha256="337ccd0b490b1e66f7e783b45f4588d0599730b4206c0c051edfe1419c568c51",
        title="An Introduction to R (R 4.2.2 Patched)",
        split="first",
    ),
    "lshort-zh-cn.pdf": CorpusFile(
        package="texlive-lang-chinese",
        member="usr/share/doc/texlive-doc/latex/lshort-chinese/lshort-zh-cn.pdf",
        lang="zh",
        pages=139,
        sha256="4f6b11c04054fcdbb23d6d3c8527b145d27c21abb9efa7e57f96be2b7def484c",
        title="一份（不太）简短的 LaTeX2ε 介绍 (lshort-zh-cn 6.03)",
        split="first",
    ),
    # Two long manuals nobody here had used before: only the newcomer questions (``newcomer.jsonl``) ask about them,
    # in a knowledge base that also holds the dev and test documents as distractors.
    "gnuplot.pdf": CorpusFile(
        package="gnuplot-doc",
        member="usr/share/doc/gnuplot/gnuplot.pdf",
        lang="en",
        pages=311,
        sha256="df68dd0613f043141512fc4436d17aaf96727d5a758d85233915ac5056a97206",
        title="gnuplot 5.4: An Interactive Plotting Program",
        split="newcomer",
    ),
    "ctex.pdf": CorpusFile(
        package="texlive-lang-chinese",
        member="usr/share/doc/texlive-doc/latex/ctex/ctex.pdf",
        lang="zh",
        pages=175,
        sha256="372421fadf1a7cc053f129e89ab53800c80643865498e4b0b297fc180e21e5d7",
        title="CTEX 宏集手册 v2.5.10 (2022/07/14)",
        split="newcomer",
    ),
}

_HINT = "The benchmark corpus is fetched with apt-get download and dpkg -x, so it needs a Debian-based system."


def default_cache_dir() -> Path:
    """``$CRAG_BENCH_CACHE``, else ``~/.cache/crag-bench``."""
    env = os.environ.get("CRAG_BENCH_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "crag-bench"


def fetch_corpus(cache_dir: Path, splits: tuple[str, ...] = ("dev", "test")) -> dict[str, Path]:
    """Return ``{file name: path}`` for the corpus PDFs of ``splits``, downloading the packages only when one is
    missing. The holdout, first and newcomer documents come only when asked for: every other benchmark and test is
    on dev and test."""
    pdf_dir = Path(cache_dir) / "pdfs"
    paths = {name: pdf_dir / name for name, entry in CORPUS.items() if entry.split in splits}
    missing = [name for name, path in paths.items() if not path.is_file()]
    if not missing:
        return paths

    pdf_dir.mkdir(parents=True, exist_ok=True)
    packages = sorted({CORPUS[name].package for name in missing})
    # The temporary tree lives inside the cache so os.replace stays on one file system and a crash
    # leaves nothing in /tmp; it is removed with the .deb files and the extracted packages.
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".fetch-") as tmp:
        work = Path(tmp)
        _apt_download(packages, work)
        for deb in work.glob("*.deb"):
            tree = work / deb.stem
            _run(["dpkg", "-x", str(deb), str(tree)], f"dpkg -x {deb.name}")
        for name in missing:
            _install(name, _find_member(work, CORPUS[name]), paths[name])
    return paths


def _apt_download(packages: list[str], cwd: Path) -> None:
    try:
        _run(["apt-get", "download", *packages], "apt-get download " + " ".join(packages), cwd=cwd)
    except RuntimeError as first:
        if not _lists_look_empty(str(first)):
            raise
        # A fresh container often has no package lists; one update is enough, and needs root.
        _run(["apt-get", "update"], "apt-get update (package lists were empty)")
        _run(["apt-get", "download", *packages], "apt-get download " + " ".join(packages), cwd=cwd)


def _lists_look_empty(message: str) -> bool:
    lists = Path("/var/lib/apt/lists")
    has_lists = lists.is_dir() and any("_Packages" in p.name for p in lists.iterdir())
    unknown = any(s in message for s in ("Unable to locate package", "no installation candidate", "Can't select"))
    return unknown or not has_lists


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> None:
    try:
        # Output is captured so a successful fetch stays quiet; it is shown only when something fails.
        subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True)
    except FileNotFoundError as exc:
        raise RuntimeError(f"{what} failed: {cmd[0]} is not installed. {_HINT}") from exc
    except subprocess.CalledProcessError as exc:
        tail = (exc.stderr or exc.stdout or "").strip()[-1500:]
        raise RuntimeError(f"{what} failed (exit {exc.returncode}): {tail}\n{_HINT}") from exc


def _find_member(root: Path, entry: CorpusFile) -> Path:
    # Look for the exact member first, then anywhere in the extracted trees, because other Debian
    # releases move documentation around and sometimes gzip it.
    name = Path(entry.member).name
    exact = [tree / entry.member for tree in root.iterdir() if tree.is_dir()]
    candidates = [
        *exact,
        *(p.with_name(p.name + ".gz") for p in exact),
        *sorted(root.rglob(name)),
        *sorted(root.rglob(name + ".gz")),
    ]
    for path in candidates:
        # Symlinks in packages may point outside the extracted tree (to /usr/share/...), so only
        # regular files count.
        if path.is_file() and not path.is_symlink():
            return path
    raise RuntimeError(
        f"{name} was not found in Debian package {entry.package}: "
        "this Debian release may ship it elsewhere or not at all."
    )


def _install(name: str, src: Path, dest: Path) -> None:
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            if src.suffix == ".gz":
                with gzip.open(src, "rb") as inp:
                    shutil.copyfileobj(inp, out)
            else:
                with src.open("rb") as inp:
                    shutil.copyfileobj(inp, out)
        # mkstemp creates the file private (0600); the cache is meant to be shared like any download.
        tmp.chmod(0o644)
        _check(name, tmp)
        # Readers never see a half-written or wrong PDF: the name appears only once it has been checked.
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _check(name: str, path: Path) -> None:
    # Imported here so that the cached path of fetch_corpus does not pay for loading MuPDF.
    from crag.ingest.pymupdf import page_sizes

    entry = CORPUS[name]
    try:
        pages = len(page_sizes(path))
    except Exception as exc:  # noqa: BLE001 - any parse failure means the same thing: not a usable PDF
        raise RuntimeError(f"{name} from {entry.package} is not a readable PDF: {exc}") from exc
    if pages != entry.pages:
        raise RuntimeError(
            f"{name} from {entry.package} has {pages} pages, the question set expects {entry.pages}: "
            "this Debian release ships another edition, so the expected page numbers would be wrong."
        )
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != entry.sha256:
        # Same page count but another build (e.g. a rebuild with new timestamps) usually keeps the
        # pages in place, so this is worth a warning but not a refusal.
        warnings.warn(f"{name} differs from the build the questions were checked against", stacklevel=4)
