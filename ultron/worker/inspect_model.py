"""Checks a model class in the trial environment, the way a trial process will load it.

Run with the trial environment's interpreter, by :func:`ultron.containerize.modelcheck.check_model`
after containerize and before any resources are taken::

    python -P -m ultron.worker.inspect_model MODULE:CLASS [CODE_PATH ...]

The code base's names are claimed as in :mod:`ultron.worker.process`, the class is imported and
constructed with no arguments, and its ``score`` must take ``(hyperparameters, checkpoint_path,
resume)`` positionally. The last line on stdout is one JSON object, ``{"problems": [{"rule":
..., "fix": ...}, ...]}``; whatever the user's code prints goes to stderr.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
import traceback
import types
from collections.abc import Sequence
from typing import Any

from ultron.usercode import claim_names

__all__ = ["inspect_model", "main"]

# What a trial passes to score, positionally.
_SCORE_ARGS: tuple[dict[str, Any], str, bool] = ({}, "checkpoint", False)
_SCORE_CALL = "score(hyperparameters, checkpoint_path, resume)"
_SCORE_DEF = "def score(self, hyperparameters, checkpoint_path, resume)"


def _problem(rule: str, fix: str) -> dict[str, str]:
    return {"rule": rule, "fix": fix}


def _raised(exc: BaseException) -> str:
    """The exception and where in the user's code it was raised."""
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if frame.filename != __file__
        and not frame.filename.startswith(("<frozen", os.path.dirname(importlib.__file__)))
    ]
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _import(path: str) -> tuple[Any, list[dict[str, str]]]:
    module_name, _, class_name = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except BaseException as exc:  # the user's import may raise anything, SystemExit included
        rule = f"importing {module_name} must succeed in the trial environment ({_raised(exc)})"
        missing = getattr(exc, "name", None) if isinstance(exc, ImportError) else None
        if missing and f"{module_name}.".startswith(f"{missing}."):
            fix = "fix the module path in model (the part before the colon)"
        elif missing:
            fix = f"declare {missing}'s distribution in the code base's dependencies"
        else:
            fix = "fix what the import raises; run the import yourself to see it whole"
        return None, [_problem(rule, fix)]
    try:
        return getattr(module, class_name), []
    except Exception:  # AttributeError, or whatever a module __getattr__ raises
        names = sorted(n for n in vars(module) if not n.startswith("_"))[:20]
        rule = f"{module_name} must define {class_name} (it has: {', '.join(names) or 'nothing'})"
        return None, [_problem(rule, "fix the class name, or define it in the module")]


def _signature_problem(score: Any, name: str) -> dict[str, str] | None:
    """Why ``score(hyperparameters, checkpoint_path, resume)`` cannot be called, if it cannot."""
    if not callable(score):
        return _problem(
            f"{name}.score must be a method, and it is {type(score).__name__}",
            f"define {_SCORE_DEF}",
        )
    if inspect.iscoroutinefunction(score):
        return _problem(
            f"{name}.score must be a plain method, not async",
            "remove async (run any event loop inside score)",
        )
    try:
        inspect.signature(score).bind(*_SCORE_ARGS)
    except TypeError as exc:
        return _problem(
            f"ultron calls {_SCORE_CALL} positionally, and {name}.score refuses ({exc})",
            f"define {_SCORE_DEF}",
        )
    except ValueError:
        return None  # no signature to read (a builtin): the trial will tell
    return None


def _class_score(cls: Any) -> Any:
    """``cls.score`` as an instance would see it: with ``self`` bound to a stand-in."""
    raw = inspect.getattr_static(cls, "score")
    if isinstance(raw, staticmethod | classmethod) or not inspect.isfunction(raw):
        return cls.score
    return types.MethodType(raw, object())  # self bound, so the signature drops it


def inspect_model(path: str) -> list[dict[str, str]]:
    """The problems of the model class at ``path`` (``module:Class``); empty when none."""
    model, problems = _import(path)
    if model is None:
        return problems
    name = getattr(model, "__name__", path)
    if not callable(model):
        return [
            _problem(
                f"{path} must be a class, and it is {type(model).__name__}",
                "point model at the class that has score()",
            )
        ]
    if isinstance(model, type) and not hasattr(model, "score"):
        return [
            _problem(
                f"{name} must have a method score(), and it has none",
                f"add {_SCORE_DEF} to {name}",
            )
        ]
    if isinstance(model, type):
        problem = _signature_problem(_class_score(model), name)
        problems += [problem] if problem else []
    fix = "give every __init__ argument a default; hyper-parameters reach score()"
    try:
        inspect.signature(model).bind()
    except TypeError as exc:
        rule = f"ultron constructs {name}() with no arguments, and it needs some ({exc})"
        return [*problems, _problem(rule, fix)]
    except ValueError:
        pass  # no signature to read: constructing it tells
    try:
        instance = model()
    except BaseException as exc:  # the user's constructor may raise anything
        rule = f"ultron constructs {name}() with no arguments, and it raised {_raised(exc)}"
        return [*problems, _problem(rule, fix)]
    if not isinstance(model, type):  # a factory: judge what it made
        score = getattr(instance, "score", None)
        problem = (
            _signature_problem(score, name)
            if score is not None
            else _problem(f"{name}() must make an object with score()", "return the model")
        )
        problems += [problem] if problem else []
    return problems


def main(argv: Sequence[str]) -> int:
    """Print the problems of ``argv[0]`` (``module:Class``) as one JSON line; 0 when none."""
    result = os.dup(1)
    os.dup2(2, 1)  # what the user's code prints must not mix with the answer
    sys.stdout = sys.stderr
    claim_names(argv[1:])
    problems = inspect_model(argv[0])
    with os.fdopen(result, "w") as out:
        out.write(json.dumps({"problems": problems}) + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stderr.flush()
    os._exit(code)  # a thread or an atexit hook the user's import started must not hold us
