"""Bandit: TuPAQ's action elimination as HyperDrive's baseline (Rasley et al. 2017, §5.3).

HyperDrive's "Bandit" policy follows the action elimination algorithm (Even-Dar et al. 2006)
that TuPAQ (Sparks et al., SoCC 2015) uses: the policy keeps the best value seen in the whole
job (``globalBest``) and each trial's best (``jobBest``); on every evaluation boundary (every
``interval`` steps) a trial goes on only while ``jobBest * (1 + epsilon) > globalBest``, else it
is stopped. ``epsilon = 0.5`` and ``interval = 10`` as in the paper.

The paper states the rule for an accuracy (higher is better, non-negative). Here it is applied
to the value as a gain (``-loss``): a trial goes on while ``gain + epsilon * |gain|`` reaches the
best gain, which is the paper's rule for a non-negative accuracy and, for a minimized loss, keeps
a trial whose best loss is at most ``best_loss / (1 - epsilon)``.
"""

from __future__ import annotations

import math
from typing import Any

from ultron.algorithms.base import Direction
from ultron.algorithms.stoppers.base import Decision, Stopper, TrialId, decode_loss, encode_loss

__all__ = ["Bandit"]


class Bandit(Stopper):
    """Stops a trial on an evaluation boundary when its best is far from the job's best.

    Args:
        direction: minimize or maximize the reported value.
        max_resource: the most steps a trial runs.
        min_resource: the first evaluation boundary (default: ``interval``).
        interval: ``b``: steps between evaluation boundaries.
        epsilon: the relative slack of the action elimination rule (``0.5`` in the paper).

    Example:
        >>> bandit = Bandit(direction="maximize", max_resource=30, interval=10)
        >>> bandit.on_report("good", 10, 0.9)
        <Decision.CONTINUE: 'continue'>
        >>> bandit.on_report("poor", 10, 0.5), bandit.on_report("fair", 10, 0.7)
        (<Decision.STOP: 'stop'>, <Decision.CONTINUE: 'continue'>)
    """

    def __init__(
        self,
        *,
        direction: Direction | str = Direction.MINIMIZE,
        max_resource: int,
        min_resource: int | None = None,
        interval: int = 10,
        epsilon: float = 0.5,
    ) -> None:
        if interval < 1:
            raise ValueError(f"interval is {interval}; it must be at least 1 step")
        if not 0 <= epsilon < 1 or not math.isfinite(epsilon):
            raise ValueError(f"epsilon is {epsilon}; it must be in [0, 1) (the paper uses 0.5)")
        first = min(min_resource or interval, max_resource)
        super().__init__(direction=direction, min_resource=first, max_resource=max_resource)
        self.interval = interval
        self.epsilon = epsilon
        self._best: dict[TrialId, float] = {}  # each trial's best loss
        self._global = math.inf  # the best loss of the job

    def on_report(self, trial_id: TrialId, step: int, value: float) -> Decision:
        loss = min(self._best.get(trial_id, math.inf), self.loss(value))
        self._best[trial_id] = loss
        self._global = min(self._global, loss)
        if step >= self.max_resource:
            return Decision.STOP
        if step < self.min_resource or (step - self.min_resource) % self.interval:
            return Decision.CONTINUE
        if math.isinf(loss):
            return Decision.STOP
        gain, best = -loss, -self._global
        return Decision.CONTINUE if gain + self.epsilon * abs(gain) >= best else Decision.STOP

    def on_trial_complete(self, trial_id: TrialId) -> None:
        self._best.pop(trial_id, None)  # the job's best keeps what it reported

    def state_dict(self) -> dict[str, Any]:
        return {
            "best": [[t, encode_loss(b)] for t, b in self._best.items()],
            "global": encode_loss(self._global),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._best = {t: decode_loss(b) for t, b in state["best"]}
        self._global = decode_loss(state["global"])
