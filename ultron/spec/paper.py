"""The paper's Fig. 2 keys (``jobname``, ``model_classname``, ``hp_ranges``, ...) and where each
lands in our spec: one mapping, used by the loader (files, mappings) and by ``JobSpec`` itself
(a spec posted straight to the flow).

Example:
    >>> data, names, issues = from_paper({"jobname": "demo", "parallelism_fact": 2})
    >>> data, names[("name",)], issues
    ({'name': 'demo', 'parallelism': 2}, 'jobname', [])
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ultron.errors import ConfigIssue

__all__ = ["PAPER_KEYS", "PAPER_KEY_NAMES", "PAPER_MODEL_KEYS", "from_paper"]

# The paper's Fig. 2 keys and where each lands in our spec.
PAPER_KEYS: dict[str, tuple[str, ...]] = {
    "jobname": ("name",),
    "file_name": ("code",),
    "hp_ranges": ("search_space",),
    "parallelism_fact": ("parallelism",),
    "compute": ("resources", "compute"),
    "cpu_per_pod": ("resources", "cpu"),
    "memory_per_pod": ("resources", "memory"),
    "gpu_per_pod": ("resources", "gpu"),
}
PAPER_MODEL_KEYS = ("model_classname", "module_name", "package_name")

PAPER_KEY_NAMES = frozenset(PAPER_KEYS) | frozenset(PAPER_MODEL_KEYS)
"""Every key of the paper's Fig. 2 that is not one of ours."""

# The paper's number keys; its Fig. 2 writes some as text ("cpu_per_pod": "5").
_PAPER_NUMBERS = frozenset({"parallelism_fact", "cpu_per_pod", "gpu_per_pod"})
_NUMBER = re.compile(r"^\s*-?\d+(\.\d*)?([eE][-+]?\d+)?\s*$")


def _paper_number(value: Any) -> Any:
    """A number the paper wrote as text, as a number (an int when whole); else ``value``:
    the field's own check refuses it then, under the paper's name."""
    if not isinstance(value, str) or not _NUMBER.match(value):
        return value
    number = float(value)
    return int(number) if number.is_integer() and abs(number) < 2**53 else number


def from_paper(
    raw: dict[str, Any],
) -> tuple[dict[str, Any], dict[tuple[str, ...], str], list[ConfigIssue]]:
    """Map the paper's keys to ours; return the data, our-path -> user's-name renames, and a
    problem for each field that two keys set (``name`` and ``jobname``)."""
    data: dict[str, Any] = {}
    names: dict[tuple[str, ...], str] = {}
    placed = _Placed(data)
    for key, value in raw.items():
        if key in PAPER_MODEL_KEYS:
            continue
        target = PAPER_KEYS.get(key, (key,))
        if key in PAPER_KEYS:
            names[target] = key
        if key in _PAPER_NUMBERS:
            value = _paper_number(value)
        placed.put(target, key, value)
    if "model_classname" in raw or "module_name" in raw:
        module = str(raw.get("module_name", ""))
        if raw.get("package_name"):
            module = f"{raw['package_name']}.{module}"
        name = "model_classname/module_name/package_name"
        placed.put(("model",), name, f"{module}:{raw.get('model_classname', '')}")
        names[("model",)] = name
    if isinstance(data.get("strategy"), str) and data["strategy"].isupper():
        data["strategy"] = data["strategy"].lower()  # the paper writes RANDOM, TPE
    return data, names, placed.issues


class _Placed:
    """Puts values at their paths in ``data`` and reports a path that two keys set."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.by: dict[tuple[str, ...], str] = {}  # path -> the key the user wrote for it
        self.issues: list[ConfigIssue] = []

    def put(self, target: tuple[str, ...], key: str, value: Any) -> None:
        if target in self.by:
            self._clash(key, value, self.by[target], target)
            return
        self.by[target] = key
        first, current = target[0], self.data.get(target[0])
        if len(target) > 1:  # a paper key for a nested field (cpu_per_pod -> resources.cpu)
            if current is None or isinstance(current, Mapping):
                self.data[first] = {**(current or {}), target[1]: value}  # the user's dict stays
            return
        if isinstance(current, Mapping) and isinstance(value, Mapping):  # paper keys came first
            for sub in value:
                if (first, str(sub)) in self.by:
                    other = self.by[(first, str(sub))]
                    self._clash(f"{key}.{sub}", value[sub], other, (first, str(sub)))
            self.data[first] = {**value, **current}
        else:
            self.data[first] = value
        if isinstance(value, Mapping):
            self.by.update({(first, str(sub)): f"{key}.{sub}" for sub in value})

    def _clash(self, key: str, value: Any, other: str, target: tuple[str, ...]) -> None:
        self.issues.append(
            ConfigIssue(
                key,
                value,
                f"it sets {'.'.join(target)}, and so does {other}; a field may be set once",
                f"keep one of {other} and {key}",
            )
        )
