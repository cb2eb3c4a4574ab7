"""Code base archives have limits on unpacked size and member count, checked from the headers
before anything is written."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from ultron.containerize.archive import safe_extract
from ultron.errors import CodeBaseError, EnvironmentVariableError


def _bomb(path: Path, size: int) -> Path:
    """A tar.gz with a small script and one ``size``-byte file of zeros: ~1000x compression."""
    with tarfile.open(path, "w:gz") as tar:
        script = b"print('hello')\n"
        info = tarfile.TarInfo("project/train.py")
        info.size = len(script)
        tar.addfile(info, io.BytesIO(script))
        info = tarfile.TarInfo("project/data.bin")
        info.size = size
        tar.addfile(info, _Zeros(size))
    return path


class _Zeros(io.RawIOBase):
    """``size`` zero bytes, read without holding them in memory."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), self.left)
        buffer[:n] = bytes(n)
        self.left -= n
        return n


def _many(path: Path, count: int) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for i in range(count):
            info = tarfile.TarInfo(f"project/f{i:06d}.py")
            info.size = 1
            tar.addfile(info, io.BytesIO(b"#"))
    return path


def test_a_compression_bomb_is_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = _bomb(tmp_path / "bomb.tar.gz", 300 * 2**20)  # 300 MB from ~300 KB
    assert archive.stat().st_size < 400 * 2**10
    monkeypatch.setenv("ULTRON_ARCHIVE_MAX_BYTES", str(100 * 2**20))
    dest = tmp_path / "src"
    with pytest.raises(CodeBaseError) as caught:
        safe_extract(archive, dest)
    message = str(caught.value)
    assert f"ULTRON_ARCHIVE_MAX_BYTES={100 * 2**20}" in message
    assert "'project/data.bin'" in message
    assert "Fix:" in message and "raise ULTRON_ARCHIVE_MAX_BYTES" in message
    assert not dest.exists()


def test_too_many_members_are_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = _many(tmp_path / "many.tar.gz", 150)
    monkeypatch.setenv("ULTRON_ARCHIVE_MAX_MEMBERS", "100")
    dest = tmp_path / "src"
    dest.mkdir()  # an empty folder stays as it was
    with pytest.raises(CodeBaseError) as caught:
        safe_extract(archive, dest)
    message = str(caught.value)
    assert "ULTRON_ARCHIVE_MAX_MEMBERS=100" in message
    assert "member 101" in message and "raise ULTRON_ARCHIVE_MAX_MEMBERS" in message
    assert dest.is_dir() and not any(dest.iterdir())


def test_an_archive_within_the_limits_is_extracted(tmp_path: Path) -> None:
    archive = _many(tmp_path / "many.tar.gz", 100)
    safe_extract(archive, tmp_path / "src", max_members=100, max_bytes=100)
    assert len(list((tmp_path / "src" / "project").iterdir())) == 100


def test_the_default_limits_refuse_neither_a_normal_code_base(tmp_path: Path) -> None:
    archive = _bomb(tmp_path / "small.tar.gz", 2**20)
    safe_extract(archive, tmp_path / "src")
    assert (tmp_path / "src" / "project" / "data.bin").stat().st_size == 2**20


@pytest.mark.parametrize("variable", ["ULTRON_ARCHIVE_MAX_BYTES", "ULTRON_ARCHIVE_MAX_MEMBERS"])
def test_a_bad_limit_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "0")
    with pytest.raises(EnvironmentVariableError, match=variable):
        safe_extract(_many(tmp_path / "a.tar.gz", 1), tmp_path / "src")
    assert not (tmp_path / "src").exists()


def test_hardlinks_share_their_target_s_bytes(tmp_path: Path) -> None:
    archive = tmp_path / "links.tar"
    with tarfile.open(archive, "w") as tar:
        info = tarfile.TarInfo("project/data.bin")
        info.size = 1000
        tar.addfile(info, io.BytesIO(bytes(1000)))
        for i in range(5):
            link = tarfile.TarInfo(f"project/link{i}.bin")
            link.type, link.linkname = tarfile.LNKTYPE, "project/data.bin"
            tar.addfile(link)
    safe_extract(archive, tmp_path / "src", max_bytes=1000)
    assert (tmp_path / "src" / "project" / "link4.bin").stat().st_nlink == 6
