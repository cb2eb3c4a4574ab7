"""The rules a search space's conditions keep across entries (``when: {optimizer: sgd}``).

An entry's own fields are checked by its model (:mod:`ultron.spec.space`); what needs the
whole space is checked here, once every entry parsed: a condition names a parameter of the
space, that parameter is a choice, the values asked are among its choices, and no conditions
form a cycle. Each error names the field (``search_space.momentum.when.optimizer``), the
value, the rule and the fix.

Example:
    >>> from ultron.spec.space import parse_entry
    >>> space = {"optimizer": parse_entry(["adam", "sgd"]),
    ...          "momentum": parse_entry({"type": "uniform", "low": 0, "high": 0.9,
    ...                                   "when": {"optimizer": "sgd"}})}
    >>> check_conditions(space)
    >>> check_conditions({**space, "momentum": parse_entry(
    ...     {"type": "uniform", "low": 0, "high": 0.9, "when": {"optimizer": "sdg"}})})
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.PydanticCustomError: it must be among the choices of optimizer: \
'adam', 'sgd'
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from ultron.algorithms.conditional import condition_cycle
from ultron.spec.space import ChoiceSpec
from ultron.spec.strict import rule_error

__all__ = ["check_conditions"]


def check_conditions(entries: Mapping[str, Any]) -> None:
    """Raise the first broken rule among the ``when`` of ``entries`` (name -> parsed entry).

    Raises:
        PydanticCustomError: a ``rule_error`` whose ``where`` is the path below the space.
    """
    for name, entry in entries.items():
        for parent, wanted in (entry.when or {}).items():
            _check_parent(entries, name, parent, wanted)
    parents = {name: list(entry.when or {}) for name, entry in entries.items()}
    cycle = condition_cycle(parents)
    if cycle is not None:
        first = cycle[0]
        raise rule_error(
            f"conditions form a cycle ({' -> '.join(cycle)}): none of them could ever be active",
            "remove the when of one of them",
            where=f"{first}.when.{cycle[1]}",
            value=entries[first].when[cycle[1]],
        )


def _check_parent(entries: Mapping[str, Any], name: str, parent: str, wanted: Any) -> None:
    where = f"{name}.when.{parent}"
    if parent == name:
        raise rule_error(
            f"{name}'s condition names {name} itself",
            "name another parameter, a choice",
            where=where,
            value=wanted,
        )
    if parent not in entries:
        close = difflib.get_close_matches(parent, list(entries), n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise rule_error(
            f"when names {parent}, which is not a parameter of the search space",
            f"{hint}name a choice parameter of the search space",
            where=where,
            value=parent,
        )
    entry = entries[parent]
    if not isinstance(entry, ChoiceSpec):
        raise rule_error(
            f"a condition's parameter must be a choice, and {parent} is of type {entry.type}",
            f"condition on a choice parameter, or make {parent} a choice ([a, b, c])",
            where=where,
            value=wanted,
        )
    choices = ChoiceSpec(type="choice", values=list(entry.values)).to_domain()
    for value in wanted if isinstance(wanted, list) else [wanted]:
        if not choices.contains(value):
            listed = ", ".join(repr(v) for v in entry.values)
            close = difflib.get_close_matches(str(value), [str(v) for v in entry.values], n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise rule_error(
                f"it must be among the choices of {parent}: {listed}",
                f"{hint}write one of the choices of {parent}",
                where=where,
                value=value,
            )
