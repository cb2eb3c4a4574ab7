"""EarlyTerm: Domhan et al.'s predictive termination as HyperDrive's baseline (§5.3).

Domhan, Springenberg and Hutter ("Speeding up automatic hyperparameter optimization of deep
neural networks by extrapolation of learning curves", IJCAI 2015) stop a run when its learning
curve model says it is unlikely to beat the best value seen so far: on every evaluation boundary
(every ``interval`` steps, 30 in the paper) the policy computes
``p = P(y(m) >= y_best | y(1..n))`` at the last step ``m = max_resource`` and stops the trial when
``p < delta`` (0.05). The curve model is the job's parametric ensemble,
:func:`ultron.algorithms.curves.extrapolate`, the one POP uses.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ultron.algorithms.base import Direction
from ultron.algorithms.curves import extrapolate
from ultron.algorithms.stoppers.base import Decision, Stopper, TrialId, decode_loss, encode_loss

__all__ = ["EarlyTerm"]


class EarlyTerm(Stopper):
    """Stops a trial whose predicted final value is unlikely to beat the job's best.

    Args:
        direction: minimize or maximize the reported value.
        max_resource: ``m``: the most steps a trial runs; the prediction is made for it.
        min_resource: the first evaluation boundary (default: ``interval``).
        interval: ``b``: steps between evaluation boundaries (30 in the paper).
        delta: stop when the probability of beating the best is below it (0.05 in the paper).
        bootstrap: refits per curve family (uncertainty of the extrapolation).
        bounds: range of the value (``(0, 100)`` for an accuracy in percent).
        seed: seed of the bootstrap's generator.

    A trial with fewer than three finite reports is never judged (no curve fits it).

    Example:
        >>> stopper = EarlyTerm(direction="maximize", max_resource=40, interval=5, seed=0)
        >>> for step in range(1, 41):
        ...     _ = stopper.on_report("good", step, 0.9 - 0.5 * step**-0.5)
        >>> [stopper.on_report("flat", step, 0.3) for step in range(1, 6)][-1]
        <Decision.STOP: 'stop'>
    """

    def __init__(
        self,
        *,
        direction: Direction | str = Direction.MINIMIZE,
        max_resource: int,
        min_resource: int | None = None,
        interval: int = 30,
        delta: float = 0.05,
        bootstrap: int = 12,
        bounds: tuple[float, float] = (-math.inf, math.inf),
        seed: int | None = None,
    ) -> None:
        if interval < 1:
            raise ValueError(f"interval is {interval}; it must be at least 1 step")
        if not 0 < delta < 1:
            raise ValueError(f"delta is {delta}; it must be in (0, 1) (the paper uses 0.05)")
        if bootstrap < 1:
            raise ValueError(f"bootstrap is {bootstrap}; it must be at least 1")
        first = min(min_resource or interval, max_resource)
        super().__init__(direction=direction, min_resource=first, max_resource=max_resource)
        self.interval = interval
        self.delta = delta
        self.bootstrap = bootstrap
        self._bounds = tuple(sorted(-self.loss(b) for b in bounds))
        self.rng = np.random.default_rng(seed)
        self._curves: dict[TrialId, list[tuple[int, float]]] = {}  # (step, gain) per trial
        self._best = math.inf  # the best loss seen in the job

    def on_report(self, trial_id: TrialId, step: int, value: float) -> Decision:
        loss = self.loss(value)
        curve = self._curves.setdefault(trial_id, [])
        curve.append((step, -loss))
        best_before = self._best
        self._best = min(self._best, loss)
        if step >= self.max_resource:
            return Decision.STOP
        if step < self.min_resource or (step - self.min_resource) % self.interval:
            return Decision.CONTINUE
        if math.isinf(best_before) or loss <= best_before:
            return Decision.CONTINUE  # nothing to beat, or it is the best already
        if sum(math.isfinite(g) for _, g in curve) < 3:
            return Decision.CONTINUE  # too few points for any curve family
        p = self.probability(trial_id, -best_before)
        return Decision.STOP if p < self.delta else Decision.CONTINUE

    def probability(self, trial_id: TrialId, goal: float) -> float:
        """``P(the trial's value at max_resource >= goal)``, ``goal`` as a gain (``-loss``)."""
        steps = [s for s, _ in self._curves[trial_id]]
        gains = [g for _, g in self._curves[trial_id]]
        prediction = extrapolate(
            steps,
            gains,
            [self.max_resource],
            rng=self.rng,
            bootstrap=self.bootstrap,
            bounds=(self._bounds[0], self._bounds[1]),
        )
        return float(prediction.prob_at_least(goal)[0])

    def on_trial_complete(self, trial_id: TrialId) -> None:
        self._curves.pop(trial_id, None)

    def state_dict(self) -> dict[str, Any]:
        return {
            "curves": [[t, [[s, encode_loss(-g)] for s, g in c]] for t, c in self._curves.items()],
            "best": encode_loss(self._best),
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._curves = {t: [(int(s), -decode_loss(g)) for s, g in c] for t, c in state["curves"]}
        self._best = decode_loss(state["best"])
        self.rng.bit_generator.state = state["rng"]
