"""Regressions between two benchmark reports: a strategy whose mean best score got worse by
more than its spread.

Example:
    >>> from ultron.algorithms.base import Direction
    >>> before = {"svm": [{"strategy": "tpe", "mean": 0.10, "std": 0.01}]}
    >>> after = {"svm": [{"strategy": "tpe", "mean": 0.15, "std": 0.02}]}
    >>> [str(r) for r in find_regressions(after, before, {"svm": Direction.MINIMIZE})]
    ['svm / tpe: mean best 0.15 against 0.1 before, worse by 0.05, beyond the spread 0.02']
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ultron.algorithms.base import Direction

__all__ = ["Regression", "find_regressions"]

Summaries = Mapping[str, Sequence[Mapping[str, Any]]]  # problem -> summary rows


@dataclass(frozen=True)
class Regression:
    """A strategy that got worse on a problem than in the previous report."""

    problem: str
    strategy: str
    mean: float
    previous_mean: float
    spread: float

    @property
    def worse_by(self) -> float:
        return abs(self.mean - self.previous_mean)

    def __str__(self) -> str:
        return (
            f"{self.problem} / {self.strategy}: mean best {self.mean:.6g} against "
            f"{self.previous_mean:.6g} before, worse by {self.worse_by:.6g}, beyond the spread "
            f"{self.spread:.6g}"
        )


def find_regressions(
    current: Summaries, previous: Summaries, directions: Mapping[str, Direction]
) -> list[Regression]:
    """Strategies whose mean got worse than before by more than the larger of the two
    standard deviations (the spread over seeds). A strategy or problem in only one of the
    reports is not compared."""
    found = []
    for problem, rows in current.items():
        before = {row["strategy"]: row for row in previous.get(problem, [])}
        sign = 1.0 if directions.get(problem, Direction.MINIMIZE) is Direction.MINIMIZE else -1.0
        for row in rows:
            old = before.get(row["strategy"])
            if old is None or not all(map(math.isfinite, (row["mean"], old["mean"]))):
                continue
            worse = sign * (float(row["mean"]) - float(old["mean"]))
            spread = max(float(row["std"]), float(old["std"]))
            # A hair above the spread is noise in the last digits, not a regression.
            if worse > spread + 1e-9 * max(1.0, abs(float(old["mean"]))):
                found.append(Regression(problem, row["strategy"], row["mean"], old["mean"], spread))
    return found
