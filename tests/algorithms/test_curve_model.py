"""The curve model POP ranks with: calibrated on finished curves, a widened fallback before."""

from __future__ import annotations

import numpy as np
import pytest

from ultron.algorithms.curve_model import FALLBACK_WIDTH, CurveModel
from ultron.algorithms.curves import CurvePrediction

MAX = 30
STEPS = np.arange(1, MAX + 1)


def synthetic_curves(n: int, seed: int) -> np.ndarray:
    """Accuracy-like curves of random shape (limit, gap, rate) with noise: ``(n, MAX)``."""
    rng = np.random.default_rng(seed)
    limit = rng.uniform(50.0, 90.0, (n, 1))
    gap = rng.uniform(15.0, 45.0, (n, 1))
    rate = rng.uniform(0.3, 1.2, (n, 1))
    return np.asarray(limit - gap * STEPS**-rate + rng.normal(0.0, 0.8, (n, MAX)))


def fitted(references: np.ndarray, **options: int) -> CurveModel:
    model = CurveModel(MAX, bounds=(0.0, 100.0), **options)
    for row in references:
        model.add_reference(row)
    return model


@pytest.mark.parametrize("seen", [1, 4, 10])
def test_the_80_percent_interval_covers_80_percent_of_new_curves(seen: int) -> None:
    """Split-conformal: references and new trials drawn alike, so the coverage is nominal."""
    curves = synthetic_curves(400, seed=seen)
    model = fitted(curves[:150])
    rng = np.random.default_rng(0)
    covered = []
    for curve in curves[150:]:
        prediction = model.predict(STEPS[:seen], curve[:seen], [MAX], rng=rng)
        low, high = prediction.quantiles([0.1, 0.9])[:, 0]
        covered.append(low <= curve[-1] <= high)
    assert 0.72 <= np.mean(covered) <= 0.88


def test_the_reach_probability_ranks_the_curves_that_end_best_first() -> None:
    curves = synthetic_curves(300, seed=7)
    model = fitted(curves[:150])
    rng = np.random.default_rng(0)
    queries = curves[150:]
    goal = float(np.quantile(curves[:, -1], 0.9))
    p = np.array(
        [
            model.predict(STEPS[:4], c[:4], list(range(5, MAX + 1)), rng=rng).prob_reached(goal)[-1]
            for c in queries
        ]
    )
    winners = queries[:, -1] >= goal
    auc = (p[winners][:, None] > p[~winners][None, :]).mean()
    assert auc > 0.8


def test_before_min_references_the_widened_ensemble_predicts() -> None:
    curves = synthetic_curves(20, seed=3)
    model = fitted(curves[:4], min_references=5, bootstrap=25)
    assert model.references == 4 and not model.calibrated
    seen, prefix = 6, curves[10, :6]
    prediction = model.predict(STEPS[:seen], prefix, [12, MAX], rng=np.random.default_rng(1))
    assert prediction.sample_weights is None and prediction.weights  # the ensemble's families
    low, high = prediction.quantiles([0.1, 0.9])
    expected = FALLBACK_WIDTH * np.ptp(prefix) * (np.array([12, MAX]) - seen) / seen
    assert np.allclose((high - low) / 2, expected, rtol=0.4)  # 100 samples of a normal
    model.add_reference(curves[5])
    assert model.calibrated
    after = model.predict(STEPS[:seen], prefix, [12, MAX], rng=np.random.default_rng(1))
    assert after.sample_weights is not None and len(after.samples) == 5


def test_a_curve_with_a_gap_is_not_a_reference() -> None:
    model = CurveModel(MAX)
    model.add_reference([np.nan, *range(1, MAX)])
    model.add_reference(range(MAX - 1))
    assert model.references == 0


def test_min_references_below_two_is_refused() -> None:
    with pytest.raises(ValueError, match="min_references is 1; it must be at least 2"):
        CurveModel(MAX, min_references=1)


def test_weighted_quantiles_and_probabilities() -> None:
    samples = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 0.0]])
    prediction = CurvePrediction((1, 2), samples, {}, sample_weights=np.array([0.1, 0.6, 0.3]))
    assert prediction.quantiles([0.05, 0.5, 0.95]).tolist() == [
        [1.0, 0.0],
        [2.0, 20.0],
        [3.0, 20.0],
    ]
    assert prediction.prob_at_least(2.0).tolist() == pytest.approx([0.9, 0.7])
    assert prediction.prob_reached(15.0).tolist() == pytest.approx([0.0, 0.6])
