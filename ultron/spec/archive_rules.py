"""The rules a code base archive must keep, judged from the archive alone: one check for
``ultron validate``, ``ultron run`` and the extraction in containerize.

:func:`read_members` reads an open tar archive's headers one by one and refuses it, naming the
member and the rule, when it cannot be read to its end (a truncated or corrupt stream), holds
more than ``ULTRON_ARCHIVE_MAX_MEMBERS`` members or unpacks to more than
``ULTRON_ARCHIVE_MAX_BYTES`` bytes (refused at the first header past a limit, so a compression
bomb is never inflated in full), or holds a member that could write outside the folder it is
extracted into: an absolute path, a ``..`` component, a member under one of its symlinks, a
symlink or hardlink whose target resolves outside (following the archive's own links), a
hardlink to no file before it, a non-folder where a folder is, or a device, fifo or other
special file. The spec's loader runs it on a local archive before any job exists
(:mod:`ultron.spec.codetree`), and :func:`ultron.containerize.archive.safe_extract` runs it
again before it writes a byte.

Example:
    >>> import io, tarfile
    >>> buffer = io.BytesIO()
    >>> with tarfile.open(fileobj=buffer, mode="w") as tar:
    ...     tar.addfile(tarfile.TarInfo("../evil"), io.BytesIO())
    >>> _ = buffer.seek(0)
    >>> try:
    ...     with tarfile.open(fileobj=buffer) as tar:
    ...         read_members(tar, "code.tar", max_bytes=100, max_members=10)
    ... except ArchiveRefused as refused:
    ...     print(refused.rule.split(";")[0])
    holds member '../evil', which has a '..' component
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from ultron.errors import CodeBaseError

__all__ = ["ARCHIVE_SUFFIXES", "ArchiveRefused", "check_limits", "read_members"]

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
"""The names of a code base archive: tar, plain or compressed with gzip, bzip2 or xz."""

_MAX_LINK_HOPS = 40
_REBUILD = "rebuild it from the project folder with `tar -czf code.tar.gz -C <parent> <folder>`"


class ArchiveRefused(CodeBaseError):
    """A code base archive that breaks a rule; ``rule`` and ``fix`` go into a spec error."""

    def __init__(self, archive: str | Path, rule: str, fix: str) -> None:
        super().__init__(f"code base archive {str(archive)!r} {rule}. Fix: {fix}")
        self.rule, self.fix = rule, fix


def read_members(
    tar: tarfile.TarFile, archive: str | Path, *, max_bytes: int, max_members: int
) -> list[tarfile.TarInfo]:
    """Every member of ``tar``, after checking the limits and every member's rule.

    Args:
        tar: the archive, opened for reading, its headers not read yet.
        archive: its path, for the messages.
        max_bytes: the most bytes its regular files may hold together.
        max_members: the most members it may hold.

    Raises:
        ArchiveRefused: the archive cannot be read to its end, passes a limit or holds a
            member that could write outside its folder.
    """
    count, total = 0, 0
    try:
        while (member := tar.next()) is not None:
            count += 1
            total += member.size if member.isreg() else 0
            check_limits(
                archive, count, total, member.name, "its headers say", max_bytes, max_members
            )
        members = tar.getmembers()
        _check_whole(tar, members)
    except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        rule = (
            f"cannot be read to its end ({reason}, after {count} member(s)); it must be a "
            "whole tar archive, plain or compressed with gzip, bzip2 or xz"
        )
        raise ArchiveRefused(archive, rule, f"copy it again in full, or {_REBUILD}") from None
    _check_members(archive, members)
    return members


def _check_whole(tar: tarfile.TarFile, members: list[tarfile.TarInfo]) -> None:
    """An uncompressed archive's last member lies whole in its file: tarfile reads a plain
    file's headers by seeking, and takes a file cut inside a member's data as complete (its
    extraction then fails); a compressed stream cut short raises while it is read."""
    if not isinstance(tar.fileobj, io.BufferedReader | io.FileIO | io.BytesIO):
        return
    here = tar.fileobj.tell()
    size = tar.fileobj.seek(0, io.SEEK_END)
    tar.fileobj.seek(here)
    for member in members:
        if member.isreg() and not member.issparse() and member.offset_data + member.size > size:
            raise EOFError(f"member {member.name!r} is cut short")


def check_limits(
    archive: str | Path,
    count: int,
    total: int,
    name: str,
    how: str,
    max_bytes: int,
    max_members: int,
) -> None:
    """Refuse ``archive`` when ``count`` members or ``total`` bytes (up to member ``name``,
    counted as ``how`` says) pass the limits.

    Raises:
        ArchiveRefused: naming the limit's variable, the member and the fix.
    """
    if count > max_members:
        rule = (
            f"holds more than ULTRON_ARCHIVE_MAX_MEMBERS={max_members} members (member {count} "
            f"is {name!r}); an archive may hold at most that many, and nothing of it was kept"
        )
        fix = (
            "leave generated files (.git, virtual environments, node_modules, data) out of the "
            "code base, or raise ULTRON_ARCHIVE_MAX_MEMBERS"
        )
        raise ArchiveRefused(archive, rule, fix)
    if total > max_bytes:
        rule = (
            f"unpacks to more than ULTRON_ARCHIVE_MAX_BYTES={max_bytes} bytes ({how} {total} "
            f"bytes by member {name!r}); an archive may unpack to at most that much, and "
            "nothing of it was kept"
        )
        fix = (
            "leave data, checkpoints and build outputs out of the code base (read data through "
            "the data service or storage), or raise ULTRON_ARCHIVE_MAX_BYTES"
        )
        raise ArchiveRefused(archive, rule, fix)


def _check_members(archive: str | Path, members: list[tarfile.TarInfo]) -> None:
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
            rule = (
                f"holds member {member.name!r}, which {problem}; an archive may only hold "
                "files, folders and links that stay inside it, and nothing was extracted"
            )
            fix = (
                f"{_REBUILD}, without absolute paths, '..', special files or links that point "
                "outside it"
            )
            raise ArchiveRefused(archive, rule, fix)


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
