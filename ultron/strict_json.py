"""Strict JSON for every file a job writes: no ``NaN``, no ``Infinity``.

Python's :func:`json.dumps` writes ``NaN`` and ``Infinity`` by default, which are not JSON:
JavaScript's ``JSON.parse``, ``jq`` and Python's own strict parsers refuse the whole file. A
non-finite number (an extra metric of a diverged model, a reported loss of ``nan``) is
recorded as ``null``; where it comes from a trial, the trial's ``notes`` say which key held
what (:func:`finite`).

Example:
    >>> finite({"loss": 0.5, "aux": float("nan"), "curve": [1.0, float("inf")]})
    ({'loss': 0.5, 'aux': None, 'curve': [1.0, None]}, [('aux', nan), ('curve[1]', inf)])
    >>> dumps({"aux": float("nan")})
    '{"aux": null}'
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["dumps", "finite"]


def finite(value: Any, path: str = "") -> tuple[Any, list[tuple[str, float]]]:
    """``value`` with every non-finite float replaced by ``None``, and the paths replaced.

    Args:
        value: a JSON-like value (dicts, lists, tuples, numbers, text, booleans, None).
        path: the path of ``value`` itself, prefixed to the paths returned.

    Returns:
        The cleaned copy (tuples become lists, as JSON writes them) and, for each value that
        was not finite, its dotted path (``aux``, ``curve[1]``, ``nested.key``) and the value.
    """
    if isinstance(value, float):
        return (value, []) if math.isfinite(value) else (None, [(path or "(value)", value)])
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        replaced: list[tuple[str, float]] = []
        for key, item in value.items():
            out[key], found = finite(item, f"{path}.{key}" if path else str(key))
            replaced += found
        return out, replaced
    if isinstance(value, list | tuple):
        items: list[Any] = []
        replaced = []
        for index, item in enumerate(value):
            clean, found = finite(item, f"{path}[{index}]")
            items.append(clean)
            replaced += found
        return items, replaced
    return value, []


def dumps(value: Any, **options: Any) -> str:
    """Strict JSON text of ``value`` (``json.dumps`` options apply); non-finite numbers are
    written as ``null``, and ``allow_nan=False`` makes sure nothing else slips through."""
    return json.dumps(finite(value)[0], allow_nan=False, **options)
