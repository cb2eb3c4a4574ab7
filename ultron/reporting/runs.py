"""One seeded job as the reports see it, and the statistics over seeds.

A :class:`SeedRun` is read from a job's trial table (real or simulated): each trial's score in
sampling order (trial id) and when it ended, in seconds after the job's first trial started.
:func:`summarize` gives each strategy's mean and standard deviation of the best score over
its seeds (the paper's section III: N jobs that differ only in their seed).

Example:
    >>> from ultron.algorithms.base import Direction
    >>> runs = [SeedRun("tpe", 0, "j0", (0.5, 0.7), (1.0, 2.0)),
    ...         SeedRun("tpe", 1, "j1", (0.9, None), (1.0, 2.0))]
    >>> best_so_far(runs[1].scores, Direction.MAXIMIZE)
    [0.9, 0.9]
    >>> row = summarize(runs, Direction.MAXIMIZE)[0]
    >>> row.strategy, row.best_by_seed, round(row.mean, 3), round(row.std, 3)
    ('tpe', {0: 0.7, 1: 0.9}, 0.8, 0.141)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ultron.algorithms.base import Direction
from ultron.trial_records import TrialResult

__all__ = ["SeedRun", "StrategySummary", "best_so_far", "run_from_trials", "summarize"]


@dataclass(frozen=True)
class SeedRun:
    """One job of an experiment.

    Attributes:
        strategy: the label of what was compared (a strategy, or strategy+stopper).
        seed: the job's seed.
        job_id: the job's id (its results lie under ``<storage>/<job_id>``).
        scores: each trial's objective in trial-id order; ``None`` for a trial without a score.
        times: seconds after the job's first trial started when each trial ended.
    """

    strategy: str
    seed: int
    job_id: str
    scores: tuple[float | None, ...]
    times: tuple[float, ...]

    def best(self, direction: Direction) -> float | None:
        """The best score of the job, ``None`` when no trial scored."""
        curve = [v for v in best_so_far(self.scores, direction) if not math.isnan(v)]
        return curve[-1] if curve else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "seed": self.seed,
            "job_id": self.job_id,
            "scores": list(self.scores),
            "times": list(self.times),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SeedRun:
        return cls(
            str(data["strategy"]),
            int(data["seed"]),
            str(data["job_id"]),
            tuple(data["scores"]),
            tuple(float(t) for t in data["times"]),
        )


def best_so_far(scores: Iterable[float | None], direction: Direction) -> list[float]:
    """The best score after each trial (``nan`` until a trial scored)."""
    best, out = math.nan, []
    for score in scores:
        if score is not None and not math.isnan(score):
            if math.isnan(best):
                best = float(score)
            elif direction is Direction.MAXIMIZE:
                best = max(best, float(score))
            else:
                best = min(best, float(score))
        out.append(best)
    return out


def run_from_trials(
    strategy: str,
    seed: int,
    job_id: str,
    trials: Sequence[TrialResult],
    curves: Mapping[str, Sequence[Mapping[str, Any]]],
) -> SeedRun:
    """A :class:`SeedRun` from a job's trial table and its curves (``curves.json``).

    A trial ended at the time of its last report (``ultron.report`` stamps each); it started
    ``duration`` seconds before. A trial without reports (answered by the score cache) ended
    with the trial before it.
    """
    ordered = sorted(trials, key=lambda t: t.trial_id)
    ends: list[float | None] = []
    for trial in ordered:
        stamps = [float(r["time"]) for r in curves.get(trial.trial_id, []) if "time" in r]
        ends.append(max(stamps) if stamps else None)
    starts = [e - t.duration for e, t in zip(ends, ordered, strict=True) if e is not None]
    origin = min(starts) if starts else 0.0
    times, last = [], 0.0
    for end in ends:
        last = end - origin if end is not None else last
        times.append(round(last, 3))
    scores = tuple(t.score if t.status.ok and t.score is not None else None for t in ordered)
    return SeedRun(strategy, seed, job_id, scores, tuple(times))


@dataclass(frozen=True)
class StrategySummary:
    """A strategy's best scores over its seeds.

    Attributes:
        strategy: the label.
        best_by_seed: seed -> the job's best score (jobs that scored nothing are left out).
        mean: their mean (``nan`` without any).
        std: their sample standard deviation (n - 1 in the denominator; 0 for one seed).
    """

    strategy: str
    best_by_seed: dict[int, float]
    mean: float
    std: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "seeds": len(self.best_by_seed),
            "mean": self.mean,
            "std": self.std,
            "best_by_seed": {str(k): v for k, v in self.best_by_seed.items()},
        }


def summarize(runs: Iterable[SeedRun], direction: Direction) -> list[StrategySummary]:
    """Mean and standard deviation of the best score per strategy, in first-seen order."""
    by_strategy: dict[str, dict[int, float]] = {}
    for run in runs:
        found = by_strategy.setdefault(run.strategy, {})
        best = run.best(direction)
        if best is not None:
            found[run.seed] = best
    rows = []
    for strategy, bests in by_strategy.items():
        values = list(bests.values())
        mean = statistics.fmean(values) if values else math.nan
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        rows.append(StrategySummary(strategy, dict(sorted(bests.items())), mean, std))
    return rows
