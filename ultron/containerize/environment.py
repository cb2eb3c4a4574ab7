"""The On Demand Containerizer for local runs: one virtual environment per code base.

The "base image" is the interpreter ultron runs in: the new environment sees the base install
through a ``.pth`` file and holds a snapshot (non-editable install) of the user's package.
``<cache_dir>/envs/<code_hash[:16]>/`` holds ``src/`` (the copied or extracted code base),
``venv/``, ``install.log`` and ``ready.json`` (code hash, base interpreter, time, pip freeze).
It is built under another name and renamed into place, so it is complete or absent.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

from filelock import FileLock, Timeout

from ultron.containerize.archive import safe_extract
from ultron.containerize.codebase import PROJECT_FILES, code_hash, ignored
from ultron.errors import CodeBaseError

__all__ = [
    "TrialEnvironment",
    "build_environment",
    "find_project_root",
    "safe_extract",
]

logger = logging.getLogger(__name__)
_Log: TypeAlias = "logging.Logger | logging.LoggerAdapter[Any]"

READY_MARKER = "ready.json"


@dataclass(frozen=True)
class TrialEnvironment:
    """A built environment that trials of one code base run in.

    Example::

        env = build_environment("examples/mnist", cache_dir=Path(".ultron"))
        subprocess.run([env.python, "-c", "import mypkg.train"], check=True)

    Attributes:
        python: the environment's interpreter; it imports the base install and the user's package.
        code_hash: sha256 of the code base, as :func:`code_hash` computes it.
        root: the environment's folder, ``<cache_dir>/envs/<code_hash[:16]>``.
        source: the unpacked project root (the folder holding setup.py or pyproject.toml).
        reused: True when the environment was already built and nothing was done.
    """

    python: Path
    code_hash: str
    root: Path
    source: Path
    reused: bool


def find_project_root(directory: str | Path, *, label: str | None = None) -> Path:
    """Return the folder holding setup.py or pyproject.toml.

    Args:
        directory: the folder itself, or a folder whose single top-level entry (hidden entries
            and ``__MACOSX`` aside) is the project folder, as in most archives.
        label: how to name the code base in the error; defaults to ``directory``.

    Raises:
        CodeBaseError: neither place holds setup.py or pyproject.toml.
    """
    folder = Path(directory)
    if _is_project(folder):
        return folder
    listing = sorted(folder.iterdir()) if folder.is_dir() else []
    entries = [e for e in listing if not e.name.startswith(".") and e.name != "__MACOSX"]
    if len(entries) == 1 and not entries[0].is_symlink() and _is_project(entries[0]):
        return entries[0]
    found = ", ".join(entry.name for entry in entries[:10]) or "nothing"
    raise CodeBaseError(
        f"code base {label or str(folder)!r} has no {' or '.join(PROJECT_FILES)} at its top or "
        f"in its single top-level folder (found: {found}); it must be an installable Python "
        "project. Fix: add a pyproject.toml with a [project] table (name, version, "
        "dependencies) next to your package folder"
    )


def _is_project(folder: Path) -> bool:
    return folder.is_dir() and any((folder / name).is_file() for name in PROJECT_FILES)


def build_environment(
    code: str | Path,
    *,
    cache_dir: str | Path,
    base_python: str = sys.executable,
    log: _Log | None = None,
) -> TrialEnvironment:
    """Return the environment of a code base, building it unless it is already built.

    Two jobs that build the same code base at once do not collide: the build runs under a file
    lock (``<cache_dir>/envs/<key>.lock``), and the second job reuses the first one's result.

    Args:
        code: a project folder or a tar archive of one (``.tar``, ``.tar.gz``, ...).
        cache_dir: where environments are kept, under ``envs/``.
        base_python: the interpreter whose installed packages the environment sees, and whose
            pip installs the user's package.
        log: where progress goes; a Prefect run logger in tasks. Defaults to this module's.

    Raises:
        CodeBaseError: the code base cannot be read, unpacked or installed.
    """
    log = log or logger
    source = Path(code).expanduser()
    digest = code_hash(source)
    envs = Path(cache_dir).expanduser() / "envs"
    _refuse_cache_inside(source, envs)
    root = envs / digest[:16]
    env = _load_ready(root, digest, base_python=base_python, log=log)
    if env is not None:
        log.info("Reusing environment %s for code base %s", root, source)
        return env
    envs.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(envs / f"{root.name}.lock", log=log):
        env = _load_ready(root, digest, base_python=base_python, log=log)
        if env is not None:  # another job built it while this one waited
            return env
        for leftover in [root, *envs.glob(f".{root.name}-*")]:  # a crashed build's
            shutil.rmtree(leftover, ignore_errors=True)
        started = time.monotonic()
        staging = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=envs))
        try:
            meta = _build(staging, root, source=source, digest=digest, base_python=base_python)
            staging.rename(root)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    log.info("Built environment %s in %.1f s", root, time.monotonic() - started)
    return _environment(root, meta, reused=False)


def _refuse_cache_inside(source: Path, envs: Path) -> None:
    """Refuse a cache folder that would be hashed and copied as part of the code base."""
    try:
        inside = envs.resolve().relative_to(source.resolve()).parts
    except ValueError:
        return
    if not inside or not inside[0].startswith("."):
        raise CodeBaseError(
            f"cache_dir is {str(envs.parent)!r}, inside the code base {str(source)!r}; it must "
            "be outside it or in a hidden folder, which the code hash skips. Fix: use e.g. "
            f"{str(source / '.ultron')!r}"
        )


def _load_ready(root: Path, digest: str, *, base_python: str, log: _Log) -> TrialEnvironment | None:
    try:
        meta = json.loads((root / READY_MARKER).read_text())
    except (OSError, ValueError):
        return None
    if meta.get("code_hash") != digest:
        raise CodeBaseError(
            f"environment {str(root)!r} was built for code hash {meta.get('code_hash')!r}, not "
            f"{digest!r}; the first 16 hex digits must name one code base. Fix: delete {root}"
        )
    if meta.get("base_python") != base_python:
        # Another install of ultron (another venv) built it: its trials would run that one's
        # ultron and libraries. Built again over this base.
        log.warning(
            "Environment %s was built over %s, not %s; building it again",
            root,
            meta.get("base_python"),
            base_python,
        )
        return None
    return _environment(root, meta, reused=True)


def _environment(root: Path, meta: dict[str, Any], *, reused: bool) -> TrialEnvironment:
    return TrialEnvironment(
        python=root / "venv" / "bin" / "python",
        code_hash=meta["code_hash"],
        root=root,
        source=root / meta["source"],
        reused=reused,
    )


@contextlib.contextmanager
def _exclusive_lock(path: Path, *, log: _Log) -> Iterator[None]:
    lock = FileLock(path)  # the lock file stays: removing it would race
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.info("Waiting for another job that builds the same environment (%s)", path)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _build(
    staging: Path, root: Path, *, source: Path, digest: str, base_python: str
) -> dict[str, Any]:
    """Fill ``staging``, to be renamed to ``root``, with src/, venv/, install.log, ready.json."""
    if source.is_dir():
        shutil.copytree(source, staging / "src", symlinks=True, ignore=ignored)
    else:
        safe_extract(source, staging / "src")
    project = find_project_root(staging / "src", label=str(source))
    base_site = json.loads(_run([base_python, "-c", _SITE_PACKAGES], what="base_python"))
    venv = staging / "venv"
    _run([base_python, "-m", "venv", "--without-pip", str(venv)], what="base_python")
    python = venv / "bin" / "python"
    purelib = _run([str(python), "-c", _PURELIB], what="the new environment's python").strip()
    # --system-site-packages (include-system-site-packages = true) of a venv made from a venv
    # adds the real system Python, not the base, and is left off: the base is layered in by a
    # .pth file instead, whose addsitedir also runs the base's own .pth files (editable installs).
    lines = [f"import site; site.addsitedir({site!r})\n" for site in base_site]
    (Path(purelib) / "_ultron_base.pth").write_text("".join(lines))
    kept = root.with_name(f"{root.name}-install-failed.log")  # staging/ is removed on failure
    log_path = staging / "install.log"
    _install(base_python, python, project, log_path=log_path, kept=kept, label=str(source))
    _relocate(staging, root)
    freeze = _run(
        [base_python, "-m", "pip", "--python", str(python), "freeze", "--path", purelib],
        what="pip freeze",
    )
    meta = {
        "code_hash": digest,
        "base_python": base_python,
        "base_site_packages": base_site,
        "source": project.relative_to(staging).as_posix(),
        "built_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "freeze": freeze.splitlines(),
    }
    (staging / READY_MARKER).write_text(json.dumps(meta, indent=2) + "\n")
    return meta


_SITE_PACKAGES = "import json, site; print(json.dumps(site.getsitepackages()))"
_PURELIB = "import sysconfig; print(sysconfig.get_path('purelib'))"


def _pip_env() -> dict[str, str]:
    return {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}


def _run(command: list[str], *, what: str) -> str:
    result = subprocess.run(command, capture_output=True, text=True, env=_pip_env(), check=False)
    if result.returncode != 0:
        raise CodeBaseError(
            f"{what} failed: `{shlex.join(command)}` exited with {result.returncode}; it must "
            f"succeed to build the environment. Output:\n{result.stderr[-2000:]}\nFix: check "
            "that base_python is a working Python 3.11+ interpreter with pip 22.3 or newer"
        )
    return result.stdout


def _install(
    base_python: str, python: Path, project: Path, *, log_path: Path, kept: Path, label: str
) -> None:
    """Install the user's package (a snapshot, not editable) with the base interpreter's pip."""
    command = [base_python, "-m", "pip", "--python", str(python), "install"]
    command += ["--no-build-isolation", str(project)]
    with log_path.open("w") as out:
        out.write(f"$ {shlex.join(command)}\n")
        out.flush()
        result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=_pip_env())
    if result.returncode == 0:
        kept.unlink(missing_ok=True)  # an earlier failure's log
        return
    shutil.copyfile(log_path, kept)
    cause = _install_cause(log_path.read_text(errors="replace"))
    raise CodeBaseError(
        f"code base {label!r} does not install: pip exited with {result.returncode} ({cause}); "
        "it must install with `pip install --no-build-isolation` over the base environment. "
        f"The whole install log is in {kept}. Fix: make setup.py/pyproject.toml build, and "
        f"install its dependencies into {base_python} or make them reachable from the package "
        "index"
    )


_EXCEPTION_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Exit)\b.*)$")


def _install_cause(log: str) -> str:
    """The line of pip's log that says why: the user's exception, else pip's first error."""
    lines = log.splitlines()
    raised = [m.group(1).strip() for line in lines if (m := _EXCEPTION_LINE.match(line))]
    if raised:
        return raised[-1]
    errors = [line.strip() for line in lines if line.lstrip().startswith("ERROR:")]
    if errors:
        return errors[0].removeprefix("ERROR:").strip()
    tail = [line.strip() for line in lines if line.strip()]
    return tail[-1] if tail else "no output"


def _relocate(staging: Path, root: Path) -> None:
    """Point the venv's scripts and records at ``root``, the folder it is renamed to."""
    old, new = os.fsencode(staging), os.fsencode(root)
    venv = staging / "venv"
    paths = [venv / "pyvenv.cfg", *(venv / "bin").iterdir()]
    paths += venv.glob("lib/*/site-packages/*.dist-info/direct_url.json")
    for path in paths:
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            if old in data:
                path.write_bytes(data.replace(old, new))
