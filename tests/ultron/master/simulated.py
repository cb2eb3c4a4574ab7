"""What the tests of the master's loops share: a master over the simulated dispatcher, cache
and store (:mod:`ultron.simulation.jobs`), on a benchmark of trials that take no time."""

from __future__ import annotations

from typing import Any

from ultron.algorithms.base import Direction
from ultron.algorithms.registry import resolve_strategy
from ultron.algorithms.space import SearchSpace
from ultron.master.interfaces import Store
from ultron.master.job_state import JobState
from ultron.master.loops import Master, SearchSettings
from ultron.simulation.benchmark import LearningCurve
from ultron.simulation.jobs import MemoryCache, MemoryStore, SimulatedDispatcher


class Instant:
    """A benchmark of trials of one step at no time, scored by their value of ``key``.

    Args:
        space: the search space.
        key: the hyperparameter that is the score.
        direction: whether the score is minimized or maximized.
        max_resource: the most steps a trial runs (what a stopper is told).
    """

    def __init__(
        self,
        space: SearchSpace,
        *,
        key: str,
        direction: Direction = Direction.MINIMIZE,
        max_resource: int = 1,
    ) -> None:
        self.search_space = space
        self.key = key
        self.direction = direction
        self.max_resource = max_resource

    def learning_curve(self, config: dict[str, Any]) -> LearningCurve:
        return LearningCurve((config[self.key],), (0.0,))


def simulated_master(
    dispatcher: SimulatedDispatcher,
    *,
    num_iterations: int,
    parallelism: int,
    strategy: str = "random",
    seed: int = 3,
    store: Store | None = None,
    state: JobState | None = None,
    **more: Any,
) -> Master:
    """A master of job ``job`` with the strategy ``strategy`` (seeded ``seed``) on the
    dispatcher's search space and direction, an empty cache, and ``store`` (default: one in
    memory); ``more`` are further arguments of :class:`Master`."""
    benchmark = dispatcher.benchmark
    return Master(
        settings=SearchSettings(num_iterations=num_iterations, parallelism=parallelism),
        strategy=resolve_strategy(strategy)(
            search_space=benchmark.search_space, seed=seed, direction=benchmark.direction
        ),
        cache=MemoryCache(),
        dispatcher=dispatcher,
        store=store or MemoryStore("job"),
        state=state or JobState("job"),
        **more,
    )
