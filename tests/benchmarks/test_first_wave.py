"""benchmarks.first_wave: random search's time to target on its first wave, and its summary.

The last test needs the YAHPO LCBench surrogate in ``../shared/data`` and ``onnxruntime``;
it skips otherwise.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
TASK = "189906"


@pytest.fixture
def waves(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``benchmarks.first_wave`` from the checkout (not installed)."""
    monkeypatch.syspath_prepend(str(REPO))
    import benchmarks.first_wave

    return benchmarks.first_wave


def test_the_time_to_target_is_the_end_of_the_first_epoch_at_or_above_it(
    waves: ModuleType,
) -> None:
    values = np.array([[50.0, 70.0, 60.0, 80.0], [10.0, 20.0, 30.0, 40.0], [90.0, 0, 0, 0]])
    durations = np.array([[1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 1.0, 1.0], [5.0, 1.0, 1.0, 1.0]])
    times = waves.time_to_target(values, durations, 70.0)
    # the first curve reaches 70 at its second epoch (a later fall does not matter), the second
    # never, the third at once
    assert list(times) == [3.0, math.inf, 5.0]


def test_the_summary_counts_winners_by_the_cap_and_means_their_times(waves: ModuleType) -> None:
    rows = [
        {"workers": 4, "quantile": 0.9, "seconds": 3600.0, "cap": 7200.0},
        {"workers": 4, "quantile": 0.9, "seconds": 4 * 3600.0, "cap": 7200.0},
        {"workers": 4, "quantile": 0.9, "seconds": math.inf, "cap": 7200.0},
        {"workers": 8, "quantile": 0.9, "seconds": math.inf, "cap": 3600.0},
    ]
    four, eight = waves.ceiling(rows)
    assert (four["pairs"], four["winner"], four["by_cap"]) == (3, 2, 1)
    assert four["hours"] == pytest.approx(2.0)  # the geometric mean of 1 h and 4 h
    assert four["chance"] == pytest.approx(1 - 0.9**4)
    assert (eight["winner"], eight["by_cap"]) == (0, 0) and math.isnan(eight["hours"])
    assert "| 4 | 0.9 | 2/3 (67%) | 1/3 |" in waves.table([four, eight])


def test_the_first_wave_is_what_the_suites_random_search_starts(waves: ModuleType) -> None:
    from benchmarks.data import DataMissing

    try:
        surrogate = waves.bench(TASK)
    except DataMissing as error:
        pytest.skip(str(error))
    from benchmarks.suite_job import run_one
    from benchmarks.suite_runs import SuiteSettings

    workers = 4
    curves = [surrogate.learning_curve(c) for c in waves.first_wave(workers, 0)]
    values = np.array([c.values for c in curves])
    durations = np.array([c.durations for c in curves])
    # A target that the first wave reaches by its third epoch, before any of its trials ends
    # and frees a worker for another configuration: random search's time is the wave's.
    target = float(values[:, 2].max())
    wave = float(waves.time_to_target(values, durations, target).min())
    assert wave < durations.sum(axis=1).min()
    stats = {"target": target, "t52": 2 * wave, "best": 100.0, "median": 0.0}
    run = run_one(TASK, "Random", workers, 0, SuiteSettings(budget=workers), stats)
    # the simulator charges a dispatch (3.2 ms) and a report per epoch (2.5 ms) besides
    assert run["hours"] * 3600 == pytest.approx(wave, abs=0.05)


def test_the_split_compares_with_random_search_apart_where_the_wave_holds_a_winner(
    waves: ModuleType,
) -> None:
    from benchmarks.suite_runs import SuiteSettings

    rows = [  # task a's first wave holds a winner by the cap, b's only after it, c's none
        {"task": "a", "seed": 0, "workers": 4, "quantile": 0.99, "seconds": 10.0, "cap": 20.0},
        {"task": "b", "seed": 0, "workers": 4, "quantile": 0.99, "seconds": 30.0, "cap": 20.0},
        {"task": "c", "seed": 0, "workers": 4, "quantile": 0.99, "seconds": math.inf, "cap": 20.0},
        {"task": "a", "seed": 0, "workers": 4, "quantile": 0.95, "seconds": 1.0, "cap": 20.0},
    ]
    hours = {("a", "Random"): 0.001, ("a", "POP"): 0.001, ("b", "Random"): 0.004}
    hours |= {("b", "POP"): 0.001, ("c", "Random"): math.inf, ("c", "POP"): 0.002}
    suite = {
        "settings": SuiteSettings(seeds=1, quantile=0.99),
        "tasks": ["a", "b", "c"],
        "methods": ["Random", "POP"],
        "workers": [4],
        "runs": {(t, m, 4, 0): {"hours": h} for (t, m), h in hours.items()},
    }
    holds, none, every = waves.split(rows, suite)
    assert (holds["holds"], holds["pairs"], holds["random"]) == (True, 1, 1)
    assert holds["methods"]["POP"] == {"speedup": 1.0, "both": 1, "reached": 1}
    assert (none["holds"], none["pairs"], none["random"]) == (False, 2, 1)
    # b: x4 over random search; c, which only POP reached, counts as reached, not in the mean
    assert none["methods"]["POP"] == {"speedup": 4.0, "both": 1, "reached": 2}
    assert "| 4 | 0.99 | no | 2 | 1 | x4.00 (1 pairs); reached 2 |" in waves.split_table(
        [holds, none]
    )
    # all pairs, a miss counted at the cap: a x1, b x4, c random search's miss at the cap (20 s)
    # over POP's 7.2 s
    assert (every["holds"], every["pairs"], every["random"]) == (None, 3, 2)
    assert every["methods"]["POP"]["both"] == 3
    assert every["methods"]["POP"]["speedup"] == pytest.approx((1 * 4 * 20 / 7.2) ** (1 / 3))
