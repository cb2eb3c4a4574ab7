"""Checks the model class in the trial environment, after containerize and before resources.

A model that cannot be imported there, has no ``score``, takes the wrong arguments or whose
constructor needs arguments would otherwise be found only when every trial fails. The check
runs ``python -P -m ultron.worker.inspect_model MODEL CODE_PATH ...`` with the environment's
interpreter: the model is imported as a trial process imports it (the code base's names
first, the current folder off ``sys.path``), and constructed once with no arguments. The
module is named, not imported: the worker room sits above this one.

Example::

    env = build_environment(job.code, cache_dir=cache_dir)
    check_model(str(env.python), import_paths(env.source), job.model)
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ultron.errors import CodeBaseError, ConfigIssue, SpecError

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
