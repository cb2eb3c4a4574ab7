"""Unfinished curves as references: a trial at step ``k`` judged against the trials that got
further.

POP's calibrated curve model (:class:`ultron.algorithms.curve_model.CurveModel`) needs finished
curves; at 8 workers on LCBench the target is reached before ten trials finish, so every
decision before the hit fell to the parametric fallback. Trials that have reached step ``h``,
finished or not, are references for the values at steps up to ``h``: a trial at step ``k`` is
predicted to the deepest step ``h > k`` that at least ``min_references`` other trials reached
(the kernel and split-conformal interval of ``CurveModel``, on curves cut at ``h``), and its
chance is that of doing at least as well there as the ``quantile`` of those trials' values at
``h`` (1.0: the best; ASHA in effect compares at rungs the same way). A trial at the frontier,
with no such ``h``, is compared at its own step with the trials that reached it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np

from ultron.algorithms.curve_model import CurveModel

__all__ = ["PartialReferences"]


class PartialReferences:
    """The curves so far of a job's trials, as references for the steps each reached.

    Args:
        max_resource: the most steps a trial runs (``M``).
        min_references: trials that must have reached a step for it to be compared at.
        quantile: the trial is compared with this quantile of the references' values at ``h``.
        limit: the latest references kept per comparison (bounds the kernel's cost).
        bounds: the value's range (higher is better).

    Example:
        >>> import numpy as np
        >>> refs = PartialReferences(10, min_references=3)
        >>> for i, top in enumerate([50.0, 60.0, 70.0, 80.0]):
        ...     refs.update(i, list(range(1, 7)), list(top * (1 - 0.5 ** np.arange(1, 7))))
        >>> # Ahead of every reference at step 2: likely to match the best of them at step 6,
        >>> # the deepest step three of them reached; level with the best at 2: less likely.
        >>> p, h = refs.chance("new", [1, 2], [45.0, 70.0], rng=np.random.default_rng(0))
        >>> h, p > 0.9
        (6, True)
        >>> p, h = refs.chance("new", [1, 2], [40.0, 60.0], rng=np.random.default_rng(0))
        >>> p < 0.5
        True
    """

    def __init__(
        self,
        max_resource: int,
        *,
        min_references: int = 10,
        quantile: float = 1.0,
        limit: int = 200,
        bounds: tuple[float, float] = (-math.inf, math.inf),
    ) -> None:
        if not 0.0 <= quantile <= 1.0:
            raise ValueError(f"quantile is {quantile}; it must be in [0, 1]")
        self.max_resource = max_resource
        self.min_references = max(2, min_references)
        self.quantile = quantile
        self.limit = limit
        self.bounds = bounds
        self._curves: dict[Hashable, tuple[Sequence[int], Sequence[float]]] = {}
        self._models: dict[int, tuple[int, CurveModel, float]] = {}

    def update(self, trial_id: Hashable, steps: Sequence[int], values: Sequence[float]) -> None:
        """A trial's curve so far (the lists may grow in place; call again after each report)."""
        self._curves[trial_id] = (steps, values)

    def forget(self, trial_id: Hashable) -> None:
        """Leave a trial out (a trial stopped as poor is no reference for the good ones)."""
        self._curves.pop(trial_id, None)

    def clear(self) -> None:
        """Forget every trial (before a restored stopper hands them again)."""
        self._curves.clear()
        self._models.clear()

    def chance(
        self,
        trial_id: Hashable,
        steps: Sequence[int],
        values: Sequence[float],
        *,
        rng: np.random.Generator,
    ) -> tuple[float, int] | None:
        """``(P(y(h) >= goal(h)), h)`` for a trial seen at ``steps``, or ``None`` when fewer than
        ``min_references`` other trials have reached its step."""
        if not len(steps):
            return None
        k = int(steps[-1])
        others = [(t, c) for t, c in self._curves.items() if t != trial_id and c[0]]
        depths = np.sort([min(int(c[0][-1]), self.max_resource) for _, c in others])[::-1]
        if len(depths) < self.min_references or depths[self.min_references - 1] < k:
            return None
        h = int(depths[self.min_references - 1])  # the deepest step enough trials reached
        if h == k:
            at_k = [float(np.interp(k, c[0], c[1])) for _, c in others if c[0][-1] >= k]
            goal = float(np.quantile(at_k[-self.limit :], self.quantile))
            return (1.0 if values[-1] >= goal else 0.0), k
        count = int((depths >= h).sum())
        cached = self._models.get(h)
        # Rebuilt when a tenth more trials reached h (the leave-one-out calibration costs
        # O(references^2); at hundreds of trials one more moves it little).
        if cached is None or count > cached[0] + max(0, cached[0] // 10 - 1):
            model = CurveModel(h, min_references=self.min_references, bounds=self.bounds)
            grid = np.arange(1, h + 1)
            rows = [np.interp(grid, c[0], c[1]) for _, c in others if c[0][-1] >= h]
            for row in rows[-self.limit :]:
                model.add_reference(row)
            goal = float(np.quantile([r[-1] for r in rows[-self.limit :]], self.quantile))
            cached = self._models[h] = (count, model, goal)
        _, model, goal = cached
        prediction = model.predict(steps, values, [h], rng=rng)
        return float(prediction.prob_at_least(goal)[0]), h
