"""Code bases in an object store: ``code: s3://bucket/path/model.tar.gz`` (any fsspec URL).

:func:`fetch_code` downloads such an archive into ``<ULTRON_HOME>/code/<sha256>.tar.gz``, a
name made from its content (never from the URL), refusing one larger than
``ULTRON_ARCHIVE_MAX_BYTES``; the environment built from it is then cached by that content hash
like any local archive, and the archive is checked like one when it is extracted
(:func:`ultron.containerize.archive.safe_extract`). A second fetch of an object whose size and
ETag (or modification time) did not change reads nothing but its metadata.

:func:`upload_code` is the other side, for ``ultron submit``: it packs a local code base
folder into a reproducible ``.tar.gz`` (sorted, no times, no owners) and puts it at
``<storage>/code/<code hash>.tar.gz``; an unchanged code base is already there and is not
uploaded again.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ultron.containerize.codebase import code_files, code_hash
from ultron.errors import CodeBaseError
from ultron.preflight import mask_url
from ultron.settings import settings

__all__ = ["fetch_code", "pack_code", "upload_code", "upload_file"]

_CHUNK = 1 << 20


def _filesystem(url: str) -> tuple[Any, str]:
    import fsspec

    try:
        return fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise CodeBaseError(
            f"code is {mask_url(url)!r}; reading it needs its fsspec file system ({exc}). "
            "Fix: install the s3 extra (pip install 'ultron-automl[s3]') for s3:// URLs"
        ) from None


def fetch_code(url: str, *, home: Path) -> Path:
    """The code base archive at ``url``, downloaded into ``<home>/code`` (or found there).

    Raises:
        CodeBaseError: the object is missing, unreadable or larger than the archive limit.
    """
    fs, path = _filesystem(url)
    shown = mask_url(url)
    try:
        fs.invalidate_cache(path)  # a cached listing would name an older version's ETag
        info = fs.info(path)
    except FileNotFoundError:
        raise CodeBaseError(
            f"code is {shown!r}, which does not exist. Fix: upload the archive there "
            "(ultron submit does) or correct the URL"
        ) from None
    except OSError as exc:
        raise CodeBaseError(f"code is {shown!r}, which cannot be read ({exc})") from None
    limit = settings().archive_max_bytes
    size = int(info.get("size") or 0)
    if size > limit:
        raise CodeBaseError(
            f"code is {shown!r}, {size} bytes; a code base archive may be at most "
            f"ULTRON_ARCHIVE_MAX_BYTES ({limit}) bytes. Fix: leave data and build outputs out "
            "of the code base, or raise ULTRON_ARCHIVE_MAX_BYTES"
        )
    folder = home / "code"
    index = folder / "index"
    index.mkdir(parents=True, exist_ok=True)
    version = info.get("ETag") or info.get("etag") or info.get("mtime") or info.get("LastModified")
    key = hashlib.sha256(json.dumps([url, size, str(version)]).encode()).hexdigest()
    known = index / key
    if known.is_file():
        cached = folder / f"{known.read_text().strip()}.tar.gz"
        if cached.is_file():
            return cached
    digest = hashlib.sha256()
    handle, partial = tempfile.mkstemp(prefix=".fetch-", dir=folder)
    try:
        with os.fdopen(handle, "wb") as out, fs.open(path, "rb") as source:
            read = 0
            while chunk := source.read(_CHUNK):
                read += len(chunk)
                if read > limit:  # the object grew since its size was read
                    raise CodeBaseError(
                        f"code is {shown!r}, over ULTRON_ARCHIVE_MAX_BYTES ({limit}) bytes"
                    )
                digest.update(chunk)
                out.write(chunk)
        name = digest.hexdigest()
        target = folder / f"{name}.tar.gz"
        os.replace(partial, target)
    finally:
        Path(partial).unlink(missing_ok=True)
    known.write_text(name)
    return target


def pack_code(folder: Path) -> bytes:
    """A reproducible ``.tar.gz`` of a code base folder (the files :func:`code_hash` reads,
    under one top-level ``code/`` folder): the same files give the same bytes."""
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for relative in code_files(folder):
            member = tar.gettarinfo(str(folder / relative), arcname=f"code/{relative}")
            member.mtime, member.uid, member.gid, member.uname, member.gname = 0, 0, 0, "", ""
            if member.isfile():
                with (folder / relative).open("rb") as handle:
                    tar.addfile(member, handle)
            else:
                tar.addfile(member)
    return buffer.getvalue()


def upload_code(folder: Path, storage: str) -> tuple[str, bool]:
    """Put the code base ``folder`` at ``<storage>/code/<code hash>.tar.gz``.

    Returns:
        The archive's URL, and whether it was uploaded (False: it was there already).
    """
    return _put(storage, code_hash(folder), lambda: pack_code(folder))


def upload_file(archive: Path, storage: str, *, name: str) -> tuple[str, bool]:
    """Put a code base archive at ``<storage>/code/<name>.tar.gz`` (``name``: its hash)."""
    return _put(storage, name, archive.read_bytes)


def _put(storage: str, name: str, content: Callable[[], bytes]) -> tuple[str, bool]:
    url = f"{storage.rstrip('/')}/code/{name}.tar.gz"
    fs, path = _filesystem(url)
    try:
        if fs.exists(path):  # content-addressed: the same name holds the same bytes
            return url, False
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        fs.pipe_file(path, content())
    except OSError as exc:
        raise CodeBaseError(
            f"the code base cannot be uploaded to {mask_url(url)!r} ({exc}). Fix: check the "
            "spec's storage and the object store's credentials"
        ) from None
    return url, True
