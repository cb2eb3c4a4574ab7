"""A calibrated learning-curve model that learns from the job's own finished curves.

POP needs, for a trial whose curve is known up to step ``k``, the distribution of its values at
the steps still ahead. The parametric ensemble (:func:`ultron.algorithms.curves.extrapolate`)
extrapolates each curve alone; on LCBench its 80% interval covers a third of the outcomes at 4
epochs, and it needs three points. Once trials have finished,
they are better data (the "previous curves" of Chandrashekaran & Lane, ECML-PKDD 2017):

- **Point prediction**: a trial at ``y_k`` goes on as the finished curves with a similar prefix
  did from step ``k``: ``y_k + sum_j w_j (r_j(h) - r_j(k)) / sum_j w_j``, with a Gaussian kernel
  ``w_j`` on the prefix (the value at ``k`` and at ``ceil(k / 2)``, each in units of the
  references' spread; the bandwidth is Silverman's, widened to reach at least
  ``neighbours`` references).
- **Interval (split-conformal)**: every reference is predicted from the others the same way
  (leave-one-out), and its errors at each future step are the residuals; the prediction's
  samples are the point prediction plus those residuals, weighted by the kernel (residuals of
  references with a similar prefix count more: locally weighted conformal prediction). Under
  exchangeability of the references and the trial, the central 80% of the samples cover 80% of
  outcomes, whatever the curves' shape.
- **Fallback**: with fewer than ``min_references`` finished curves, the parametric ensemble's
  median, kept between the value now and the value now plus twice the rise seen so far (with a
  few points the ensemble sometimes extrapolates to the bounds), with an interval whose 80%
  half-width is ``0.19 * ptp * (h - k) / k`` (``ptp``: the range of the values seen so far;
  ``h``: the step predicted). The ensemble's own bootstrap knows the noise around its fit, not
  how wrong the curve's shape may be further out; 0.19 is the 80% quantile of
  ``|error| / (ptp * (h - k) / k)`` of that median on LCBench (34 tasks, 40 configurations
  each, at 4, 10 and 25 epochs: 0.18, 0.18, 0.21), measured, not derived. The kept median
  errs less than the ensemble's (median absolute error at epoch 52: 3.6, 2.7, 1.2 points
  against 3.8, 3.3, 1.5) and ranks the eventual top 10% better.

``benchmarks/curves_check.py`` measures both paths on the 34 LCBench tasks.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import numpy as np

from ultron.algorithms.curves import CurvePrediction, extrapolate

__all__ = ["FALLBACK_WIDTH", "CurveModel", "widen"]

Array = np.ndarray
_NORMAL = statistics.NormalDist()
_Z80 = _NORMAL.inv_cdf(0.9)
FALLBACK_WIDTH = 0.19


class CurveModel:
    """Predictions of a trial's future values from its curve so far, calibrated on the job.

    Args:
        max_resource: the last step of a finished curve (``M``).
        min_references: finished curves needed before the references replace the fallback.
        neighbours: the kernel reaches at least this many references.
        bootstrap: refits per curve family of the fallback ensemble.
        bounds: the value's range (an accuracy in percent: ``(0, 100)``); samples are clipped.
        fallback_width: the fallback's 80% half-width per unit of ``ptp * (h - k) / k``.

    Values are higher-is-better (pass a loss negated).

    Example:
        >>> import numpy as np
        >>> steps = np.arange(1, 21)
        >>> model = CurveModel(20, min_references=5)
        >>> for top in np.linspace(60.0, 90.0, 12):
        ...     model.add_reference(top - 40.0 * steps**-0.5)
        >>> prediction = model.predict([1, 2, 3, 4], 75.0 - 40.0 * steps[:4] ** -0.5, [20],
        ...                            rng=np.random.default_rng(0))
        >>> low, high = prediction.quantiles([0.1, 0.9])[:, 0]
        >>> bool(low <= 75.0 - 40.0 * 20**-0.5 <= high)
        True
    """

    def __init__(
        self,
        max_resource: int,
        *,
        min_references: int = 10,
        neighbours: int = 10,
        bootstrap: int = 12,
        bounds: tuple[float, float] = (-math.inf, math.inf),
        fallback_width: float = FALLBACK_WIDTH,
    ) -> None:
        if min_references < 2:
            raise ValueError(
                f"min_references is {min_references}; it must be at least 2 (a reference "
                "is predicted from the others)"
            )
        self.max_resource = max_resource
        self.min_references = min_references
        self.neighbours = neighbours
        self.bootstrap = bootstrap
        self.bounds = bounds
        self.fallback_width = fallback_width
        self._rows: list[Array] = []
        self._grid = np.zeros((0, max_resource))
        self._residuals: dict[int, tuple[Array, Array]] = {}

    @property
    def references(self) -> int:
        """How many finished curves the model holds."""
        return len(self._rows)

    @property
    def calibrated(self) -> bool:
        """Whether predictions come from the references (else from the fallback)."""
        return len(self._rows) >= self.min_references

    def add_reference(self, curve: Sequence[float] | Array) -> None:
        """A finished curve: its value at each step ``1 .. max_resource``."""
        row = np.asarray(curve, dtype=float)
        if row.shape != (self.max_resource,) or not np.all(np.isfinite(row)):
            return  # a curve with a gap cannot be a reference at every step
        self._rows.append(row)
        self._grid = np.asarray(self._rows)
        self._residuals.clear()

    def predict(
        self,
        steps: Sequence[int],
        values: Sequence[float],
        horizon: Sequence[int],
        *,
        rng: np.random.Generator,
    ) -> CurvePrediction:
        """Samples of the values at ``horizon`` (future steps) of a curve seen at ``steps``."""
        x = np.asarray(steps, dtype=float)
        y = np.asarray(values, dtype=float)
        keep = np.isfinite(y)
        x, y = x[keep], y[keep]
        if not self.calibrated or not len(x):
            return self._fallback(x, y, horizon, rng=rng)
        k = int(min(x[-1], self.max_resource))
        h = np.clip(np.asarray(horizon, dtype=int), k, self.max_resource)
        features, residuals = self._calibration(k)
        query = np.array([y[-1], float(np.interp(_half(k), x, y))])
        weights = _kernel(query[None, :], features, self.neighbours)[0]
        gains = self._grid[:, h - 1] - self._grid[:, k - 1][:, None]
        point = y[-1] + weights @ gains / weights.sum()
        samples = np.clip(point + residuals[:, h - k], *self.bounds)
        return CurvePrediction(
            tuple(int(s) for s in horizon), samples, {}, sample_weights=weights / weights.sum()
        )

    def _calibration(self, k: int) -> tuple[Array, Array]:
        """The references' prefix features at ``k`` and the residuals of their leave-one-out
        predictions of the steps ``k .. M`` (cached until a reference arrives)."""
        if k not in self._residuals:
            grid = self._grid
            features = np.column_stack([grid[:, k - 1], grid[:, _half(k) - 1]])
            weights = _kernel(features, features, self.neighbours, leave_out=True)
            gains = grid[:, k - 1 :] - grid[:, k - 1][:, None]
            loo = grid[:, k - 1][:, None] + weights @ gains / weights.sum(axis=1)[:, None]
            self._residuals[k] = (features, grid[:, k - 1 :] - loo)
        return self._residuals[k]

    def _fallback(
        self, x: Array, y: Array, horizon: Sequence[int], *, rng: np.random.Generator
    ) -> CurvePrediction:
        prediction = extrapolate(
            x, y, horizon, rng=rng, bootstrap=self.bootstrap, bounds=self.bounds
        )
        return widen(prediction, x, y, width=self.fallback_width, bounds=self.bounds)


def widen(
    prediction: CurvePrediction,
    steps: Sequence[float] | Array,
    values: Sequence[float] | Array,
    *,
    width: float = FALLBACK_WIDTH,
    bounds: tuple[float, float] = (-math.inf, math.inf),
) -> CurvePrediction:
    """The ensemble's median kept in range, with an interval from how wrong it was on LCBench.

    The centre is the ensemble's median, clipped to ``[y_k, y_k + 2 * ptp]`` (``y_k``: the value
    now, ``ptp``: the range of the values seen: curves rise, and rarely twice as much again as
    they did). Each sample is the centre plus ``z * sd(h)``, one standard normal quantile ``z``
    per sample (a continuation that is high stays high), with ``sd(h)`` such that the 80%
    half-width at step ``h`` is ``width * ptp * (h - k) / k`` (``k``: the last step seen).
    The bootstrap's own spread is dropped: it only knows the noise around the fit, and adding
    it to this width over-covers (97% at 10 epochs on LCBench).
    """
    y = np.asarray(values, dtype=float)
    if len(y) == 0:
        return prediction
    k = max(float(np.asarray(steps, dtype=float)[-1]), 1.0)
    h = np.asarray(prediction.steps, dtype=float)
    rise = max(float(np.ptp(y)), 1e-9)
    sd = width / _Z80 * rise * np.maximum(h - k, 0.0) / k
    centre = np.clip(np.median(prediction.samples, axis=0), y[-1], y[-1] + 2.0 * rise)
    # Evenly spaced normal quantiles, not random draws: with a few dozen samples and a width of
    # tens of points, random draws would move the median by several points.
    n = len(prediction.samples)
    z = np.array([[_NORMAL.inv_cdf((i + 0.5) / n)] for i in range(n)])
    samples = np.clip(centre + z * sd, *bounds)
    return CurvePrediction(prediction.steps, samples, prediction.weights)


def _half(k: int) -> int:
    return max(1, (k + 1) // 2)


def _kernel(query: Array, features: Array, neighbours: int, *, leave_out: bool = False) -> Array:
    """Gaussian kernel weights, ``(queries, references)``, on standardised features.

    The bandwidth is Silverman's rule, widened per query to reach its ``neighbours``-th nearest
    reference, so that a prefix unlike any reference still gets a smooth estimate.
    """
    scale = features.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    d2 = (((query[:, None, :] - features[None, :, :]) / scale) ** 2).sum(axis=-1)
    n = len(features) - (1 if leave_out else 0)
    if leave_out:
        np.fill_diagonal(d2, np.inf)
    nearest = np.sort(d2, axis=1)[:, min(neighbours, n) - 1]
    h2 = np.maximum((1.06 * n**-0.2) ** 2, nearest)
    h2 = np.where(np.isfinite(h2) & (h2 > 0), h2, 1.0)
    weights = np.exp(-0.5 * d2 / h2[:, None])
    # a query beyond every reference: the nearest ones carry it rather than nobody
    empty = weights.sum(axis=1) <= 1e-300
    if empty.any():
        weights[empty] = (d2[empty] <= nearest[empty, None]).astype(float)
    return np.asarray(weights)
