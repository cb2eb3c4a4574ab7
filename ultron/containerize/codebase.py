"""What a code base is to ultron: its files (:func:`code_files`) and its hash (:func:`code_hash`).

The hash names everything built from a code base (its environment, its image) and keys the
score cache: the same files give the same hash in every run and on every machine.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from ultron.errors import CodeBaseError
from ultron.spec.archive_rules import ARCHIVE_SUFFIXES

__all__ = ["ARCHIVE_SUFFIXES", "PROJECT_FILES", "code_files", "code_hash", "ignored"]

PROJECT_FILES = ("pyproject.toml", "setup.py")
_BUILD_OUTPUTS = frozenset({"build", "dist"})
_JUNK = frozenset({"__pycache__", ".git"})  # .git is a file in git worktrees
_CHUNK = 1 << 20


def code_hash(path: str | Path) -> str:
    """Return the sha256 (hex) of a code base, the same in every run and on every machine.

    A folder is hashed over its sorted relative paths and the bytes of each file (a symlink
    contributes its target as text); ``__pycache__``, ``*.pyc``, ``*.egg-info``, hidden folders
    (``.git``, ``.venv``, caches) and the ``build``/``dist`` folders beside a setup.py or
    pyproject.toml are left out. An archive (``.tar``, ``.tar.gz``, ...) is hashed over its bytes.

    Args:
        path: a project folder or an archive of one (:data:`ARCHIVE_SUFFIXES`).

    Raises:
        CodeBaseError: the path is neither a folder nor such an archive.
    """
    source = Path(path)
    digest = hashlib.sha256()
    if source.is_file() and source.name.endswith(ARCHIVE_SUFFIXES):
        digest.update(b"ultron-code-hash/1 archive\0")
        _update_with_file(digest, source)
        return digest.hexdigest()
    if not source.is_dir():
        state = "a file" if source.exists() else "missing"
        raise CodeBaseError(
            f"code is {str(source)!r} ({state}); it must be a project folder or a "
            f"{'/'.join(ARCHIVE_SUFFIXES)} archive of one. Fix: pass the folder that holds "
            "setup.py or pyproject.toml, or `tar -czf code.tar.gz -C <parent> <folder>`"
        )
    digest.update(b"ultron-code-hash/1 folder\0")
    for relative in _walk(source):
        full = source / relative
        if full.is_symlink():
            target = os.fsencode(os.readlink(full))
            digest.update(b"link\0%s\0%d\0%s" % (os.fsencode(relative), len(target), target))
        else:
            size = full.stat().st_size
            digest.update(b"file\0%s\0%d\0" % (os.fsencode(relative), size))
            _update_with_file(digest, full)
    return digest.hexdigest()


def _update_with_file(digest: Any, path: Path) -> None:
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)


def ignored(folder: str, names: list[str]) -> set[str]:
    """Names in ``folder`` that are not part of the code base (``shutil.copytree`` ignore)."""
    beside_project = any(name in names for name in PROJECT_FILES)
    skipped = {n for n in names if n in _JUNK or n.endswith((".pyc", ".egg-info"))}
    for name in set(names) - skipped:
        if os.path.isdir(os.path.join(folder, name)) and (
            name.startswith(".") or (beside_project and name in _BUILD_OUTPUTS)
        ):
            skipped.add(name)
    return skipped


def code_files(root: str | Path) -> list[str]:
    """The files of a code base folder that make its :func:`code_hash`, as sorted relative
    POSIX paths (``__pycache__``, hidden folders and build outputs left out)."""
    return _walk(Path(root))


def _walk(root: Path) -> list[str]:
    """Sorted relative POSIX paths of the files and symlinks of a code base folder."""
    found = []
    for folder, dirnames, filenames in os.walk(root):
        skipped = ignored(folder, dirnames + filenames)
        dirnames[:] = [name for name in dirnames if name not in skipped]
        prefix = Path(folder).relative_to(root)
        for name in dirnames + filenames:
            is_link = os.path.islink(os.path.join(folder, name))
            if name not in skipped and (is_link or name in filenames):
                found.append((prefix / name).as_posix())
    return sorted(found)
