"""Saving uploaded PDFs into the files folder, safely, and moving files out of it.

An upload's name comes from the user's browser: only its last path part is kept, reduced to safe
characters (letters of any script, CJK included, digits and a little punctuation), and given a
``.pdf`` suffix. The content must look like a PDF and stay under a size limit. An existing file is
never overwritten: a different file with the same name gets `` (2)``, `` (3)``..., and a file whose
content is already in the folder is reported as present instead of being saved twice (``sync``
would index it only once anyway).

A file removed in the app is moved into the folder's hidden ``.removed`` folder, never deleted: the next
build drops its passages, and moving it back brings them back.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
import unicodedata
from pathlib import Path

from crag.errors import CragError
from crag.files import REMOVED, scan
from crag.scope import TOP_LEVEL

# The default upload limit (the app passes CRAG_MAX_UPLOAD_MB). Bigger PDFs can be copied into the folder by hand.
MAX_UPLOAD_BYTES = 50 * 1024 * 1024

NO_HARD_LINKS = {errno.EPERM, errno.EXDEV, errno.EMLINK, errno.EOPNOTSUPP}  # the filesystem cannot link: rename

# Bytes, not characters: Linux file names are limited to 255 bytes, and a CJK letter takes three.
MAX_STEM_BYTES = 180
UNSAFE = re.compile(r"[^\w\s.,()+\-（）【】《》、]", flags=re.UNICODE)
RUNS = re.compile(r"[\s_]*_[\s_]*|\s+")


class UploadRejected(CragError):
    """An upload that is not saved. The message says why and what to do."""


class AlreadyPresent(UploadRejected):
    """The same content is already in the files folder, at ``path``."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


def safe_name(name: str) -> str:
    """A file name that is safe to create in the files folder: basename only, safe characters, ``.pdf``."""
    base = re.split(r"[/\\]", name.replace("\x00", ""))[-1]
    base = unicodedata.normalize("NFC", re.sub(r"[\t\r\n]", " ", base))
    base = "".join(c for c in base if unicodedata.category(c)[0] != "C")  # control and format characters
    stem = base[:-4] if base.lower().endswith(".pdf") else base
    stem = UNSAFE.sub("_", stem)
    stem = RUNS.sub(lambda m: "_" if "_" in m.group() else " ", stem)
    # No hidden files (sync skips them), no names that look like options, no trailing dots or spaces.
    stem = stem.strip(" ._-")
    while len(stem.encode("utf-8")) > MAX_STEM_BYTES:
        stem = stem[:-1]
    stem = stem.rstrip(" ._-")
    return f"{stem or 'document'}.pdf"


def _numbered(name: str, n: int) -> str:
    return name if n == 1 else f"{name[:-4]} ({n}).pdf"


def _same_content(path: Path, size: int, digest: str) -> bool:
    try:
        if path.stat().st_size != size:
            return False
        return hashlib.sha256(path.read_bytes()).hexdigest() == digest
    except OSError:
        return False


def _size(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MB" if n >= 1024 * 1024 else f"{n / 1024:.0f} KB"


def save_upload(files_dir: Path, name: str, data: bytes, max_bytes: int = MAX_UPLOAD_BYTES, folder: str = "") -> Path:
    """Save one uploaded PDF into ``folder`` (a path made by ``make_folder``; "" for the top) of ``files_dir`` and
    return its path.

    Raises ``UploadRejected`` for content that is not a PDF, empty or too large, and ``AlreadyPresent``
    when the files folder, any of its folders, already holds a file with the same content: a build indexes one
    copy only, so a second copy in another folder would stay out of that folder's answers.
    """
    target = safe_name(name)
    shown = name.strip() or target
    if not data:
        raise UploadRejected(f"{shown}: the file is empty (0 bytes). Upload the real PDF.")
    if len(data) > max_bytes:
        raise UploadRejected(
            f"{shown}: {_size(len(data))} is over the {_size(max_bytes)} upload limit. "
            f"Copy it into {files_dir} by hand instead, then rebuild."
        )
    # The PDF header may follow a little junk; readers (and our parser) look in the first 1024 bytes.
    if b"%PDF-" not in data[:1024]:
        raise UploadRejected(f"{shown}: not a PDF (no PDF header). Only PDF files can be added; convert it first.")

    digest = hashlib.sha256(data).hexdigest()
    for existing in scan(files_dir):  # a removed file uploaded again is saved again
        if _same_content(existing, len(data), digest):
            where = existing.relative_to(files_dir).as_posix()
            raise AlreadyPresent(f"{shown} is already in the knowledge base folder, as {where}.", existing)
    files_dir = files_dir / folder if folder else files_dir
    files_dir.mkdir(parents=True, exist_ok=True)

    # Written under a hidden name (sync ignores hidden files), then linked to its final name:
    # the link fails if the name was taken meanwhile, so nothing is ever overwritten.
    tmp = files_dir / f".upload-{secrets.token_hex(6)}.tmp"
    try:
        with tmp.open("xb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        for n in range(1, 1000):
            final = files_dir / _numbered(target, n)
            if final.exists():
                continue
            try:
                os.link(tmp, final)
            except FileExistsError:
                continue
            except OSError:  # a filesystem without hard links: exclusive creation never overwrites either
                try:
                    with final.open("xb") as fh:
                        fh.write(data)
                except FileExistsError:
                    continue
            return final
        raise UploadRejected(f"{shown}: too many files named {target} already; rename it and upload again.")
    except OSError as exc:
        raise UploadRejected(f"{shown}: could not be saved into {files_dir} ({exc.strerror or exc}).") from None
    finally:
        tmp.unlink(missing_ok=True)


def make_folder(files_dir: Path, name: str) -> str:
    """Make a folder (a knowledge base) in the files folder; nested names (``projects/alpha``) make each level.
    Returns its path relative to the files folder. Raises ``UploadRejected`` for a name that leaves the folder, is
    hidden (builds skip hidden folders) or has characters a file name cannot hold safely."""
    parts = [p.strip() for p in name.replace("\\", "/").split("/") if p.strip()]
    if not parts:
        raise UploadRejected("Give the new folder a name, such as projects or courses/biology.")
    if name.strip() == TOP_LEVEL:
        raise UploadRejected(f"“{TOP_LEVEL}” names the PDFs directly in the files folder: choose another name.")
    for part in parts:
        if part in (".", "..") or part.startswith(".") or UNSAFE.search(part) or len(part.encode()) > MAX_STEM_BYTES:
            raise UploadRejected(
                f"“{name[:200]}” cannot be a folder name: use letters, digits, spaces and - _ ( ), with / between "
                "nested folders, and no leading dot (hidden folders are not indexed)."
            )
    folder = files_dir.joinpath(*parts)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UploadRejected(f"The folder {folder} could not be made ({exc.strerror or exc}).") from None
    return "/".join(parts)


def remove_file(files_dir: Path, name: str) -> Path:
    """Move ``name`` (a path relative to the folder, as builds list it) to the same place under the folder's
    ``.removed`` folder and return where it went. A file of that name there already is kept: this one is
    numbered."""
    source = files_dir / name
    if not (source.is_file() and source in scan(files_dir)):
        raise CragError(f"{name} is not in {files_dir} any more: nothing to remove.")
    trash = (files_dir / REMOVED / name).parent
    try:
        trash.mkdir(parents=True, exist_ok=True)
        for n in range(1, 1000):
            target = trash / (source.name if n == 1 else f"{source.stem} ({n}){source.suffix}")
            try:
                _move(source, target)
            except FileExistsError:
                continue
            return target
    except OSError as exc:
        raise CragError(f"{name} could not be moved into {trash} ({exc.strerror or exc}).") from None
    raise CragError(f"{trash} holds too many files named {source.name}: empty it, then remove {name} again.")


def _move(source: Path, target: Path) -> None:
    """Move a file, never over another: raises ``FileExistsError`` when ``target`` is taken."""
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in NO_HARD_LINKS:
            raise
        if target.exists():  # a filesystem without hard links: rename, which would replace it
            raise FileExistsError(target) from None
        source.rename(target)
        return
    source.unlink()
