"""Code base archives: what extraction would refuse, ``ultron validate`` and ``ultron run`` refuse
first (exit 2, the field, the rule and the fix, no job made), and a plain ``.tar`` is accepted.

Each hostile kind is checked in-process through the spec loader (the one check both commands
run); the real CLI script, in a subprocess, is run for a cut-short ``.tar.gz`` and one hostile
archive.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from ultron.containerize.archive import safe_extract
from ultron.containerize.codebase import code_hash
from ultron.errors import CodeBaseError, SpecError
from ultron.spec.loader import load_spec

ULTRON = Path(sys.executable).parent / "ultron"

MODEL = b"""class Model:
    def score(self, hyperparameters, checkpoint_path, resume):
        return 0.0
"""
PROJECT = {
    "proj/pyproject.toml": b"[project]\nname = 'proj'\nversion = '0'\n",
    "proj/pkg/__init__.py": b"",
    "proj/pkg/train.py": MODEL,
}


def _archive(path: Path, extra: Sequence[tarfile.TarInfo] = (), mode: str = "w:gz") -> Path:
    """A good project archive at ``path``, with the ``extra`` members after its files."""
    with tarfile.open(path, mode) as tar:
        for name, data in PROJECT.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for info in extra:
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.isreg() else None)
    return path


def _member(
    name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "", size: int = 0
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, linkname, size
    return info


HOSTILE = {
    "traversal": ([_member("proj/../../evil.py", size=1)], "'..' component"),
    "absolute": ([_member("/tmp/ultron-evil.py", size=1)], "absolute path"),
    "symlink_out": ([_member("proj/pkg/out", tarfile.SYMTYPE, "../../../etc")], "resolves outside"),
    "symlink_abs": ([_member("proj/pkg/pw", tarfile.SYMTYPE, "/etc/passwd")], "resolves outside"),
    "under_symlink": (
        [_member("proj/up", tarfile.SYMTYPE, ".."), _member("proj/up/x.py", size=1)],
        "under the symlink",
    ),
    "hardlink_out": ([_member("proj/pkg/h", tarfile.LNKTYPE, "../etc/passwd")], "hardlink"),
    "device": ([_member("proj/dev", tarfile.CHRTYPE)], "device"),
    "fifo": ([_member("proj/pipe", tarfile.FIFOTYPE)], "device, fifo"),
}


def _spec(tmp_path: Path, code: str) -> Path:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"code: {code}\nmodel: pkg.train:Model\nsearch_space:\n  x: [1, 2]\nnum_iterations: 2\n"
    )
    return spec


def _code_issue(spec: Path) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(spec, check_code=True)
    [issue] = info.value.issues
    assert issue.field == "code" and issue.rule and issue.fix, str(info.value)
    return str(issue)


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_validate_refuses_what_extraction_refuses(tmp_path: Path, kind: str) -> None:
    members, words = HOSTILE[kind]
    archive = _archive(tmp_path / "code.tar.gz", members)
    with pytest.raises(Exception) as extracting:  # the job would have failed on it
        safe_extract(archive, tmp_path / "dest")
    message = _code_issue(_spec(tmp_path, "code.tar.gz"))
    assert words in message and repr(members[-1].name) in message, message
    assert words in str(extracting.value)


def test_a_bomb_past_the_limit_is_refused_by_validate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ULTRON_ARCHIVE_MAX_BYTES", "4096")
    _archive(tmp_path / "code.tar.gz", [_member("proj/data.bin", size=8192)])
    message = _code_issue(_spec(tmp_path, "code.tar.gz"))
    assert "ULTRON_ARCHIVE_MAX_BYTES=4096" in message and "'proj/data.bin'" in message


@pytest.mark.parametrize("mode", ["w:gz", "w"])
def test_a_cut_short_archive_is_refused_by_validate_when_extraction_would_be(
    tmp_path: Path, mode: str
) -> None:
    whole = _archive(tmp_path / "whole", [_member("proj/big.bin", size=20000)], mode).read_bytes()
    for cut in (len(whole) // 2, len(whole) - 700, len(whole) - 4, 100):
        name = f"code-{cut}.tar.gz" if mode == "w:gz" else f"code-{cut}.tar"
        (tmp_path / name).write_bytes(whole[:cut])
        try:
            load_spec(_spec(tmp_path, name), check_code=True)
        except SpecError as exc:
            [issue] = exc.issues
            assert issue.field == "code" and "Fix:" in str(issue), str(exc)
            validated = False
        else:
            validated = True
        try:
            safe_extract(tmp_path / name, tmp_path / f"dest-{cut}")
        except CodeBaseError:
            extracted = False
        else:
            extracted = True
        assert validated == extracted, (cut, len(whole))
        if cut == len(whole) // 2:  # in the middle of big.bin: neither may take it
            assert not validated


def test_a_plain_tar_is_accepted_and_unpacks(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "code.tar", mode="w")
    job = load_spec(_spec(tmp_path, "code.tar"), check_code=True)
    assert job.code_path == archive.resolve()
    assert len(code_hash(archive)) == 64
    safe_extract(archive, tmp_path / "dest")
    assert (tmp_path / "dest" / "proj" / "pkg" / "train.py").read_bytes() == MODEL


def _ultron(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ULTRON), *args],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "ULTRON_HOME": str(tmp_path / "home")},
        stdin=subprocess.DEVNULL,
    )


def test_the_commands_refuse_bad_archives_with_exit_2_and_no_job(tmp_path: Path) -> None:
    data = _archive(tmp_path / "whole.tar.gz", [_member("proj/big.bin", size=20000)]).read_bytes()
    (tmp_path / "cut.tar.gz").write_bytes(data[: len(data) // 2])
    _archive(tmp_path / "evil.tar.gz", HOSTILE["traversal"][0])
    for name, words in (("cut.tar.gz", "cannot be read"), ("evil.tar.gz", "'..' component")):
        spec = _spec(tmp_path, name)
        for command in ("validate", "run"):
            out = _ultron(tmp_path, command, str(spec))
            text = out.stdout + out.stderr
            assert out.returncode == 2, text
            assert "Traceback" not in text and "Aborted" not in text, text
            assert "- code is " in text and words in text and "Fix:" in text, text
    # Refused before any job: no results folder, no job in the home.
    assert not (tmp_path / "ultron-runs").exists()
    assert (
        not (tmp_path / "home" / "jobs").exists() and not (tmp_path / "home" / "scratch").exists()
    )
