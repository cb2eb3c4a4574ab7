"""Unpacks a user's code-base archive, refusing anything that could write outside its folder.

Every member is checked before anything is extracted, by the same check ``ultron validate``
runs (:func:`ultron.spec.archive_rules.read_members`): absolute paths, ``..`` components,
links (symbolic or hard) that resolve outside the destination (following the archive's own
links), members under a link, device or FIFO members, and an archive cut short are refused with
a :class:`~ultron.errors.CodeBaseError` that names the member.

Extraction then runs under tarfile's ``data`` filter, which refuses much the same, and also
drops setuid/setgid bits, group and other write permission and ownership. The checks here are
not a copy of the filter's: the filter judges a member when it comes to it, after the members
before it are written, by resolving paths on disk (its ``realpath`` checks had bypasses,
CPython gh-135034 and gh-149486), and it extracts an absolute name below the destination and
lets a ``..`` that stays inside pass. These checks read the archive alone, refuse the whole
archive before a byte is written, and name the member and the rule.

Size limits: an archive may unpack to at most ``ULTRON_ARCHIVE_MAX_BYTES`` bytes and hold at
most ``ULTRON_ARCHIVE_MAX_MEMBERS`` members. The headers are read one by one and the archive is
refused at the first header past a limit, before anything is extracted (a compression bomb is
never inflated in full); the same limits are counted again while extracting, from the files on
disk, and what was extracted is removed when they are passed.
"""

from __future__ import annotations

import contextlib
import shutil
import tarfile
from pathlib import Path

from ultron.errors import CodeBaseError
from ultron.settings import settings
from ultron.spec.archive_rules import check_limits, read_members

__all__ = ["safe_extract"]


def safe_extract(
    archive: str | Path,
    dest: str | Path,
    *,
    max_bytes: int | None = None,
    max_members: int | None = None,
) -> None:
    """Extract a code base archive into ``dest``, after checking every member.

    Nothing is extracted when any member has an absolute path or a ``..`` component, lies
    under a symlink of the archive, is a symlink or hardlink whose target resolves outside
    ``dest`` (following the archive's own symlinks), or is a device, fifo or other special file,
    or when the archive holds more than ``max_members`` members or unpacks to more than
    ``max_bytes`` bytes.

    Args:
        archive: a tar archive, compressed or not.
        dest: an empty or missing folder; it is created.
        max_bytes: the most bytes it may unpack to (default ``ULTRON_ARCHIVE_MAX_BYTES``).
        max_members: the most members it may hold (default ``ULTRON_ARCHIVE_MAX_MEMBERS``).

    Raises:
        CodeBaseError: the archive is unreadable, unsafe or too large, or ``dest`` is not empty.
    """
    archive, dest = Path(archive), Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise CodeBaseError(
            f"dest is {str(dest)!r}, which is not an empty folder; the archive must be "
            "extracted into a new or empty folder. Fix: pass a folder that does not exist yet"
        )
    if max_bytes is None or max_members is None:
        current = settings()
        max_bytes = current.archive_max_bytes if max_bytes is None else max_bytes
        max_members = current.archive_max_members if max_members is None else max_members
    limits = _Limits(archive, dest, max_bytes=max_bytes, max_members=max_members)
    existed = dest.exists()
    try:
        with tarfile.open(archive, "r:*") as tar:
            read_members(tar, archive, max_bytes=max_bytes, max_members=max_members)
            dest.mkdir(parents=True, exist_ok=True)
            try:
                tar.extractall(dest, filter=limits.extracting)
                limits.extracting(None, str(dest))
            except BaseException:  # whatever stopped it, nothing half-extracted stays
                _empty(dest, remove=not existed)
                raise
    except (tarfile.TarError, OSError, EOFError, KeyError) as exc:
        raise CodeBaseError(
            f"code base archive {str(archive)!r} cannot be extracted ({exc}); it must be a "
            "readable tar archive. Fix: rebuild it with `tar -czf code.tar.gz -C <parent> "
            "<project folder>`"
        ) from exc


class _Limits:
    """Counts members and bytes against the limits while extracting, from the disk."""

    def __init__(self, archive: Path, dest: Path, *, max_bytes: int, max_members: int) -> None:
        self.archive, self.dest = archive, dest
        self.max_bytes, self.max_members = max_bytes, max_members
        self.count, self.written = 0, 0
        self.last: tarfile.TarInfo | None = None

    def extracting(self, member: tarfile.TarInfo | None, path: str) -> tarfile.TarInfo | None:
        """tarfile's ``data`` filter, counting what the members before this one wrote."""
        if self.last is not None:  # its file is on disk now: count what it really holds
            self.written += self._written(self.last)
            self.last = None
        if member is None:  # the end: count the last file
            self._check(self.count, self.written, "(the last member)", "extracting wrote")
            return None
        self.count += 1
        self._check(self.count, self.written, member.name, "extracting wrote")
        self.last = member if member.isreg() or member.islnk() else None
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4+: a second line of defence
            return tarfile.data_filter(member, path)
        return member  # pragma: no cover - only before Python 3.11.4

    def _written(self, member: tarfile.TarInfo) -> int:
        """Bytes ``member`` put on disk; a hardlink's only when tarfile had to copy its target
        (``os.link`` failed), which its header's size of 0 does not say."""
        path = self.dest / member.name
        if path.is_symlink() or not path.is_file():
            return 0
        size = path.stat().st_size
        if member.islnk():
            target = self.dest / member.linkname
            with contextlib.suppress(OSError):
                if path.stat().st_ino == target.stat().st_ino:
                    return 0
        return size

    def _check(self, count: int, total: int, name: str, how: str) -> None:
        check_limits(self.archive, count, total, name, how, self.max_bytes, self.max_members)


def _empty(dest: Path, *, remove: bool) -> None:
    """Remove what extracting wrote into ``dest`` (and ``dest`` when this module made it)."""
    if remove:
        shutil.rmtree(dest, ignore_errors=True)
        return
    for child in dest.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
