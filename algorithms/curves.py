"""Learning-curve extrapolation with uncertainty: a weighted ensemble of parametric curves.

Domhan, Springenberg & Hutter (IJCAI 2015), the model of HyperDrive's POP and of EarlyTerm,
combine 11 parametric families and sample their weights and parameters by MCMC. This is the
cheaper variant: each family is fitted by least squares (``scipy.optimize.curve_fit``), its
uncertainty comes from a residual bootstrap (refit on the fitted curve plus resampled
residuals), and the families are weighted by their BIC (``exp(-BIC / 2)``, normalised).
Predictions are samples of the reported value at future steps, including the observation
noise, so ``P(y(m) >= target)`` is a frequency over samples.

Every family rises and saturates (accuracy-like); to extrapolate a loss, pass its negative.
``benchmarks/curves_check.py`` measures the calibration of the intervals on LCBench curves;
POP predicts with :class:`ultron.algorithms.curve_model.CurveModel`, which falls back on this
ensemble before the job has finished curves.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["FAMILIES", "CurveFamily", "CurvePrediction", "extrapolate"]

Array = np.ndarray


@dataclass(frozen=True)
class CurveFamily:
    """A parametric learning curve ``f(x; params)``, increasing in ``x`` towards its limit."""

    name: str
    func: Callable[..., Array]
    guess: Callable[[Array, Array], list[float]]

    @property
    def n_params(self) -> int:
        return int(self.func.__code__.co_argcount) - 1


def _pow3(x: Array, c: float, la: float, lalpha: float) -> Array:
    return np.asarray(c - np.exp(la) * x ** (-np.exp(lalpha)))


def _exp3(x: Array, c: float, la: float, lb: float) -> Array:
    return np.asarray(c - np.exp(la) * np.exp(-np.exp(lb) * x))


def _ilog2(x: Array, c: float, la: float) -> Array:
    return np.asarray(c - np.exp(la) / np.log(x + 1.0))


def _mmf(x: Array, c: float, beta: float, lk: float, ld: float) -> Array:
    return np.asarray(c - (c - beta) / (1.0 + (np.exp(lk) * x) ** np.exp(ld)))


def _janoschek(x: Array, c: float, beta: float, lk: float, ld: float) -> Array:
    return np.asarray(c - (c - beta) * np.exp(-np.exp(lk) * x ** np.exp(ld)))


def _gap(x: Array, y: Array) -> float:
    return math.log(max(float(y[-1] - y[0]) + 0.1, 1e-3))


FAMILIES: tuple[CurveFamily, ...] = (
    CurveFamily("pow3", _pow3, lambda x, y: [float(y[-1]) + 0.1, _gap(x, y), math.log(0.5)]),
    CurveFamily(
        "exp3", _exp3, lambda x, y: [float(y[-1]) + 0.05, _gap(x, y), math.log(1.0 / x[-1])]
    ),
    CurveFamily("ilog2", _ilog2, lambda x, y: [float(y[-1]) + 0.1, _gap(x, y)]),
    CurveFamily("mmf", _mmf, lambda x, y: [float(y[-1]) + 0.1, float(y[0]), 0.0, 0.0]),
    CurveFamily(
        "janoschek", _janoschek, lambda x, y: [float(y[-1]) + 0.1, float(y[0]) - 0.1, -1.0, 0.0]
    ),
)


@dataclass(frozen=True)
class CurvePrediction:
    """Samples of the reported value at future steps; rows are samples, columns are steps.

    Attributes:
        steps: the future steps, one per column.
        samples: shape ``(samples, steps)``; a row is one possible continuation of the curve.
        weights: the curve families' weights in the ensemble (empty when no family made it).
        sample_weights: the probability of each row (``None``: equally likely).
    """

    steps: tuple[int, ...]
    samples: Array
    weights: dict[str, float]
    sample_weights: Array | None = None

    def prob_at_least(self, target: float) -> Array:
        """``P(y(m) >= target)`` for each future step ``m``."""
        hits = (self.samples >= target).astype(float)
        if self.sample_weights is None:
            return np.asarray(hits.mean(axis=0))
        return np.asarray(self.sample_weights @ hits)

    def prob_reached(self, target: float) -> Array:
        """``P(max(y(1..m)) >= target)`` for each future step ``m`` (non-decreasing)."""
        reached = np.maximum.accumulate(self.samples, axis=1) >= target
        if self.sample_weights is None:
            return np.asarray(reached.mean(axis=0))
        return np.asarray(self.sample_weights @ reached)

    def quantiles(self, q: Sequence[float]) -> Array:
        """The ``q`` quantiles at each step, shape ``(len(q), steps)``."""
        if self.sample_weights is None:
            return np.asarray(np.quantile(self.samples, q, axis=0))
        order = np.argsort(self.samples, axis=0)
        cumulative = np.cumsum(self.sample_weights[order], axis=0)
        cumulative /= cumulative[-1]
        columns = np.arange(self.samples.shape[1])
        rows = [order[np.minimum((cumulative < p).sum(axis=0), len(order) - 1), columns] for p in q]
        return np.asarray([self.samples[r, columns] for r in rows])


def _fit(family: CurveFamily, x: Array, y: Array, p0: Sequence[float] | Array) -> Array | None:
    # Imported here: scipy takes 0.3-0.5 s to import, which every job would pay at its start
    # (the stoppers package imports POP) though only POP fits curves.
    from scipy.optimize import OptimizeWarning, curve_fit

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OptimizeWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            params, _ = curve_fit(family.func, x, y, p0=list(p0), maxfev=400)
        except (RuntimeError, ValueError, FloatingPointError):
            return None
    return params if np.all(np.isfinite(params)) else None


def _backtest_drift(family: CurveFamily, x: Array, y: Array, horizon: Array) -> Array:
    """Extrapolation error the family made on this very curve, grown with the distance.

    Fit on the first half of the points, predict the last one: that error, per step of
    extrapolation, times the distance to each horizon step. The residual bootstrap alone only
    knows the noise around the fit, not how wrong the curve's shape may be further out.
    """
    half = max(family.n_params + 1, len(x) // 2)
    if half >= len(x):
        return np.zeros(len(horizon))
    params = _fit(family, x[:half], y[:half], family.guess(x[:half], y[:half]))
    if params is None:
        return np.zeros(len(horizon))
    error = abs(float(family.func(x[-1:], *params)[0] - y[-1]))
    per_step = error / max(float(x[-1] - x[half - 1]), 1.0)
    return np.asarray(per_step * (horizon - x[-1]))


def _bootstrap(
    family: CurveFamily, x: Array, y: Array, horizon: Array, *, rng: np.random.Generator, n: int
) -> tuple[Array, float] | None:
    """Predictions at ``horizon`` from ``n`` residual-bootstrap refits, and the family's BIC."""
    params = _fit(family, x, y, family.guess(x, y))
    if params is None:
        return None
    fitted = family.func(x, *params)
    residuals = y - fitted
    rss = max(float(residuals @ residuals), 1e-12 * len(y))
    bic = len(y) * math.log(rss / len(y)) + family.n_params * math.log(len(y))
    drift = _backtest_drift(family, x, y, horizon)
    rows = []
    for _ in range(n):
        resampled = fitted + rng.choice(residuals, size=len(y), replace=True)
        refit = _fit(family, x, resampled, params)
        if refit is not None:
            noise = rng.choice(residuals, size=len(horizon), replace=True)
            rows.append(family.func(horizon, *refit) + noise + drift * rng.normal())
    if not rows:
        return None
    return np.asarray(rows, dtype=float), bic


def _mixture(
    fits: dict[str, tuple[Array, float]], *, rng: np.random.Generator, size: int
) -> tuple[dict[str, float], Array]:
    """BIC weights of the families, and ``size`` predictions drawn from their weighted mixture."""
    best = min(bic for _, bic in fits.values())
    raw = {name: math.exp(-0.5 * (bic - best)) for name, (_, bic) in fits.items()}
    total = sum(raw.values())
    weights = {name: w / total for name, w in raw.items()}
    picks = rng.choice(list(weights), size=size, p=list(weights.values()))
    rows = [fits[name][0][int(rng.integers(len(fits[name][0])))] for name in picks]
    return weights, np.asarray(rows)


def extrapolate(
    steps: Sequence[int] | Array,
    values: Sequence[float] | Array,
    horizon: Sequence[int],
    *,
    rng: np.random.Generator,
    bootstrap: int = 16,
    families: Sequence[CurveFamily] = FAMILIES,
    bounds: tuple[float, float] = (-math.inf, math.inf),
) -> CurvePrediction:
    """Predict the values at ``horizon`` steps from the ``values`` observed at ``steps``.

    Args:
        steps: observed steps (1-based, increasing).
        values: the value observed at each step (higher is better).
        horizon: future steps to predict.
        rng: the caller's generator (bootstrap resampling).
        bootstrap: refits per family.
        families: the parametric curves of the ensemble.
        bounds: the value's range (an accuracy in percent: ``(0, 100)``); samples are clipped.

    Example:
        >>> import numpy as np
        >>> x = np.arange(1, 11)
        >>> prediction = extrapolate(x, 0.9 - 0.5 * x**-0.7, [50], rng=np.random.default_rng(0))
        >>> float(np.median(prediction.samples)) > 0.8
        True
    """
    x = np.asarray(steps, dtype=float)
    y_raw = np.asarray(values, dtype=float)
    keep = np.isfinite(y_raw)
    x, y_raw = x[keep], y_raw[keep]
    h = np.asarray(horizon, dtype=float)
    if len(x) < 3:
        flat = np.full((bootstrap, len(h)), y_raw[-1] if len(y_raw) else np.nan)
        return CurvePrediction(tuple(int(s) for s in horizon), flat, {})
    # Fit in units of the observed change, so that guesses and tolerances do not depend on scale.
    origin = float(y_raw[0])
    scale = max(float(np.ptp(y_raw)), 1e-3 * max(abs(origin), 1.0), 1e-9)
    y = (y_raw - origin) / scale
    fits = {}
    for family in families:
        if family.n_params < len(x):
            with np.errstate(all="ignore"):
                result = _bootstrap(family, x, y, h, rng=rng, n=bootstrap)
            if result is not None:
                fits[family.name] = result
    if not fits:
        flat = np.full((bootstrap, len(h)), float(y_raw[-1]))
        return CurvePrediction(tuple(int(s) for s in horizon), flat, {})
    weights, rows = _mixture(fits, rng=rng, size=bootstrap * 4)
    samples = np.clip(origin + scale * rows, *bounds)
    samples = np.where(np.isfinite(samples), samples, origin + scale * y[-1])
    return CurvePrediction(tuple(int(s) for s in horizon), samples, weights)
