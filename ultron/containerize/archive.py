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
"""

from __future__ import annotations

import tarfile
from pathlib import Path

from ultron.errors import CodeBaseError

__all__ = ["safe_extract"]

_MAX_LINK_HOPS = 40


def safe_extract(archive: str | Path, dest: str | Path) -> None:
    """Extract a code base archive into ``dest``, after checking every member.

    Nothing is extracted when any member has an absolute path or a ``..`` component, lies
    under a symlink of the archive, is a symlink or hardlink whose target resolves outside
    ``dest`` (following the archive's own symlinks), or is a device, fifo or other special file.

    Args:
        archive: a tar archive, compressed or not.
        dest: an empty or missing folder; it is created.

    Raises:
        CodeBaseError: the archive is unreadable or unsafe, or ``dest`` is not empty.
    """
    archive, dest = Path(archive), Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise CodeBaseError(
            f"dest is {str(dest)!r}, which is not an empty folder; the archive must be "
            "extracted into a new or empty folder. Fix: pass a folder that does not exist yet"
        )
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            _check_members(archive, members)
            dest.mkdir(parents=True, exist_ok=True)
            if hasattr(tarfile, "data_filter"):  # Python 3.11.4+: a second line of defence
                tar.extractall(dest, filter="data")
            else:  # pragma: no cover - only before Python 3.11.4
                tar.extractall(dest)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise CodeBaseError(
            f"code base archive {str(archive)!r} cannot be extracted ({exc}); it must be a "
            "readable tar archive. Fix: rebuild it with `tar -czf code.tar.gz -C <parent> "
            "<project folder>`"
        ) from exc


def _check_members(archive: Path, members: list[tarfile.TarInfo]) -> None:
    links = {_parts(member.name): member.linkname for member in members if member.issym()}
    for member in members:
        problem = _member_problem(member, links)
        if problem is not None:
            raise CodeBaseError(
                f"code base archive {str(archive)!r} holds member {member.name!r}, which "
                f"{problem}; an archive may only hold files, folders and links that stay "
                "inside it, and nothing was extracted. Fix: rebuild it from the project "
                "folder with `tar -czf code.tar.gz -C <parent> <project folder>`, without "
                "absolute paths, '..', special files or links that point outside it"
            )


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
