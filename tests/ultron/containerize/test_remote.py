"""Code bases in an object store, against moto's S3 server on loopback: packed reproducibly,
uploaded once per content, fetched into ULTRON_HOME by content hash, refused when too large
or missing, and unpacked by the same checks as a local archive."""

from __future__ import annotations

import hashlib
import io
import shutil
import tarfile
from pathlib import Path

import pytest

from ultron.containerize.codebase import code_hash
from ultron.containerize.environment import build_environment
from ultron.containerize.remote import fetch_code, pack_code, upload_code
from ultron.errors import CodeBaseError

TOY = Path(__file__).parents[2] / "data" / "toy"


@pytest.fixture
def store(s3_url: str, tmp_path: Path) -> str:
    return f"{s3_url}/{tmp_path.name}"


def test_pack_is_reproducible_and_holds_the_hashed_files(tmp_path: Path) -> None:
    copy = tmp_path / "code"
    shutil.copytree(TOY, copy)
    first = pack_code(copy)
    (copy / "toy_model" / "__pycache__").mkdir(exist_ok=True)  # not part of the code base
    assert pack_code(copy) == first
    with tarfile.open(fileobj=io.BytesIO(first)) as tar:
        names = tar.getnames()
    assert names == ["code/pyproject.toml", "code/toy_model/__init__.py"]


def test_upload_once_then_fetch_by_content_hash(store: str, tmp_path: Path) -> None:
    import s3fs

    url, uploaded = upload_code(TOY, store)
    assert uploaded and url == f"{store}/code/{code_hash(TOY)}.tar.gz"
    assert upload_code(TOY, store) == (url, False)  # unchanged: nothing sent

    home = tmp_path / "home"
    local = fetch_code(url, home=home)
    content = pack_code(TOY)
    assert local == home / "code" / f"{hashlib.sha256(content).hexdigest()}.tar.gz"
    assert local.read_bytes() == content
    stamp = local.stat().st_mtime_ns
    assert fetch_code(url, home=home) == local and local.stat().st_mtime_ns == stamp  # cached

    fs = s3fs.S3FileSystem()
    fs.invalidate_cache()
    fs.pipe_file(url.removeprefix("s3://"), b"another version")  # the object changed
    changed = fetch_code(url, home=home)  # a new version is fetched, not the cached one
    assert changed != local and changed.read_bytes() == b"another version"

    env = build_environment(local, cache_dir=tmp_path / "envs")  # checked like a local archive
    assert (env.source / "toy_model" / "__init__.py").is_file()


def test_refused_when_missing_or_too_large(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(CodeBaseError, match=r"does not exist\. Fix: upload"):
        fetch_code(f"{store}/code/none.tar.gz", home=tmp_path)
    url, _ = upload_code(TOY, store)
    monkeypatch.setenv("ULTRON_ARCHIVE_MAX_BYTES", "100")
    with pytest.raises(CodeBaseError, match="ULTRON_ARCHIVE_MAX_BYTES") as info:
        fetch_code(url, home=tmp_path / "home")
    assert "may be at most" in str(info.value)
    assert not list((tmp_path / "home").rglob("*.tar.gz"))  # nothing was written


def test_an_unsafe_archive_from_the_store_is_refused_before_extraction(
    store: str, tmp_path: Path
) -> None:
    import s3fs

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        member = tarfile.TarInfo("../escape.py")
        member.size = 1
        tar.addfile(member, io.BytesIO(b"x"))
    url = f"{store}/code/evil.tar.gz"
    s3fs.S3FileSystem().pipe_file(url.removeprefix("s3://"), buffer.getvalue())
    local = fetch_code(url, home=tmp_path / "home")
    assert local.parent == tmp_path / "home" / "code"  # the URL names no local path
    with pytest.raises(CodeBaseError, match=r"\.\./escape\.py"):
        build_environment(local, cache_dir=tmp_path / "envs")
    assert not (tmp_path / "escape.py").exists()
