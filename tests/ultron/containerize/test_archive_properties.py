"""No archive writes outside its folder: property-based (hypothesis) tests of ``safe_extract``.

Archives are built member by member from raw tar headers: names with ``..``, absolute names
(the sentinel folder beside the target included), symlinks and hardlinks to anywhere, devices
and fifos, declared sizes far beyond the data that follows, and truncated or corrupt streams.
``safe_extract`` must extract only inside the target or raise :class:`CodeBaseError`; the
sentinel folder next to the target stays as it was either way; and what it refuses, the check
``ultron validate`` and ``ultron run`` make before any job exists refuses too.
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ultron.containerize.archive import safe_extract
from ultron.errors import CodeBaseError
from ultron.settings import settings as ultron_settings
from ultron.spec.archive_rules import ArchiveRefused, read_members

SENTINEL = "{SENTINEL}"  # replaced by the sentinel folder's absolute path

KINDS = {
    "file": tarfile.REGTYPE,
    "dir": tarfile.DIRTYPE,
    "symlink": tarfile.SYMTYPE,
    "hardlink": tarfile.LNKTYPE,
    "chr": tarfile.CHRTYPE,
    "blk": tarfile.BLKTYPE,
    "fifo": tarfile.FIFOTYPE,
    "contiguous": tarfile.CONTTYPE,
}

segments = st.sampled_from(
    ["a", "b", "pkg", "..", ".", "", "sentinel", "é", "x y", "a\\..\\b", "~", "🙂", "..."]
)
prefixes = st.sampled_from(["", "", "", "/", "./", "../", "../sentinel/", f"{SENTINEL}/", "//"])
paths = st.builds(lambda p, parts: p + "/".join(parts), prefixes, st.lists(segments, max_size=4))


@dataclass(frozen=True)
class Member:
    name: str
    kind: str
    linkname: str
    data: bytes
    declared: int | None  # a size in the header other than len(data)
    mode: int


members = st.builds(
    Member,
    name=paths,
    kind=st.sampled_from(list(KINDS)),
    linkname=paths,
    data=st.binary(max_size=64),
    declared=st.one_of(st.none(), st.sampled_from([0, 1, 511, 10**6, 8**11 - 1, 2**40, 10**15])),
    mode=st.sampled_from([0o644, 0o755, 0o4755, 0o777, 0o000]),
)


@dataclass(frozen=True)
class Archive:
    members: list[Member]
    fmt: int
    cut: int | None  # keep only this many bytes of the tar stream
    compress: bool


archives = st.builds(
    Archive,
    members=st.lists(members, max_size=6),
    fmt=st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT]),
    cut=st.one_of(st.none(), st.integers(min_value=0, max_value=4096)),
    compress=st.booleans(),
)


def _raw(archive: Archive, sentinel: Path) -> bytes:
    """The archive's bytes, built header by header so that headers may lie about sizes."""
    out = io.BytesIO()
    for member in archive.members:
        info = tarfile.TarInfo(member.name.replace(SENTINEL, str(sentinel)))
        info.type = KINDS[member.kind]
        info.linkname = member.linkname.replace(SENTINEL, str(sentinel))
        info.mode = member.mode
        data = member.data if info.type in (tarfile.REGTYPE, tarfile.CONTTYPE) else b""
        info.size = len(data) if member.declared is None else member.declared
        try:
            header = info.tobuf(archive.fmt, "utf-8", "surrogateescape")
        except ValueError:  # a name or size this format cannot hold: leave the member out
            continue
        out.write(header + data + b"\0" * (-len(data) % tarfile.BLOCKSIZE))
    out.write(b"\0" * tarfile.BLOCKSIZE * 2)
    raw = out.getvalue()
    if archive.cut is not None:
        raw = raw[: archive.cut]
    return gzip.compress(raw) if archive.compress else raw


def _tree(folder: Path) -> dict[str, tuple[int, int, bytes | str | None]]:
    """Every path under ``folder``, links not followed: its mode, size and content."""
    found: dict[str, tuple[int, int, bytes | str | None]] = {}
    for root, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            path = Path(root) / name
            st_ = path.lstat()
            content: bytes | str | None = None
            if path.is_symlink():
                content = os.readlink(path)
            elif path.is_file():
                content = path.read_bytes()
            found[str(path.relative_to(folder))] = (st_.st_mode, st_.st_size, content)
    return found


@contextmanager
def _workspace() -> Iterator[tuple[Path, Path, Path]]:
    """(top, sentinel, dest): a fresh folder per example, since hypothesis reruns the test."""
    with tempfile.TemporaryDirectory() as folder:
        top = Path(folder).resolve()
        sentinel = top / "sentinel"
        sentinel.mkdir()
        (sentinel / "keep.txt").write_text("untouched")
        yield top, sentinel, top / "work" / "dest"


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(archive=archives)
def test_archive_extracts_inside_or_is_refused(archive: Archive) -> None:
    with _workspace() as (top, sentinel, dest):
        path = top / "code.tar.gz"
        path.write_bytes(_raw(archive, sentinel))
        before = _tree(top)
        try:
            safe_extract(path, dest)
        except CodeBaseError as exc:
            assert str(exc)  # refused: what a failure mid-way left behind is still inside
            # ... and `ultron validate` refuses it too: the check it runs finds the reason.
            assert _refused_by_the_check(path), str(exc)
        if dest.exists():
            for name in _tree(dest):  # every path, links followed, stays inside
                assert (dest / name).resolve().is_relative_to(dest.resolve()), name
        after = _tree(top)
        mine = ("work", "work/dest")
        outside = {
            k: v for k, v in after.items() if k not in mine and not k.startswith("work/dest/")
        }
        assert outside == before
        assert sorted(p.name for p in sentinel.iterdir()) == ["keep.txt"]
        assert (sentinel / "keep.txt").read_text() == "untouched"


def _refused_by_the_check(path: Path) -> bool:
    """Whether the archive check of ``ultron validate`` and ``run`` (before any job) refuses."""
    limits = ultron_settings()
    try:
        with tarfile.open(path, "r:*") as tar:
            read_members(
                tar,
                path,
                max_bytes=limits.archive_max_bytes,
                max_members=limits.archive_max_members,
            )
    except (ArchiveRefused, tarfile.TarError, OSError, EOFError):  # as open_tree refuses them
        return True
    return False


# Found by the property above, fixed in ultron/containerize/archive.py.


def test_dangling_hardlink_is_refused(tmp_path: Path) -> None:
    archive = Archive(
        [Member("a", "hardlink", "a", b"", None, 0o644)], tarfile.GNU_FORMAT, None, True
    )
    path = tmp_path / "code.tar.gz"
    path.write_bytes(_raw(archive, tmp_path))
    with pytest.raises(CodeBaseError, match="'a'"):
        safe_extract(path, tmp_path / "dest")


def test_archive_refused_mid_extraction_leaves_nothing(tmp_path: Path) -> None:
    members = [Member("a", "file", "", b"x", None, 0o644), Member("", "file", "", b"", None, 0o644)]
    path = tmp_path / "code.tar.gz"
    path.write_bytes(_raw(Archive(members, tarfile.GNU_FORMAT, None, True), tmp_path))
    dest = tmp_path / "dest"
    with pytest.raises(CodeBaseError):
        safe_extract(path, dest)
    assert not dest.exists() or not any(dest.iterdir())
