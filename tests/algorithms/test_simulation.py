"""The simulated cluster: clock, worker count, limits, and what the strategy is told."""

from __future__ import annotations

import math
from typing import Any

from ultron.algorithms.base import Direction
from ultron.algorithms.grid_search import GridSearch
from ultron.algorithms.space import Choice, SearchSpace
from ultron.algorithms.stoppers import ASHA
from ultron.simulation.benchmark import LearningCurve, Simulation, TrialStatus, best_so_far


class Steps:
    """Config ``x`` reports ``x * step`` for 4 steps of ``x`` seconds each."""

    search_space = SearchSpace({"x": Choice((1, 2, 3, 4, 5, 6))})
    direction = Direction.MAXIMIZE
    max_resource = 4

    def learning_curve(self, config: dict[str, Any]) -> LearningCurve:
        x = config["x"]
        return LearningCurve(tuple(float(x * s) for s in range(1, 5)), (float(x),) * 4)


class Recorder(GridSearch):
    def __init__(self) -> None:
        super().__init__(Steps.search_space)
        self.told: list[tuple[int, float]] = []

    def update_state(self, candidates: Any, scores: Any) -> None:
        self.told += [(c["x"], s) for c, s in zip(candidates, scores, strict=True)]


def test_workers_run_in_parallel_on_the_simulated_clock() -> None:
    result = Simulation(Steps(), GridSearch(Steps.search_space), workers=3).run()
    # workers take x = 1, 2, 3; then 4, 5, 6 start at 4, 8 and 12 seconds
    assert result.elapsed == 12 + 24
    assert all(t.status is TrialStatus.COMPLETED for t in result.trials)
    assert result.steps_run == 24


def test_the_target_and_the_time_limit_end_the_run() -> None:
    hit = Simulation(Steps(), GridSearch(Steps.search_space), workers=1, target=8.0).run()
    assert hit.time_to_target == 4 + 2 * 4  # x=2 reaches 8 at its 4th step
    capped = Simulation(Steps(), GridSearch(Steps.search_space), workers=1, max_time=5.0).run()
    assert capped.elapsed == 5.0 and capped.time_to_target is None


def test_stopped_trials_are_told_their_last_value_or_nan() -> None:
    for tell_stopped in (True, False):
        recorder = Recorder()
        asha = ASHA(direction="minimize", max_resource=4, reduction_factor=2)  # x=1 is best
        Simulation(Steps(), recorder, stopper=asha, workers=1, tell_stopped=tell_stopped).run()
        scores = dict(recorder.told)
        assert scores[1] == 4.0  # the first (and best) runs all 4 steps
        if tell_stopped:
            assert scores[6] == 6.0  # stopped at the first rung, told its value there
        else:
            assert math.isnan(scores[6])


def test_best_so_far_is_monotone() -> None:
    result = Simulation(Steps(), GridSearch(Steps.search_space), workers=2).run()
    trace = best_so_far(result.trials, Direction.MAXIMIZE)
    values = [v for _, v in trace]
    assert values == sorted(values) and values[-1] == 24.0
