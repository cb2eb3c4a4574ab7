"""Checks the model class in the trial environment, after containerize and before resources.

A model that cannot be imported there, has no ``score``, takes the wrong arguments or whose
constructor needs arguments would otherwise be found only when every trial fails. The check
runs ``python -P -m ultron.worker.inspect_model MODEL CODE_PATH ...`` with the environment's
interpreter: the model is imported as a trial process imports it (the code base's names
first, the current folder off ``sys.path``), and constructed once with no arguments. The
module is named, not imported: the worker room sits above this one.

A model that passed in an environment of ``ULTRON_HOME`` is remembered there
(``modelcheck/<key>``), keyed by everything its verdict depends on: the interpreter (its
environment is content-addressed by the code base's hash), the model, the import folders and
the installed packages' and the check's own modification times. A later job with the same key
skips the subprocess (a few tenths of a second of every job's start); a failure is never
remembered, and an interpreter elsewhere is always checked.

Example::

    env = build_environment(job.code, cache_dir=cache_dir)
    check_model(str(env.python), import_paths(env.source), job.model)
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sysconfig
from collections.abc import Sequence
from pathlib import Path

from ultron.errors import CodeBaseError, ConfigIssue, SpecError
from ultron.paths import ultron_home

__all__ = ["check_model"]

_INSPECT_MODULE = "ultron.worker.inspect_model"
_TAIL = 2000
_SOURCE = "the model in its trial environment"


def check_model(
    python: str | Path,
    code_paths: Sequence[str | Path],
    model: str,
    *,
    timeout_s: float = 120.0,
) -> None:
    """Import and construct ``model`` in the environment of ``python``; raise if it is unusable.

    Args:
        python: the trial environment's interpreter (``TrialEnvironment.python``).
        code_paths: the code base's import folders (``import_paths(env.source)``).
        model: the spec's ``module:Class``.
        timeout_s: how long the import and the constructor may take together.

    Raises:
        SpecError: on field ``model``, one issue per problem found (no ``score``, a ``score``
            that does not take ``(hyperparameters, checkpoint_path, resume)``, a constructor
            that needs arguments or raises, an import that fails, a check that does not end).
        CodeBaseError: the interpreter cannot be started.
    """
    key = _verdict_key(python, code_paths, model)
    if key is not None and _passed(key):
        return
    _run_check(python, code_paths, model, timeout_s)
    if key is not None:
        _remember(key)


def _run_check(
    python: str | Path, code_paths: Sequence[str | Path], model: str, timeout_s: float
) -> None:
    command = [str(python), "-P", "-m", _INSPECT_MODULE, model, *map(str, code_paths)]
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        rule = (
            f"importing and constructing it in the trial environment must end within "
            f"{timeout_s:g} s, and it did not"
        )
        fix = "move slow work (data loading, downloads) from import time and __init__ to score()"
        raise SpecError([ConfigIssue("model", model, rule, fix)], _SOURCE) from None
    except OSError as exc:
        raise CodeBaseError(
            f"the trial environment's interpreter {str(python)!r} cannot be started ({exc}); "
            "it must exist and run. Fix: delete the environment folder so it is built again"
        ) from None
    problems = _answer(done.stdout)
    if problems is None:
        rule = (
            f"checking it in the trial environment must finish, and the process exited with "
            f"{done.returncode} without an answer. Its output:\n{done.stderr[-_TAIL:]}"
        )
        fix = "run the import yourself with the environment's python and fix what fails"
        raise SpecError([ConfigIssue("model", model, rule, fix)], _SOURCE)
    if problems:
        issues = [ConfigIssue("model", model, p["rule"], p["fix"]) for p in problems]
        raise SpecError(issues, _SOURCE)


def _answer(stdout: str) -> list[dict[str, str]] | None:
    """The problems from the check's last stdout line; ``None`` when it gave no answer."""
    lines = stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    problems = answer.get("problems") if isinstance(answer, dict) else None
    return problems if isinstance(problems, list) else None


def _mtime(path: str | Path | None) -> int:
    try:
        return os.stat(path).st_mtime_ns if path else 0
    except OSError:
        return 0


def _verdict_key(python: str | Path, code_paths: Sequence[str | Path], model: str) -> str | None:
    """What a remembered verdict must match; ``None`` for an interpreter outside
    ``ULTRON_HOME`` (not an environment we built) or one that is not there."""
    home = ultron_home().resolve()
    # The folder, resolved: the interpreter itself is a link out of the environment.
    if not _mtime(python) or not Path(python).parent.resolve().is_relative_to(home):
        return None
    spec = importlib.util.find_spec(_INSPECT_MODULE)
    parts = [
        str(python),
        str(_mtime(python)),
        model,
        *map(str, code_paths),
        *(str(_mtime(p)) for p in code_paths),
        str(_mtime(sysconfig.get_paths()["purelib"])),  # a package added, removed or upgraded
        str(_mtime(spec.origin if spec else None)),
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _verdict(key: str) -> Path:
    return ultron_home() / "modelcheck" / key


def _passed(key: str) -> bool:
    return _verdict(key).exists()


def _remember(key: str) -> None:
    """Mark a passing verdict; a folder that cannot be written only costs the next job a check."""
    try:
        _verdict(key).parent.mkdir(parents=True, exist_ok=True)
        _verdict(key).touch()
    except OSError:
        pass
