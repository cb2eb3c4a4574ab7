"""Fitting earlier jobs' configurations into a new search space, for a warm start.

A warm-started job tells its strategy the finished trials of earlier jobs before it proposes
anything. Their space may differ from the new one; :func:`project` fits each configuration in:

- a value inside its new domain is kept as it is;
- a number outside a numeric domain is clipped to its bounds (an integer domain rounds first):
  the configuration is *projected*;
- a hyper-parameter the new space no longer has, or one inactive there (a conditional space),
  is left out: *projected* too;
- a value not among a choice's new values, a non-number in a numeric domain, or a
  hyper-parameter of the new space that the old configuration lacks (its score was measured
  with some value nobody recorded): the configuration is *dropped*.

Example:
    >>> from ultron.algorithms.space import Choice, IntRange, SearchSpace, Uniform
    >>> space = SearchSpace(
    ...     {"lr": Uniform(0.0, 0.5), "opt": Choice(("adam",)), "n": IntRange(1, 4)}
    ... )
    >>> fitted = project({"lr": 0.9, "opt": "adam", "n": 2.0, "wd": 0.1}, space)
    >>> fitted.config, str(fitted.fit)
    ({'lr': 0.5, 'opt': 'adam', 'n': 2}, 'projected')
    >>> fitted.why
    'lr clipped 0.9 -> 0.5; left out wd (not in this space)'
    >>> project({"lr": 0.1, "opt": "sgd", "n": 2}, space).why
    "opt 'sgd' is not among its choices"
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ultron.algorithms.space import Choice, Config, Domain, IntRange, SearchSpace

__all__ = ["Fit", "Projection", "project"]


class Fit(StrEnum):
    """How an earlier configuration fits the new space."""

    KEPT = "kept"  # inside the new space as it was
    PROJECTED = "projected"  # clipped into bounds, or a parameter the space lost left out
    DROPPED = "dropped"  # cannot be told: see Projection.why


@dataclass(frozen=True)
class Projection:
    """What became of one configuration: the configuration to tell (``None`` when dropped),
    how it fits and why (empty when kept)."""

    config: Config | None
    fit: Fit
    why: str = ""


def project(config: Mapping[str, Any], space: SearchSpace) -> Projection:
    """``config`` fitted into ``space`` (see the module's docstring for the rules).

    In a conditional space only the parameters active in the fitted configuration count: a
    parameter inactive there is left out, and one that became active (its condition now holds)
    but has no value drops the configuration. A list is fitted element by element (its
    length clipped like any integer, the elements past it left out).
    """
    try:
        flat = space.flatten(config)
    except ValueError as exc:
        return Projection(None, Fit.DROPPED, str(exc))
    fitted: Config = {}
    changes: list[str] = []
    for param in space.params:
        name = param.name
        if not space.is_active(name, fitted):
            continue
        if name not in flat:
            return Projection(None, Fit.DROPPED, f"it has no value for {name}")
        value, change = _fit_value(param.domain, flat[name])
        if change is None:
            return Projection(None, Fit.DROPPED, f"{name} {flat[name]!r} {_rule(param.domain)}")
        fitted[name] = value
        if change:
            changes.append(f"{name} {change}")
    lost = sorted(set(flat) - set(space))
    inactive = sorted(set(flat) & set(space) - set(fitted))
    if lost:
        changes.append(f"left out {', '.join(lost)} (not in this space)")
    if inactive:
        changes.append(f"left out {', '.join(inactive)} (inactive here)")
    nested = space.nest(fitted)
    if not changes:
        return Projection(nested, Fit.KEPT)
    return Projection(nested, Fit.PROJECTED, "; ".join(changes))


def _fit_value(domain: Domain, value: Any) -> tuple[Any, str | None]:
    """The value inside ``domain`` and what changed (``""``: nothing; ``None``: it cannot fit)."""
    if domain.contains(value):
        return (int(value) if isinstance(domain, IntRange) else value), ""  # 2.0 is 2
    if isinstance(domain, Choice) or not _is_number(value) or not math.isfinite(float(value)):
        return None, None
    number = float(value)
    if isinstance(domain, IntRange):
        fitted: float | int = int(min(max(round(number), domain.low), domain.high))
    else:
        fitted = float(min(max(number, domain.low), domain.high))
    verb = "clipped" if number < domain.low or number > domain.high else "rounded"
    return fitted, f"{verb} {value!r} -> {fitted!r}"


def _rule(domain: Domain) -> str:
    if isinstance(domain, Choice):
        return "is not among its choices"
    return "is not a finite number"


def _is_number(value: Any) -> bool:
    # Values come from stored trial rows (JSON): Python numbers only.
    return isinstance(value, int | float) and not isinstance(value, bool)
