"""The results of a job with several objectives or constraints: which trials are feasible, the
Pareto front, and the leaderboard's order.

A trial is feasible when its metrics satisfy every constraint. The leaderboard lists feasible
trials first: with several objectives by non-dominated rank (the Pareto front is rank 0), then by
the first objective; with one objective by its score. Infeasible trials follow, least violating
first. The best trial is the first of that order, so it is always a feasible one when any is.

Example:
    >>> from ultron.algorithms.objectives import Bound, Goal
    >>> from ultron.trial_records import TrialResult, TrialStatus
    >>> def trial(i, acc, ms):
    ...     metrics = {"acc": acc, "ms": ms}
    ...     return TrialResult(str(i), {}, TrialStatus.COMPLETED, score=acc, metrics=metrics)
    >>> goals = (Goal("acc", Direction.MAXIMIZE), Goal("ms"))
    >>> trials = [trial(0, 0.9, 80.0), trial(1, 0.8, 90.0), trial(2, 0.7, 20.0)]
    >>> [t.trial_id for t in pareto_trials(trials, goals)]
    ['0', '2']
    >>> fast = (Bound("ms", high=50.0),)
    >>> [t.trial_id for t in ranked_trials(trials, Direction.MAXIMIZE, goals, fast)]
    ['2', '0', '1']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ultron.algorithms.base import Direction
from ultron.algorithms.objectives import (
    Bound,
    Goal,
    feasible,
    losses,
    nondominated_ranks,
    violation,
)
from ultron.trial_records import TrialResult

__all__ = ["is_feasible", "pareto_record", "pareto_trials", "ranked_trials"]


def _scored(trials: Sequence[TrialResult], goals: Sequence[Goal]) -> list[TrialResult]:
    """Trials with a usable score and every objective's metric a number."""
    return [
        t
        for t in trials
        if t.status.ok
        and t.score is not None
        and all(isinstance(t.metrics.get(g.metric), int | float) for g in goals)
    ]


def is_feasible(trial: TrialResult, bounds: Sequence[Bound]) -> bool:
    """Whether ``trial``'s metrics satisfy every bound (always, with none)."""
    return feasible(trial.metrics, bounds)


def pareto_trials(
    trials: Sequence[TrialResult], goals: Sequence[Goal], bounds: Sequence[Bound] = ()
) -> list[TrialResult]:
    """The feasible scored trials that no other feasible one dominates, in trial order."""
    candidates = [t for t in _scored(trials, goals) if is_feasible(t, bounds)]
    ranks = nondominated_ranks([losses(t.metrics, goals) for t in candidates])
    return [t for t, rank in zip(candidates, ranks, strict=True) if rank == 0]


def ranked_trials(
    trials: Sequence[TrialResult],
    direction: Direction,
    goals: Sequence[Goal],
    bounds: Sequence[Bound] = (),
) -> list[TrialResult]:
    """Scored trials, best first: feasible ones by Pareto rank (several objectives) and first
    objective, then infeasible ones by their violation (ties keep trial order)."""
    scored = _scored(trials, goals if len(goals) > 1 else ())
    sign = -1.0 if direction is Direction.MAXIMIZE else 1.0
    good = [t for t in scored if is_feasible(t, bounds)]
    if len(goals) > 1:
        ranks = nondominated_ranks([losses(t.metrics, goals) for t in good])
        order = {id(t): r for t, r in zip(good, ranks, strict=True)}
        first = goals[0]
        good.sort(key=lambda t: (order[id(t)], first.loss(t.metrics[first.metric])))
    else:
        good.sort(key=lambda t: sign * float(t.score or 0.0))
    bad = sorted(
        (t for t in scored if not is_feasible(t, bounds)),
        key=lambda t: violation(t.metrics, bounds),
    )
    return good + bad


def pareto_record(
    trials: Sequence[TrialResult], goals: Sequence[Goal], bounds: Sequence[Bound] = ()
) -> list[dict[str, Any]]:
    """The Pareto front as ``best.json`` and the job's summary hold it: one entry per trial,
    with its id, configuration and objective values."""
    return [
        {
            "trial_id": t.trial_id,
            "hyperparameters": t.hyperparameters,
            "objectives": {g.metric: t.metrics[g.metric] for g in goals},
        }
        for t in pareto_trials(trials, goals, bounds)
    ]
