"""Median stopping (Golovin et al., "Google Vizier", KDD 2017).

A trial is stopped at step ``t`` when its best value so far is worse than the median of the
running averages, up to step ``t``, of the trials that have already reported step ``t``.
"""

from __future__ import annotations

import statistics
from typing import Any

from ultron.algorithms.base import Direction
from ultron.algorithms.stoppers.base import Decision, Stopper, TrialId, decode_loss, encode_loss

__all__ = ["MedianStopping"]


class MedianStopping(Stopper):
    """Stops a trial that does worse than the median of its peers at the same step.

    Args:
        direction: minimize or maximize the reported value.
        min_resource: no trial is stopped before this step (grace period).
        max_resource: steps at which a trial is finished.
        min_trials: how many other trials must have reached the step before any judgement.

    Example:
        >>> median = MedianStopping(max_resource=10, min_trials=2)
        >>> for t, loss in [("a", 1.0), ("b", 2.0)]:
        ...     _ = median.on_report(t, 1, loss)
        >>> median.on_report("c", 1, 3.0), median.on_report("d", 1, 1.2)
        (<Decision.STOP: 'stop'>, <Decision.CONTINUE: 'continue'>)
    """

    def __init__(
        self,
        *,
        direction: Direction | str = Direction.MINIMIZE,
        min_resource: int = 1,
        max_resource: int,
        min_trials: int = 5,
    ) -> None:
        super().__init__(direction=direction, min_resource=min_resource, max_resource=max_resource)
        if min_trials < 1:
            raise ValueError(f"min_trials is {min_trials}; it must be at least 1")
        self.min_trials = min_trials
        # step -> {trial: running average of its losses up to that step}
        self._averages: dict[int, dict[TrialId, float]] = {}
        self._sums: dict[TrialId, tuple[float, int, float]] = {}  # sum, count, best

    def on_report(self, trial_id: TrialId, step: int, value: float) -> Decision:
        loss = self.loss(value)
        total, count, best = self._sums.get(trial_id, (0.0, 0, float("inf")))
        total, count, best = total + loss, count + 1, min(best, loss)
        self._sums[trial_id] = (total, count, best)
        others = [a for t, a in self._averages.get(step, {}).items() if t != trial_id]
        self._averages.setdefault(step, {})[trial_id] = total / count
        if step >= self.max_resource:
            return Decision.STOP
        if step < self.min_resource or len(others) < self.min_trials:
            return Decision.CONTINUE
        return Decision.STOP if best > statistics.median(others) else Decision.CONTINUE

    def state_dict(self) -> dict[str, Any]:
        return {
            "averages": [
                [step, [[t, encode_loss(a)] for t, a in by_trial.items()]]
                for step, by_trial in self._averages.items()
            ],
            "sums": [[t, encode_loss(s), n, encode_loss(b)] for t, (s, n, b) in self._sums.items()],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._averages = {
            int(step): {t: decode_loss(a) for t, a in by_trial}
            for step, by_trial in state["averages"]
        }
        self._sums = {t: (decode_loss(s), int(n), decode_loss(b)) for t, s, n, b in state["sums"]}
