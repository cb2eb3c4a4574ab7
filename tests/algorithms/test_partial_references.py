"""Unfinished curves as references: a trial judged against the trials that got further."""

from __future__ import annotations

import numpy as np
import pytest

from ultron.algorithms.partial_references import PartialReferences

M = 30


def rising(top: float, steps: int) -> tuple[list[int], list[float]]:
    """A curve that rises towards ``top``, seen for ``steps`` steps."""
    s = np.arange(1, steps + 1)
    return list(range(1, steps + 1)), [float(v) for v in top - 40.0 * s**-0.5]


def test_too_few_trials_at_its_step_means_no_comparison() -> None:
    refs = PartialReferences(M, min_references=3)
    for i in range(2):
        refs.update(i, *rising(60.0 + i, 10))
    assert refs.chance("new", *rising(70.0, 4), rng=np.random.default_rng(0)) is None
    refs.update(2, *rising(50.0, 2))  # three trials now, but one did not reach step 4
    assert refs.chance("new", *rising(70.0, 4), rng=np.random.default_rng(0)) is None


def test_a_trial_is_predicted_to_the_deepest_step_enough_others_reached() -> None:
    refs = PartialReferences(M, min_references=3, quantile=0.5)
    for i, (top, depth) in enumerate([(60, 12), (65, 12), (70, 9), (75, 20), (80, 20)]):
        refs.update(i, *rising(top, depth))
    rng = np.random.default_rng(0)
    leader, h = refs.chance("leader", *rising(85.0, 4), rng=rng) or (0.0, 0)
    laggard, h2 = refs.chance("laggard", *rising(55.0, 4), rng=rng) or (0.0, 0)
    assert h == h2 == 12  # three trials reached 12, two reached 20
    assert leader > 0.8 > 0.2 > laggard


def test_at_the_frontier_a_trial_is_compared_at_its_own_step() -> None:
    refs = PartialReferences(M, min_references=3, quantile=1.0)
    for i in range(4):
        refs.update(i, *rising(60.0 + i, 5))
    rng = np.random.default_rng(0)
    assert refs.chance("best", *rising(70.0, 5), rng=rng) == (1.0, 5)
    assert refs.chance("worse", *rising(61.0, 5), rng=rng) == (0.0, 5)
    refs.update("best", *rising(70.0, 5))  # itself is not its own reference
    assert refs.chance("best", *rising(70.0, 5), rng=rng) == (1.0, 5)


def test_a_forgotten_trial_is_no_reference_and_a_bad_quantile_is_refused() -> None:
    refs = PartialReferences(M, min_references=2, quantile=1.0)
    refs.update("a", *rising(60.0, 5))
    refs.update("b", *rising(90.0, 5))
    rng = np.random.default_rng(0)
    assert refs.chance("c", *rising(70.0, 5), rng=rng) == (0.0, 5)
    refs.forget("b")
    refs.update("d", *rising(50.0, 5))
    assert refs.chance("c", *rising(70.0, 5), rng=rng) == (1.0, 5)
    with pytest.raises(ValueError, match=r"quantile is 1\.5"):
        PartialReferences(M, quantile=1.5)
