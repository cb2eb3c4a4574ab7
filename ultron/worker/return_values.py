"""What a trial's ``score`` returned, as the trial table records it.

The objective must be a real number: an int, a float, a numpy number or a 0-d array (numpy,
torch); ``None``, text (even ``"0.25"``) and booleans are refused, each with an error that names
the value, its type and the fix. Beside it, a dict may hold other numbers (kept as floats) and
values that JSON records as they are. The trial process (:mod:`ultron.worker.process`) turns
what ``score`` returned into the row's score and metrics here; a ``ValueError`` from these
functions makes the trial ``failed`` with that message.

Example:
    >>> objective_and_metrics({"loss": 0.25, "epochs": 3, "note": "ok"}, "loss")
    (0.25, {'loss': 0.25, 'epochs': 3.0, 'note': 'ok'})
    >>> recordable({"loss": 0.25, "grad": float("nan")})[0]
    {'loss': 0.25, 'grad': None}
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from ultron.strict_json import finite

__all__ = ["add_asked_metrics", "brief", "objective_and_metrics", "recordable"]


def objective_and_metrics(value: Any, metric: str) -> tuple[float, dict[str, Any]]:
    """The objective and all metrics from what ``score`` returned; ValueError if unusable.

    The objective must be a real number: an int, a float, a numpy number or a 0-d array;
    ``None``, text (even ``"0.25"``) and booleans are refused. Beside it, a dict may hold other
    numbers (kept as floats) and values that JSON records as they are: text, booleans,
    ``None``, lists and mappings of those.
    """
    if not isinstance(value, Mapping):
        objective = _real(value, "score() returned", metric)
        return objective, {metric: objective}
    if metric not in value:
        raise ValueError(
            f"score() returned a dict without the objective metric {metric!r} "
            f"(keys: {sorted(map(str, value))}); return it, or set objective.metric to one of them"
        )
    metrics: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise ValueError(
                f"score() returned a dict with the key {key!r} ({_kind(key)}); keys must be "
                f"text. Fix: use str keys, e.g. {str(key)!r}"
            )
        where = f"score() returned {key!r}:"
        metrics[key] = _real(item, where, metric) if key == metric else _extra(item, where)
    return metrics[metric], metrics


def add_asked_metrics(value: Any, metrics: dict[str, Any], asked: Sequence[str]) -> None:
    """Several objectives or constraints: ``score`` returned each asked metric as a finite
    number; a ValueError names the first that is missing or unusable."""
    for name in asked:
        if not isinstance(value, Mapping) or name not in value:
            got = sorted(map(str, value)) if isinstance(value, Mapping) else "a bare number"
            raise ValueError(
                f"score() returned no {name!r} (got {got}); the job's objectives and "
                f"constraints need {', '.join(map(repr, asked))}. Fix: return a dict holding "
                "each of them, e.g. {" + ", ".join(f"{n!r}: ..." for n in asked) + "}"
            )
        metrics[name] = _real(value[name], f"score() returned {name!r}:", name)


def _kind(value: Any) -> str:
    """The type's name as a user reads it: ``str``, ``numpy.bool``, ``torch.Tensor``."""
    kind = type(value)
    module = "" if kind.__module__ == "builtins" else f"{kind.__module__}."
    return f"{module}{kind.__qualname__}"


def _scalar(value: Any) -> Any:
    """A 0-d array's (numpy, torch) Python value; anything else as it is."""
    if not isinstance(value, numbers.Number) and getattr(value, "ndim", None) == 0:
        item = getattr(value, "item", None)
        if callable(item):
            return item()
    return value


def _real(value: Any, where: str, metric: str) -> float:
    """``value`` as a finite float, or a ValueError that names it, its type and the fix."""
    item = _scalar(value)
    if isinstance(item, numbers.Real) and not isinstance(item, bool):
        try:
            number = float(item)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise ValueError(
                f"{where} {brief(value)}; the objective {metric!r} must be a finite number. Fix: "
                "return a finite loss or accuracy (a nan often means training diverged: try a "
                "lower learning rate)"
            )
        return number
    if item is None:
        rule = "it must be a number, and None usually means score() has no return statement"
        fix = f"end score() with `return {{{metric!r}: float(...)}}` or `return float(...)`"
    elif isinstance(item, str | bytes):
        rule = "it must be a number, not text (even text that reads as a number)"
        fix = "return float(...) of the metric, not a string"
    elif isinstance(item, bool) or _kind(item) in ("numpy.bool", "numpy.bool_"):
        rule = "it must be a number, and a boolean is not a score"
        fix = "return the loss or the accuracy as a float"
    else:
        rule = "it must be a real number (an int, a float or a numpy number)"
        fix = "return float(...) of the metric, or a dict holding it"
    raise ValueError(
        f"{where} {brief(value)} ({_kind(value)}) as the objective {metric!r}; {rule}. Fix: {fix}"
    )


def _extra(value: Any, where: str) -> Any:
    """A metric beside the objective, as the trial table records it (JSON)."""
    item = _scalar(value)
    if isinstance(item, bool) or _kind(item) in ("numpy.bool", "numpy.bool_"):
        return bool(item)
    if isinstance(item, numbers.Real):
        try:
            return float(item)
        except OverflowError:
            return math.copysign(math.inf, item)
    try:
        return json.loads(json.dumps(item))  # a fresh copy of what JSON records
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{where} {brief(value)} ({_kind(value)}); a metric beside the objective must be "
            f"a number, text, a boolean, None, or a list or dict of those, and this one cannot "
            f"be recorded ({exc}). Fix: convert it (float(...), str(...), or .tolist() for an "
            "array), or leave it out of the dict"
        ) from None


def recordable(metrics: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The metrics as strict JSON records them: a non-finite extra (NaN, infinity) becomes
    ``None``, and a note names its key and value (the objective is finite: :func:`_real`)."""
    clean, replaced = finite(metrics)
    notes = [
        f"metric {path} was {value!r}, not a finite number; recorded as null (JSON has no NaN "
        "or infinity)"
        for path, value in replaced
    ]
    return clean, notes


def brief(value: Any) -> str:
    """``repr(value)``, cut to 80 characters for an error message."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."
