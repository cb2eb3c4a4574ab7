"""What POP remembers of each trial, and of every boundary: its curve, time, class and state.

- :class:`TrialRecord`: one trial's curve (values as gains, higher is better), its running
  time (suspensions excluded: the epoch time of ``ERT``), its status and its last estimate;
- :class:`BoundaryValues`: every value reported at each evaluation boundary (ASHA's rungs, in
  effect), to rank suspended trials the curve model cannot tell apart;
- :func:`trials_state` / :func:`trials_from_state`: the records as JSON-ready state and back.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from ultron.algorithms.stoppers.base import TrialId

__all__ = ["BoundaryValues", "TrialRecord", "trials_from_state", "trials_state"]


@dataclass
class TrialRecord:
    """One trial as POP sees it (``status``: ``running``, ``suspended`` or ``done``)."""

    steps: list[int] = field(default_factory=list)
    gains: list[float] = field(default_factory=list)  # values, higher is better
    status: str = "running"
    run_time: float = 0.0  # seconds spent running (suspensions excluded)
    timed_steps: int = 0
    last_time: float = 0.0
    suspended_at: float = 0.0
    p: float | None = None
    ert: float = math.inf
    poor: bool = False
    model: tuple[float, float] = (0.0, 0.0)  # the curve model's (p, expected epochs)

    def record(self, step: int, gain: float, now: float) -> None:
        """A report: the curve takes it, the running time the seconds since the last one."""
        self.run_time += now - self.last_time
        self.timed_steps += step - (self.steps[-1] if self.steps else 0)
        self.last_time = now
        self.steps.append(step)
        self.gains.append(gain)

    @property
    def epoch_time(self) -> float:
        """Mean seconds per step while running."""
        return self.run_time / max(self.timed_steps, 1)


class BoundaryValues:
    """Every gain reported at each evaluation boundary, sorted (the rungs of ASHA).

    Example:
        >>> seen = BoundaryValues(min_resource=1, interval=3)
        >>> for gain in (0.2, 0.5, 0.9):
        ...     seen.add(4, gain)
        >>> seen.is_boundary(4), seen.is_boundary(5)
        (True, False)
        >>> round(seen.share_better(TrialRecord(steps=[1, 4], gains=[0.1, 0.5])), 3)
        0.333
    """

    def __init__(self, *, min_resource: int, interval: int) -> None:
        self.min_resource, self.interval = min_resource, interval
        self._seen: dict[int, list[float]] = {}

    def is_boundary(self, step: int) -> bool:
        """Whether POP judges a trial at ``step``."""
        return step >= self.min_resource and not (step - self.min_resource) % self.interval

    def add(self, step: int, gain: float) -> None:
        """One more value reported at boundary ``step``."""
        bisect.insort(self._seen.setdefault(step, []), gain)

    def share_better(self, trial: TrialRecord) -> float:
        """The share of trials that were better than this one at its last boundary (a late
        report may have come after it)."""
        at = max((i for i, s in enumerate(trial.steps) if s in self._seen), default=-1)
        seen = self._seen.get(trial.steps[at], []) if trial.steps else []
        gain = trial.gains[at] if trial.steps else -math.inf
        return 1.0 - bisect.bisect_right(seen, gain) / max(len(seen), 1)

    def rebuild(self, trials: Iterable[TrialRecord]) -> None:
        """The values of restored trials, from their curves."""
        self._seen = {}
        for trial in trials:
            for step, gain in zip(trial.steps, trial.gains, strict=True):
                if self.is_boundary(step):
                    self._seen.setdefault(step, []).append(gain)
        for values in self._seen.values():
            values.sort()


def trials_state(trials: dict[TrialId, TrialRecord]) -> list[list[Any]]:
    """The records as JSON-ready ``[trial_id, fields]`` pairs (an infinite ERT as ``None``)."""
    return [
        [t, {**asdict(tr), "ert": None if math.isinf(tr.ert) else tr.ert}]
        for t, tr in trials.items()
    ]


def trials_from_state(pairs: list[list[Any]]) -> dict[TrialId, TrialRecord]:
    """The records :func:`trials_state` wrote."""
    trials: dict[TrialId, TrialRecord] = {}
    for t, data in pairs:
        ert = math.inf if data["ert"] is None else data["ert"]
        model = tuple(data.get("model", (0, 0)))
        trials[t] = TrialRecord(**{**data, "ert": ert, "model": model})
    return trials
