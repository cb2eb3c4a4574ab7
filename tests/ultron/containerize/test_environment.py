"""Tests of the On Demand Containerizer for local runs (ultron/containerize/environment.py)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest

from ultron.containerize.codebase import code_hash
from ultron.containerize.environment import (
    TrialEnvironment,
    build_environment,
    find_project_root,
    safe_extract,
)
from ultron.errors import CodeBaseError

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "mypkg"
version = "0.1.0"
dependencies = ["numpy", "torch>=0.4"]

[project.scripts]
mypkg-hello = "mypkg.train:main"

[tool.setuptools]
packages = ["mypkg"]
"""

TRAIN = """\
class Model:
    def score(self, hyperparameters, checkpoint_path=None, resume=False):
        return float(hyperparameters["x"]) ** 2


def main():
    print("hello from mypkg")
"""

IMPORT_CHECK = """\
import json, mypkg, mypkg.train, numpy, torch, ultron.errors
print(json.dumps({"score": mypkg.train.Model().score({"x": 3}), "mypkg": mypkg.__file__}))
"""
SYS_PATH = "import json, sys; print(json.dumps(sys.path))"


def make_project(folder: Path, *, setup_py: str | None = None) -> Path:
    """Write the fixture code base: ``mypkg/train.py`` with ``Model.score``."""
    (folder / "mypkg").mkdir(parents=True)
    (folder / "mypkg" / "__init__.py").write_text("")
    (folder / "mypkg" / "train.py").write_text(TRAIN)
    if setup_py is None:
        (folder / "pyproject.toml").write_text(PYPROJECT)
    else:
        (folder / "setup.py").write_text(setup_py)
    return folder


def make_archive(project: Path, archive: Path) -> Path:
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(project, arcname=project.name)
    return archive


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "myproject")


# --- code_hash -----------------------------------------------------------------------------


def test_code_hash_is_stable_and_follows_content(project: Path, tmp_path: Path) -> None:
    first = code_hash(project)
    assert first == code_hash(str(project))
    assert len(first) == 64
    in_other_process = subprocess.run(
        [
            sys.executable,
            "-c",
            "from ultron.containerize.codebase import code_hash; "
            f"print(code_hash({str(project)!r}))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert in_other_process == first

    # Build outputs, caches and VCS folders are not part of the code base.
    (project / "mypkg" / "__pycache__").mkdir()
    (project / "mypkg" / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"\0")
    (project / "mypkg" / "stale.pyc").write_bytes(b"\0")
    for folder in ("build", "dist", ".git", ".venv", "mypkg.egg-info"):
        (project / folder).mkdir()
        (project / folder / "x").write_text("x")
    assert code_hash(project) == first

    # ... but a folder named build inside the package is.
    (project / "mypkg" / "build").mkdir()
    (project / "mypkg" / "build" / "__init__.py").write_text("")
    with_subpackage = code_hash(project)
    assert with_subpackage != first

    (project / "mypkg" / "train.py").write_text(TRAIN + "\n# changed\n")
    changed = code_hash(project)
    assert changed != with_subpackage
    (project / "mypkg" / "alias.py").symlink_to("train.py")
    assert code_hash(project) != changed

    archive = make_archive(project, tmp_path / "code.tar.gz")
    assert code_hash(archive) == code_hash(archive) != code_hash(project)


def test_code_hash_refuses_what_is_not_a_code_base(tmp_path: Path) -> None:
    with pytest.raises(CodeBaseError, match="missing"):
        code_hash(tmp_path / "nope")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(CodeBaseError, match="a file"):
        code_hash(tmp_path / "notes.txt")


# --- find_project_root -------------------------------------------------------------------


def test_find_project_root(project: Path, tmp_path: Path) -> None:
    assert find_project_root(project) == project
    assert find_project_root(tmp_path) == project  # the single top-level folder
    legacy = make_project(tmp_path / "legacy" / "proj", setup_py="from setuptools import setup\n")
    assert find_project_root(tmp_path / "legacy") == legacy


def test_find_project_root_without_project_file(tmp_path: Path) -> None:
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "train.py").write_text(TRAIN)
    with pytest.raises(CodeBaseError) as raised:
        find_project_root(tmp_path, label="my-code")
    message = str(raised.value)
    assert "'my-code'" in message and "pyproject.toml" in message and "setup.py" in message
    assert "found: mypkg, train.py" in message and "Fix:" in message


# --- safe_extract --------------------------------------------------------------------------


def _member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info


def _write_tar(path: Path, members: list[tarfile.TarInfo]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info in [_member("proj/ok.txt"), *members]:  # a harmless member comes first
            data = b"data" if info.isreg() else b""
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


MALICIOUS = {
    "absolute path": ([_member("/tmp/evil.txt")], "/tmp/evil.txt", "absolute path"),
    "dot-dot": ([_member("../evil")], "../evil", "'..'"),
    "nested dot-dot": ([_member("proj/../../evil")], "proj/../../evil", "'..'"),
    "symlink to /etc/passwd": (
        [_member("proj/passwd", tarfile.SYMTYPE, "/etc/passwd")],
        "proj/passwd",
        "symlink to '/etc/passwd'",
    ),
    "symlink to ../outside": (
        [_member("proj/up", tarfile.SYMTYPE, "../../outside")],
        "proj/up",
        "resolves outside",
    ),
    "symlink escaping through another symlink": (
        [_member("here", tarfile.SYMTYPE, "."), _member("s", tarfile.SYMTYPE, "here/..")],
        "'s'",
        "resolves outside",
    ),
    "hardlink outside": (
        [_member("proj/hl", tarfile.LNKTYPE, "../outside")],
        "proj/hl",
        "hardlink",
    ),
    "hardlink to absolute path": (
        [_member("proj/hl", tarfile.LNKTYPE, "/etc/passwd")],
        "proj/hl",
        "hardlink",
    ),
    "member under a symlink": (
        [_member("proj/lnk", tarfile.SYMTYPE, "."), _member("proj/lnk/f.txt")],
        "proj/lnk/f.txt",
        "under the symlink",
    ),
    # Found by the property suite: tarfile recursed forever replacing the folder with a link.
    "link named as a folder": (
        [_member("proj/a", tarfile.DIRTYPE), _member("proj/./a/.", tarfile.LNKTYPE, "proj/a")],
        "proj/./a/.",
        "has a folder at that path",
    ),
    "symlink over a folder": (
        [_member("proj/a", tarfile.DIRTYPE), _member("proj/a", tarfile.SYMTYPE, "b")],
        "proj/a",
        "has a folder at that path",
    ),
    "fifo": ([_member("proj/pipe", tarfile.FIFOTYPE)], "proj/pipe", "fifo"),
    "device": ([_member("proj/null", tarfile.CHRTYPE)], "proj/null", "device"),
}


@pytest.mark.parametrize("case", list(MALICIOUS))
def test_safe_extract_refuses_malicious_archive_before_extracting(
    case: str, tmp_path: Path
) -> None:
    members, named, rule = MALICIOUS[case]
    archive = _write_tar(tmp_path / "evil.tar.gz", members)
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(CodeBaseError) as raised:
        safe_extract(archive, dest)
    message = str(raised.value)
    assert named in message and rule in message
    assert str(archive) in message and "Fix:" in message
    assert list(dest.iterdir()) == []
    assert not (tmp_path / "outside").exists() and not (tmp_path / "evil").exists()


def test_safe_extract_keeps_links_inside_the_archive(project: Path, tmp_path: Path) -> None:
    (project / "mypkg" / "alias.py").symlink_to("train.py")
    archive = make_archive(project, tmp_path / "code.tgz")
    dest = tmp_path / "dest"
    safe_extract(archive, dest)
    assert (dest / "myproject" / "mypkg" / "alias.py").read_text() == TRAIN
    assert find_project_root(dest) == dest / "myproject"
    with pytest.raises(CodeBaseError, match="not an empty folder"):
        safe_extract(archive, dest)


def test_safe_extract_refuses_a_corrupt_archive(tmp_path: Path) -> None:
    archive = tmp_path / "broken.tar.gz"
    archive.write_bytes(b"not a tar archive")
    with pytest.raises(CodeBaseError, match="cannot be extracted"):
        safe_extract(archive, tmp_path / "dest")


# --- build_environment ---------------------------------------------------------------------


def _run_python(python: str | Path, code: str) -> str:
    result = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _imports_in(env: TrialEnvironment, *, full: bool = False) -> dict[str, object]:
    """Import mypkg in the env; ``full`` also imports torch, numpy and ultron from the base."""
    code = IMPORT_CHECK if full else IMPORT_CHECK.replace(", numpy, torch, ultron.errors", "")
    return dict(json.loads(_run_python(env.python, code)))


def _leftovers(cache: Path) -> list[str]:
    return sorted(path.name for path in (cache / "envs").glob(".*"))


@pytest.mark.slow
def test_folder_builds_then_is_reused(project: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = build_environment(project, cache_dir=cache)
    assert not env.reused
    assert env.code_hash == code_hash(project)
    assert env.root == cache / "envs" / env.code_hash[:16]
    assert env.python == env.root / "venv" / "bin" / "python"
    assert env.source == env.root / "src" and (env.source / "pyproject.toml").is_file()
    meta = json.loads((env.root / "ready.json").read_text())
    assert meta["code_hash"] == env.code_hash and meta["base_python"] == sys.executable
    assert any(line.startswith("mypkg") for line in meta["freeze"])

    # Layered over exactly the base install: the same sys.path plus the env's own site-packages
    # (not the real system Python's, which include-system-site-packages would add).
    paths = [json.loads(_run_python(python, SYS_PATH)) for python in (env.python, sys.executable)]
    assert [path for path in paths[0] if path not in paths[1]] == [
        str(
            env.root
            / "venv"
            / "lib"
            / f"python{sys.version_info[0]}.{sys.version_info[1]}"
            / "site-packages"
        )
    ]

    imported = _imports_in(env, full=True)
    assert imported["score"] == 9.0
    assert str(imported["mypkg"]).startswith(str(env.root / "venv"))  # a snapshot, not the src
    # The scripts were pointed at the final folder when the build was renamed into place.
    hello = subprocess.run([str(env.root / "venv" / "bin" / "mypkg-hello")], capture_output=True)
    assert hello.stdout == b"hello from mypkg\n"

    log_mtime = (env.root / "install.log").stat().st_mtime_ns
    again = build_environment(project, cache_dir=cache)
    assert again == TrialEnvironment(env.python, env.code_hash, env.root, env.source, True)
    assert (env.root / "install.log").stat().st_mtime_ns == log_mtime
    assert _leftovers(cache) == []


@pytest.mark.slow
def test_archive_builds(project: Path, tmp_path: Path) -> None:
    archive = make_archive(project, tmp_path / "code.tar.gz")
    env = build_environment(archive, cache_dir=tmp_path / "cache")
    assert not env.reused and env.code_hash == code_hash(archive)
    assert env.source == env.root / "src" / "myproject"
    assert _imports_in(env)["score"] == 9.0


@pytest.mark.slow
def test_concurrent_builds_of_one_code_base_do_not_collide(project: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    barrier = threading.Barrier(2)
    results: list[TrialEnvironment] = []
    errors: list[BaseException] = []

    def build() -> None:
        barrier.wait()
        try:
            results.append(build_environment(project, cache_dir=cache))
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(env.reused for env in results) == [False, True]
    assert results[0].root == results[1].root
    assert _leftovers(cache) == []
    assert _imports_in(results[0])["score"] == 9.0


@pytest.mark.slow
def test_failing_install_reports_the_log(tmp_path: Path) -> None:
    broken = make_project(
        tmp_path / "broken", setup_py="raise RuntimeError('setup.py exploded on purpose')\n"
    )
    cache = tmp_path / "cache"
    key = code_hash(broken)[:16]
    # What a build killed half-way leaves behind is cleared by the next build.
    (cache / "envs" / f".{key}-crashed" / "venv").mkdir(parents=True)
    (cache / "envs" / key / "src").mkdir(parents=True)
    with pytest.raises(CodeBaseError) as raised:
        build_environment(broken, cache_dir=cache)
    message = str(raised.value)
    assert "does not install" in message and "Fix:" in message
    assert "RuntimeError: setup.py exploded on purpose" in message  # the cause, in one line
    assert "Traceback" not in message and len(message.splitlines()) == 1
    assert f"{key}-install-failed.log" in message  # where pip's whole log is
    assert not (cache / "envs" / key).exists()
    assert "exploded" in (cache / "envs" / f"{key}-install-failed.log").read_text()
    assert _leftovers(cache) == []


def test_build_without_project_file_is_refused(tmp_path: Path) -> None:
    code = tmp_path / "code"
    (code / "mypkg").mkdir(parents=True)
    (code / "mypkg" / "train.py").write_text(TRAIN)
    with pytest.raises(CodeBaseError) as raised:
        build_environment(code, cache_dir=tmp_path / "cache")
    assert str(code) in str(raised.value) and "pyproject.toml" in str(raised.value)
    assert _leftovers(tmp_path / "cache") == []
    assert list((tmp_path / "cache" / "envs").iterdir()) == [
        tmp_path / "cache" / "envs" / f"{code_hash(code)[:16]}.lock"
    ]


def test_cache_inside_the_code_base_is_refused(project: Path) -> None:
    with pytest.raises(CodeBaseError, match="cache_dir"):
        build_environment(project, cache_dir=project / "envcache")
