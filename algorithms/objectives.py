"""Several objectives and constraints: what a trial's metrics mean, Pareto dominance and the
hypervolume of a front.

Pure functions over plain numbers; the master, the result files and the benchmarks use them, and
the multi-objective strategies are told each trial's metrics (a dict) instead of one score.

Conventions: a :class:`Goal` is one objective (a metric and whether it is minimized or
maximized); a :class:`Bound` is one constraint (a metric with a lower and/or an upper bound). A
trial is *feasible* when every bound holds; its *violation* is how far it is outside them in
total (0 when feasible), which Optuna's ``constraints_func`` convention takes as "<= 0 is
feasible" per bound (:meth:`Bound.excesses`).

Example:
    >>> goals = (Goal("accuracy", Direction.MAXIMIZE), Goal("latency_ms", Direction.MINIMIZE))
    >>> points = [{"accuracy": 0.9, "latency_ms": 50.0}, {"accuracy": 0.8, "latency_ms": 60.0},
    ...           {"accuracy": 0.7, "latency_ms": 20.0}]
    >>> pareto_indices([losses(p, goals) for p in points])
    [0, 2]
    >>> Bound("memory_mb", high=2000.0).excesses({"memory_mb": 2500.0})
    [500.0]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ultron.algorithms.base import Direction

__all__ = [
    "Bound",
    "Goal",
    "dominates",
    "feasible",
    "hypervolume",
    "losses",
    "nondominated_ranks",
    "pareto_indices",
    "violation",
]


@dataclass(frozen=True)
class Goal:
    """One objective: a reported metric and its direction."""

    metric: str
    direction: Direction = Direction.MINIMIZE

    def loss(self, value: float) -> float:
        """``value`` as a loss: lower is better whatever the direction."""
        return -float(value) if self.direction is Direction.MAXIMIZE else float(value)


@dataclass(frozen=True)
class Bound:
    """One constraint: ``low <= metrics[metric] <= high`` (either side may be open)."""

    metric: str
    low: float | None = None
    high: float | None = None

    def excesses(self, metrics: Mapping[str, Any]) -> list[float]:
        """One number per side given, each ``<= 0`` when that side holds (Optuna's convention).

        A missing or non-finite value violates every side by infinity: it cannot be judged
        feasible.
        """
        value = _number(metrics.get(self.metric))
        sides: list[float] = []
        if self.low is not None:
            sides.append(math.inf if value is None else self.low - value)
        if self.high is not None:
            sides.append(math.inf if value is None else value - self.high)
        return sides


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def violation(metrics: Mapping[str, Any], bounds: Sequence[Bound]) -> float:
    """How far ``metrics`` are outside ``bounds`` in total; 0 when feasible."""
    return sum(max(0.0, side) for bound in bounds for side in bound.excesses(metrics))


def feasible(metrics: Mapping[str, Any], bounds: Sequence[Bound]) -> bool:
    """Whether ``metrics`` satisfy every bound."""
    return violation(metrics, bounds) == 0.0


def losses(metrics: Mapping[str, Any], goals: Sequence[Goal]) -> tuple[float, ...]:
    """The objectives of ``metrics`` as losses (lower is better), in the order of ``goals``."""
    return tuple(goal.loss(metrics[goal.metric]) for goal in goals)


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether loss vector ``a`` Pareto-dominates ``b``: no worse anywhere, better somewhere."""
    return all(x <= y for x, y in zip(a, b, strict=True)) and any(
        x < y for x, y in zip(a, b, strict=True)
    )


def nondominated_ranks(points: Sequence[Sequence[float]]) -> list[int]:
    """The non-dominated sorting rank of each loss vector: 0 for the Pareto front, 1 for the
    front once that one is removed, and so on (Deb et al.'s NSGA-II sorting).

    Example:
        >>> nondominated_ranks([(1, 2), (2, 1), (2, 2), (3, 3)])
        [0, 0, 1, 2]
    """
    ranks = [-1] * len(points)
    left = set(range(len(points)))
    rank = 0
    while left:
        front = {i for i in left if not any(dominates(points[j], points[i]) for j in left)}
        for i in front:
            ranks[i] = rank
        left -= front
        rank += 1
    return ranks


def pareto_indices(points: Sequence[Sequence[float]]) -> list[int]:
    """The indices of the non-dominated loss vectors, in their order (duplicates all kept)."""
    return [i for i, rank in enumerate(nondominated_ranks(points)) if rank == 0]


def hypervolume(points: Sequence[Sequence[float]], reference: Sequence[float]) -> float:
    """The volume dominated by the loss vectors ``points`` and bounded by ``reference``.

    Points not strictly better than the reference in every loss add nothing. Exact, by slicing
    along the first loss (fine for the fronts of a few hundred trials in two or three losses).

    Example:
        >>> hypervolume([(0.0, 1.0), (1.0, 0.0)], reference=(2.0, 2.0))
        3.0
    """
    inside = [
        tuple(map(float, p))
        for p in points
        if all(x < r for x, r in zip(p, reference, strict=True))
    ]
    return _slice_volume(inside, tuple(map(float, reference)))


def _slice_volume(points: list[tuple[float, ...]], reference: tuple[float, ...]) -> float:
    if not points:
        return 0.0
    if len(reference) == 1:
        return reference[0] - min(p[0] for p in points)
    points = sorted(points)
    volume = 0.0
    for i, point in enumerate(points):
        upper = points[i + 1][0] if i + 1 < len(points) else reference[0]
        width = upper - point[0]
        if width > 0:
            # Between this point's first loss and the next one's, the points so far dominate.
            volume += width * _slice_volume([p[1:] for p in points[: i + 1]], reference[1:])
    return volume
