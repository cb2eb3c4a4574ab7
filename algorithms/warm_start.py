"""Fitting earlier jobs' configurations into a new search space, for a warm start.

A warm-started job tells its strategy the finished trials of earlier jobs before it proposes
anything. Their space may differ from the new one; :func:`project` fits each configuration in:

- a value inside its new domain is kept as it is;
- a number outside a numeric domain is clipped to its bounds (an integer domain rounds first):
  the configuration is *projected*;
- a hyper-parameter the new space no longer has is left out: *projected* too;
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
    """``config`` fitted into ``space`` (see the module's docstring for the rules)."""
    fitted: Config = {}
    changes: list[str] = []
    for name, domain in space.items():
        if name not in config:
            return Projection(None, Fit.DROPPED, f"it has no value for {name}")
        value, change = _fit_value(domain, config[name])
        if change is None:
            return Projection(None, Fit.DROPPED, f"{name} {config[name]!r} {_rule(domain)}")
        fitted[name] = value
        if change:
            changes.append(f"{name} {change}")
    lost = sorted(set(config) - set(space))
    if lost:
        changes.append(f"left out {', '.join(lost)} (not in this space)")
    if not changes:
        return Projection(fitted, Fit.KEPT)
    return Projection(fitted, Fit.PROJECTED, "; ".join(changes))


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
