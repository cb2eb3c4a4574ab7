"""The object-store side of trial checkpoints: commit, prune and restore (paper V-H).

A checkpoint in the store is ``<remote_url>/<name>/`` holding its files and, written last, a
``_COMMITTED`` marker: JSON with the file list, each file's size (and sha256 when asked for)
and the time. A folder without the marker, or whose files do not match it, is an upload that
did not finish and is never restored. Any fsspec URL works: a folder, ``file://``, ``s3://``.

Example:
    >>> import tempfile
    >>> from ultron.checkpoints.local import mark_complete, new_checkpoint_dir
    >>> local, remote = tempfile.mkdtemp(), tempfile.mkdtemp()
    >>> folder = new_checkpoint_dir(local, 1)
    >>> _ = (folder / "weights.bin").write_bytes(b"0123")
    >>> _ = mark_complete(folder)
    >>> fs, root = remote_fs(remote)
    >>> upload_checkpoint(fs, root, folder)
    >>> restore_latest(remote, tempfile.mkdtemp())
    'epoch-0001'
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from pathlib import Path, PurePosixPath
from typing import Any

from ultron.checkpoints.local import COMPLETE_MARKER, latest_local, mark_complete, natural_key

__all__ = [
    "COMMIT_MARKER",
    "committed_names",
    "listing",
    "prune",
    "remote_fs",
    "restore_latest",
    "upload_checkpoint",
]

logger = logging.getLogger(__name__)

COMMIT_MARKER = "_COMMITTED"
"""Written last into a checkpoint folder in the store: JSON with the file list and sizes."""


def remote_fs(remote_url: str, storage_options: dict[str, Any] | None = None) -> tuple[Any, str]:
    """The fsspec filesystem of ``remote_url`` and the root path in it (no trailing slash)."""
    import fsspec

    try:
        fs, root = fsspec.core.url_to_fs(remote_url, **(storage_options or {}))
    except ImportError as exc:
        raise ImportError(
            f"checkpoint storage {remote_url!r} needs a filesystem that is not installed "
            f"({exc}); for s3:// install the extra: pip install 'ultron-automl[s3]'"
        ) from exc
    return fs, str(root).rstrip("/")


def listing(fs: Any, root: str) -> dict[str, int]:
    """Every file under ``root``, fresh (one listing on S3): path relative to root -> size."""
    fs.invalidate_cache(root)
    try:
        found = fs.find(root, detail=True)
    except FileNotFoundError:
        return {}
    prefix = root + "/"
    return {
        path[len(prefix) :]: int(info.get("size") or 0)
        for path, info in found.items()
        if path.startswith(prefix) and info.get("type") != "directory"
    }


def committed_names(files: dict[str, int]) -> list[str]:
    """Names of the committed checkpoints in a :func:`listing` of the root, oldest first."""
    names = [p.split("/")[0] for p in files if p.count("/") == 1 and p.endswith(COMMIT_MARKER)]
    return sorted(names, key=natural_key)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _make_parents(fs: Any, paths: list[str]) -> None:
    """Local folders need their parents made; an object store has none, and its makedirs
    would try to create the bucket."""
    from fsspec.implementations.local import LocalFileSystem

    if isinstance(fs, LocalFileSystem):
        for parent in {fs._parent(p) for p in paths}:
            fs.makedirs(parent, exist_ok=True)


def _problems(files: dict[str, Any], sizes: dict[str, int]) -> list[str]:
    """How the sizes found differ from a commit marker's file list."""
    problems = []
    for rel, entry in files.items():
        parts = PurePosixPath(rel).parts
        if not parts or PurePosixPath(rel).is_absolute() or ".." in parts or "\\" in rel:
            # A marker read back from the store names files; none may land outside the folder.
            problems.append(f"{rel!r} is not a path inside the checkpoint")
            continue
        size = sizes.get(rel)
        if size is None:
            problems.append(f"{rel} is missing")
        elif size != entry["size"]:
            problems.append(f"{rel} has {size} bytes, not {entry['size']}")
    return problems


def upload_checkpoint(fs: Any, root: str, folder: Path, *, checksums: bool = False) -> None:
    """Upload a complete local checkpoint folder to ``root/<name>/`` and commit it.

    Does nothing if the store already has it committed (an earlier attempt uploaded it, or
    it was restored from there). Leftovers of an upload that never committed are removed
    first. The marker is written only after a listing shows every file with its size.

    Raises:
        OSError: the store failed, or files did not arrive whole (the caller retries).
    """
    name, remote = folder.name, f"{root}/{folder.name}"
    files = {p.relative_to(folder).as_posix(): p for p in folder.rglob("*") if p.is_file()}
    files.pop(COMPLETE_MARKER, None)
    entries: dict[str, dict[str, Any]] = {}
    for rel, path in sorted(files.items()):
        entries[rel] = {"size": path.stat().st_size}
        if checksums:
            entries[rel]["sha256"] = _sha256(path)
    present = listing(fs, remote)
    if COMMIT_MARKER in present:
        return
    if present:
        fs.rm([f"{remote}/{rel}" for rel in present])
    targets = {rel: f"{remote}/{rel}" for rel in entries}
    _make_parents(fs, [*targets.values(), f"{remote}/{COMMIT_MARKER}"])
    if targets:
        fs.put([str(files[rel]) for rel in targets], list(targets.values()))
    problems = _problems(entries, listing(fs, remote))
    if problems:
        raise OSError(f"upload of checkpoint {name} is incomplete: {'; '.join(problems)}")
    marker = {"name": name, "committed_at": time.time(), "files": entries}
    fs.pipe_file(f"{remote}/{COMMIT_MARKER}", json.dumps(marker).encode())


def prune(fs: Any, root: str, *, keep_last: int) -> list[str]:
    """Delete all but the ``keep_last`` newest committed checkpoints; return their names.

    Uncommitted folders are left alone (another syncer may be uploading them). Each marker is
    deleted before the files, so a half-deleted checkpoint is never taken for a whole one.
    """
    old = committed_names(listing(fs, root))[:-keep_last] if keep_last > 0 else []
    for name in old:
        fs.rm_file(f"{root}/{name}/{COMMIT_MARKER}")
        fs.rm(f"{root}/{name}", recursive=True)
    return old


def restore_latest(
    remote_url: str, local_path: str | Path, *, storage_options: dict[str, Any] | None = None
) -> str | None:
    """Put the newest committed checkpoint into ``local_path/<name>/``; return its name.

    Checkpoints without a commit marker, or whose files do not match it (missing, another
    size, another sha256), are skipped with a warning, and the one before is restored. A
    complete local checkpoint at least as new as the newest good one in the store is kept
    without a download. The restored folder gets its ``COMPLETE`` marker.

    Returns:
        The checkpoint's name, or None when there is none, here or in the store.

    Raises:
        OSError: the store cannot be listed or read (the caller decides whether to go on
            without a checkpoint).
    """
    local_path = Path(local_path)
    local = latest_local(local_path)
    fs, root = remote_fs(remote_url, storage_options)
    files = listing(fs, root)
    for name in reversed(committed_names(files)):
        if local is not None and natural_key(local.name) >= natural_key(name):
            break
        sizes = {p[len(name) + 1 :]: s for p, s in files.items() if p.startswith(name + "/")}
        if _download(fs, f"{root}/{name}", sizes, local_path / name):
            logger.info("restored checkpoint %s from %s", name, remote_url)
            return name
    return local.name if local is not None else None


def _download(fs: Any, remote: str, sizes: dict[str, int], target: Path) -> bool:
    """Download and check one committed checkpoint; False (and a warning) if it is broken."""
    try:
        files: dict[str, Any] = dict(json.loads(fs.cat_file(f"{remote}/{COMMIT_MARKER}"))["files"])
        problems = _problems(files, sizes)
    except (ValueError, KeyError, TypeError, FileNotFoundError) as exc:
        problems = [f"unreadable commit marker ({exc!r})"]
    staging = target.with_name(f".restore-{target.name}")
    if not problems:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for rel in files:
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
        try:
            if files:
                fs.get([f"{remote}/{rel}" for rel in files], [str(staging / r) for r in files])
            problems = _problems(files, {r: (staging / r).stat().st_size for r in files})
            problems = problems or [
                f"{rel} has another sha256"
                for rel, entry in files.items()
                if "sha256" in entry and _sha256(staging / rel) != entry["sha256"]
            ]
        except FileNotFoundError as exc:  # pruned while we read it
            problems = [f"gone while downloading ({exc})"]
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    if problems:
        logger.warning("skipping checkpoint %s: %s", remote, "; ".join(problems))
        shutil.rmtree(staging, ignore_errors=True)
        return False
    mark_complete(staging)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return True
