"""Unpacks a user's code-base archive, refusing anything that could write outside its folder.

Every member is checked before anything is extracted: absolute paths, ``..`` components,
links (symbolic or hard) that resolve outside the destination (following the archive's own
links), members under a link, and device or FIFO members are refused with a
:class:`~ultron.errors.CodeBaseError` that names the member.

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

__all__ = ["safe_extract"]

_MAX_LINK_HOPS = 40


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
            members = limits.read_headers(tar)
            _check_members(archive, members)
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
    """Counts members and bytes against the limits: from the headers, then from the disk."""

    def __init__(self, archive: Path, dest: Path, *, max_bytes: int, max_members: int) -> None:
        self.archive, self.dest = archive, dest
        self.max_bytes, self.max_members = max_bytes, max_members
        self.count, self.written = 0, 0
        self.last: tarfile.TarInfo | None = None

    def read_headers(self, tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
        """Every member, refused at the first header past a limit (nothing is extracted)."""
        count, total = 0, 0
        while (member := tar.next()) is not None:
            count += 1
            total += member.size if member.isreg() else 0
            self._check(count, total, member.name, "its headers say")
        return tar.getmembers()

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
        if count > self.max_members:
            raise CodeBaseError(
                f"code base archive {str(self.archive)!r} holds more than "
                f"ULTRON_ARCHIVE_MAX_MEMBERS={self.max_members} members (member {count} is "
                f"{name!r}); an archive may hold at most that many, and nothing of it was kept. "
                "Fix: leave generated files (.git, virtual environments, node_modules, data) "
                "out of the code base, or raise ULTRON_ARCHIVE_MAX_MEMBERS"
            )
        if total > self.max_bytes:
            raise CodeBaseError(
                f"code base archive {str(self.archive)!r} unpacks to more than "
                f"ULTRON_ARCHIVE_MAX_BYTES={self.max_bytes} bytes ({how} {total} bytes by "
                f"member {name!r}); an archive may unpack to at most that much, and nothing "
                "of it was kept. Fix: leave data, checkpoints and build outputs out of the code "
                "base (read data through the data service or storage), or raise "
                "ULTRON_ARCHIVE_MAX_BYTES"
            )


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


def _check_members(archive: Path, members: list[tarfile.TarInfo]) -> None:
    links = {_parts(member.name): member.linkname for member in members if member.issym()}
    folders = _folders(members)
    files: set[tuple[str, ...]] = set()  # regular files so far: what a hardlink may name
    for member in members:
        problem = _member_problem(member, links)
        if problem is None and not member.isdir() and _parts(member.name) in folders:
            # tarfile replaces what lies there; a link over a folder made it recurse forever.
            problem = "is not a folder, but the archive has a folder at that path"
        if problem is None and member.islnk() and _parts(member.linkname) not in files:
            problem = f"is a hardlink to {member.linkname!r}, which is not a file before it"
        if member.isreg():
            files.add(_parts(member.name))
        if problem is not None:
            raise CodeBaseError(
                f"code base archive {str(archive)!r} holds member {member.name!r}, which "
                f"{problem}; an archive may only hold files, folders and links that stay "
                "inside it, and nothing was extracted. Fix: rebuild it from the project "
                "folder with `tar -czf code.tar.gz -C <parent> <project folder>`, without "
                "absolute paths, '..', special files or links that point outside it"
            )


def _folders(members: list[tarfile.TarInfo]) -> set[tuple[str, ...]]:
    """The paths of the archive's folder members, and the names that end in '/' or '/.' (they
    name a folder whatever their type says)."""
    return {
        _parts(member.name)
        for member in members
        if member.isdir() or member.name.split("/")[-1] in ("", ".")
    }


def _parts(name: str) -> tuple[str, ...]:
    return tuple(part for part in name.split("/") if part not in ("", "."))


def _member_problem(member: tarfile.TarInfo, links: dict[tuple[str, ...], str]) -> str | None:
    """Why ``member`` is unsafe to extract, or None."""
    if member.name.startswith("/"):
        return "has an absolute path"
    if ".." in member.name.split("/"):
        return "has a '..' component"
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        return "is a device, fifo or other special file"
    parts = _parts(member.name)
    if not parts and not member.isdir():
        return "has no name"
    for end in range(1, len(parts)):
        if parts[:end] in links:
            return f"lies under the symlink {'/'.join(parts[:end])!r}"
    if not (member.issym() or member.islnk()):
        return None
    kind = "symlink" if member.issym() else "hardlink"
    if not parts:
        return f"is a {kind} without a name"
    # A symlink's target is relative to its folder, a hardlink's to the archive's top.
    start = parts[:-1] if member.issym() else ()
    target = member.linkname
    if target.startswith("/") or _resolve((*start, *target.split("/")), links) is None:
        return f"is a {kind} to {target!r}, which resolves outside the destination"
    return None


def _resolve(parts: tuple[str, ...], links: dict[tuple[str, ...], str]) -> tuple[str, ...] | None:
    """Resolve a path inside the archive through its symlinks; None when it leaves the top."""
    pending, hops = list(parts), 0
    resolved: list[str] = []
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not resolved:
                return None
            resolved.pop()
            continue
        resolved.append(part)
        target = links.get(tuple(resolved))
        if target is not None:
            hops += 1
            if hops > _MAX_LINK_HOPS or target.startswith("/"):
                return None
            resolved.pop()
            pending[:0] = target.split("/")
    return tuple(resolved)
