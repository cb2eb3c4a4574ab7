"""The simulator: the real master loop against a benchmark, on a simulated clock.

As in HyperDrive's trace-driven simulator (section 7) and Syne Tune's simulator backend,
:func:`simulate_job` runs :class:`~ultron.master.loops.Master` — the same asynchronous loop,
strategy, score cache logic and stopper driver a real job uses — with a
:class:`SimulatedDispatcher` in place of Dask: each trial "trains" by replaying its known
learning curve (:class:`~ultron.simulation.benchmark.Benchmark`), one step per event, and the
clock jumps from event to event. Reports reach the stopper as they would from ``ultron.report``,
and a stop or suspend is honoured as the real system honours it: the trial hears it with its
next report (a cooperative model). Around the steps the simulator charges what a real job pays
(:class:`~ultron.simulation.costs.SimulationCosts`, measured defaults): each trial's dispatch
latency, and a checkpoint written as a trial returns and read back when it resumes. A free
worker first serves the stopper's resumes, then asks the strategy for one new configuration; the
strategy hears a trial's score when the trial ends (finished or stopped; a suspended trial has
not ended), as in a real job. A day of a 256-worker cluster runs in seconds, because nothing
trains. Nothing touches Redis: the job's state and score cache live in memory
(:class:`MemoryStore`, :class:`MemoryCache`).

Example:
    >>> from ultron.algorithms import Choice, Direction, GridSearch, SearchSpace
    >>> from ultron.simulation.benchmark import LearningCurve
    >>> class Toy:
    ...     search_space = SearchSpace({"x": Choice((1, 2, 3))})
    ...     direction, max_resource = Direction.MINIMIZE, 3
    ...     def learning_curve(self, config):
    ...         return LearningCurve(values=(3.0, 2.0, float(config["x"])), durations=(1, 1, 1))
    >>> free = SimulationCosts.free()
    >>> out = simulate_job(Toy(), GridSearch(Toy.search_space), budget=3, workers=3, costs=free)
    >>> out.best_score, out.elapsed, out.steps_trained
    (1.0, 3.0, 9)
    >>> out.time_to_target(2.0)
    3.0
    >>> costs = SimulationCosts(start_s=0.25, report_s=0.25, checkpoint_write_s=0.25, return_s=0.5)
    >>> simulate_job(Toy(), GridSearch(Toy.search_space), budget=3, workers=3, costs=costs).elapsed
    4.75
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ultron.algorithms.base import Direction, HPOAlgorithm
from ultron.algorithms.space import Config, SearchSpace
from ultron.algorithms.stoppers.base import Stopper
from ultron.master.early_stopping import StopperDriver
from ultron.master.job_state import JobState
from ultron.master.loops import Master, SearchSettings
from ultron.master.results import best_trial
from ultron.master.score_cache import answer, cache_field, stored_entry
from ultron.simulation.benchmark import Benchmark, SimulatedClock
from ultron.simulation.costs import SimulationCosts
from ultron.simulation.dispatcher import METRIC as _METRIC
from ultron.simulation.dispatcher import SimulatedDispatcher
from ultron.trial_records import TrialResult

__all__ = ["MemoryCache", "MemoryStore", "SimulatedDispatcher", "SimulatedJob", "simulate_job"]


class MemoryStore:
    """Keeps the job's state in this process (a simulation has nothing to survive)."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.saves = 0

    def save(
        self,
        state: JobState,
        new: Sequence[TrialResult] = (),
        *,
        logged: Sequence[list[Any]] | None = None,
        first: Callable[[Any], None] | None = None,
    ) -> None:
        self.saves += 1

    def flush(self) -> None:
        pass


class MemoryCache:
    """The score cache of one simulated job, as a dict; answers as the real one does.

    Args:
        metric: the objective metric; an entry answers only when its metrics hold it.
        enabled: when ``False``, only an entry of the very trial asked for answers.
        space: the search space; a configuration is keyed by its active parameters only.
    """

    def __init__(
        self, *, metric: str = _METRIC, enabled: bool = True, space: SearchSpace | None = None
    ) -> None:
        self.metric = metric
        self.enabled = enabled
        self.space = space
        self.entries: dict[str, dict[str, Any]] = {}

    def get_many(
        self, configs: Sequence[Config], *, job_id: str, trial_ids: Sequence[str]
    ) -> list[dict[str, Any] | None]:
        return [
            answer(
                self.entries.get(self._field(c)),
                metric=self.metric,
                enabled=self.enabled,
                job_id=job_id,
                trial_id=trial_id,
            )
            for c, trial_id in zip(configs, trial_ids, strict=True)
        ]

    def put(self, config: Config, entry: dict[str, Any], *, pipe: Any = None) -> None:
        # ``pipe`` is a Redis pipeline's: the master passes none to a cache without a client.
        self.entries[self._field(config)] = stored_entry(entry, metric=self.metric)

    def _field(self, config: Config) -> str:
        return cache_field(config, self.space)


class _TargetReached(Exception):
    pass


@dataclass(frozen=True)
class SimulatedJob:
    """What a simulated job gives back.

    Attributes:
        trials: the trial table, as a real job's.
        best_score: the best score found.
        elapsed: simulated seconds until the last trial ended.
        trials_started: trials that started training, finished or not (resumes not counted).
        steps_trained: steps (epochs) trained in all.
        steps_reached: trial id -> the step it got to (over all its attempts).
        curves: trial id -> what it reported (``step``, ``time``, ``value``), all attempts
            together (the job's curves).
        best_over_time: (simulated time, best score so far) after each trial.
        direction: whether lower or higher scores are better.
    """

    trials: list[TrialResult]
    best_score: float | None
    elapsed: float
    trials_started: int
    steps_trained: int
    steps_reached: dict[str, int]
    curves: dict[str, list[dict[str, Any]]]
    best_over_time: list[tuple[float, float]]
    direction: Direction

    def time_to_target(self, target: float) -> float:
        """Simulated seconds until a finished trial's score reached ``target`` (inf if never)."""
        for when, score in self.best_over_time:
            if _reaches(score, target, self.direction):
                return when
        return math.inf


def _reaches(score: float, target: float, direction: Direction) -> bool:
    return score >= target if direction is Direction.MAXIMIZE else score <= target


@dataclass
class _Incumbent:
    """The best score over simulated time, as the master's results come; ends the job (raises
    :class:`_TargetReached`) once it reaches ``target``."""

    clock: SimulatedClock
    direction: Direction
    target: float | None
    best: list[tuple[float, float]] = field(default_factory=list)  # (time, best score)
    folded: int = 0  # rows of the trial table already counted in ``best``

    def record(self, state: JobState, running: int, last: TrialResult | None) -> None:
        """The master's ``on_result``: only the rows added since the last call (the whole table
        each time is quadratic)."""
        maximize = self.direction is Direction.MAXIMIZE
        scores = [self.best[-1][1]] if self.best else []
        top = best_trial([*state.trials[self.folded :], *([last] if last else [])], self.direction)
        self.folded = len(state.trials)
        if top is not None and top.score is not None:
            scores.append(top.score)
        if scores:
            self.best.append((self.clock.now, max(scores) if maximize else min(scores)))

    def check(self) -> None:
        """The master's ``check``: the target reached ends the job."""
        target, best = self.target, self.best
        if target is not None and best and _reaches(best[-1][1], target, self.direction):
            raise _TargetReached


def simulate_job(
    benchmark: Benchmark,
    strategy: HPOAlgorithm,
    *,
    budget: int,
    workers: int,
    stopper: Stopper | None = None,
    clock: SimulatedClock | None = None,
    tell_stopped: bool = True,
    target: float | None = None,
    costs: SimulationCosts | None = None,
) -> SimulatedJob:
    """Run :class:`~ultron.master.loops.Master`'s asynchronous loop over a simulated cluster.

    With ``target``, the job ends as soon as a finished trial's score reaches it (as a user
    would cancel a job that found what it needed); otherwise it spends the whole budget.
    ``costs`` is what the simulator charges besides the steps (default: the measured
    :class:`~ultron.simulation.costs.SimulationCosts`; ``SimulationCosts.free()`` charges
    nothing and honours a decision at the step it is made on).
    """
    clock = clock or SimulatedClock()
    driver = None
    if stopper is not None:
        driver = StopperDriver(stopper, None, "simulated", metric=_METRIC)
    dispatcher = SimulatedDispatcher(benchmark, clock, driver=driver, costs=costs)
    direction = Direction(benchmark.direction)
    incumbent = _Incumbent(clock, direction, target)
    state = JobState("simulated")
    master = Master(
        settings=SearchSettings(
            num_iterations=budget,
            parallelism=workers,
            max_failed_share=1.0,
            tell_stopped=tell_stopped,
        ),
        strategy=strategy,
        cache=MemoryCache(),
        dispatcher=dispatcher,
        store=MemoryStore("simulated"),
        state=state,
        on_result=incumbent.record,
        driver=driver,
        check=incumbent.check,
        clock=lambda: clock.now,  # a job goal's seconds are simulated ones
    )
    with contextlib.suppress(_TargetReached):
        master.run_async()
    top = best_trial(state.trials, direction)
    return SimulatedJob(
        trials=list(state.trials),
        best_score=top.score if top else None,
        elapsed=clock.now,
        trials_started=dispatcher.trials_started,
        steps_trained=dispatcher.steps_trained,
        steps_reached=dict(dispatcher.progress),
        curves=dict(state.curves),
        best_over_time=incumbent.best,
        direction=direction,
    )
