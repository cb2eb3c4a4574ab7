"""A simulated cluster: strategies and stoppers run against known learning curves, on a fake clock.

As in HyperDrive's trace-driven simulator (section 7) and Syne Tune's simulator backend: a
benchmark knows, for any configuration, the value reported after each step and how long each step
takes. An event-driven loop plays an asynchronous master over ``workers`` simulated workers: a free
worker first serves the stopper's resumes, then asks the strategy for one new configuration;
every step's report goes to the stopper, whose decisions (continue, stop, suspend) are honoured.
A day of a 256-worker cluster runs in seconds, because nothing trains.

The strategy is told each trial's score once, when the trial first leaves its worker (finished,
stopped or suspended): the last value it reported.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from algorithms.base import Direction, HPOAlgorithm
from algorithms.space import Config, SearchSpace
from algorithms.stoppers.base import Decision, Stopper

__all__ = [
    "Benchmark",
    "LearningCurve",
    "SimulatedClock",
    "Simulation",
    "SimulationResult",
    "TrialRecord",
    "TrialStatus",
]


@dataclass(frozen=True)
class LearningCurve:
    """What a configuration reports after each step, and how long each step takes (seconds)."""

    values: tuple[float, ...]
    durations: tuple[float, ...]


class Benchmark(Protocol):
    """A problem whose every configuration's learning curve is known (table or surrogate)."""

    search_space: SearchSpace
    direction: Direction
    max_resource: int

    def learning_curve(self, config: Config) -> LearningCurve: ...


class SimulatedClock:
    """The simulation's time in seconds; pass it to stoppers that read a clock (POP)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TrialStatus(StrEnum):
    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    STOPPED = "stopped"


@dataclass
class TrialRecord:
    """One simulated trial: its configuration and every step it reported, with times."""

    trial_id: int
    config: Config
    curve: LearningCurve
    status: TrialStatus = TrialStatus.RUNNING
    steps: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    suspensions: int = 0
    told: bool = False


@dataclass(frozen=True)
class SimulationResult:
    """The outcome: every trial, the simulated time used and when the target was first met."""

    trials: tuple[TrialRecord, ...]
    elapsed: float
    best_value: float
    time_to_target: float | None
    steps_run: int


class Simulation:
    """An asynchronous master over ``workers`` simulated workers.

    Args:
        benchmark: the problem.
        strategy: any object with the paper's two methods.
        stopper: optional early stopping.
        workers: how many trials run at once.
        max_trials: how many new trials may start (``None``: no limit).
        max_time: simulated seconds after which the run ends (``None``: no limit).
        target: the run ends as soon as a report reaches this value (``None``: never).
        clock: the clock to advance (share it with a stopper that reads time).
        tell_stopped: how a trial stopped before its last step is scored for the strategy: its
            last value (default), or nan (``False``), so that a model-based strategy learns
            only from full-length trials instead of mixing low-fidelity values in.

    Example:
        >>> from algorithms.random_search import RandomSearch
        >>> from algorithms.space import SearchSpace, Uniform
        >>> class Toy:
        ...     search_space = SearchSpace({"x": Uniform(0.0, 1.0)})
        ...     direction, max_resource = Direction.MAXIMIZE, 3
        ...     def learning_curve(self, config):
        ...         return LearningCurve((config["x"],) * 3, (1.0, 1.0, 1.0))
        >>> sim = Simulation(Toy(), RandomSearch(Toy.search_space, seed=0), workers=2, max_trials=4)
        >>> result = sim.run()
        >>> len(result.trials), result.elapsed, result.steps_run
        (4, 6.0, 12)
    """

    def __init__(
        self,
        benchmark: Benchmark,
        strategy: HPOAlgorithm,
        *,
        stopper: Stopper | None = None,
        workers: int,
        max_trials: int | None = None,
        max_time: float | None = None,
        target: float | None = None,
        clock: SimulatedClock | None = None,
        tell_stopped: bool = True,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers is {workers}; it must be at least 1")
        self.benchmark = benchmark
        self.strategy = strategy
        self.stopper = stopper
        self.workers = workers
        self.max_trials = max_trials
        self.max_time = math.inf if max_time is None else max_time
        self.target = target
        self.clock = clock or SimulatedClock()
        self.tell_stopped = tell_stopped
        self._sign = 1.0 if benchmark.direction is Direction.MAXIMIZE else -1.0
        self._trials: list[TrialRecord] = []
        self._events: list[tuple[float, int, int]] = []  # (time, tie-break, trial)
        self._seq = 0
        self._running = 0
        self._best = -math.inf  # in "higher is better" units
        self._hit: float | None = None
        self._exhausted = False

    @property
    def _can_start_new(self) -> bool:
        return not self._exhausted and (
            self.max_trials is None or len(self._trials) < self.max_trials
        )

    def run(self) -> SimulationResult:
        """Play the loop until the target, the time limit, or nothing is left to run."""
        self._fill()
        while self._events and self._hit is None:
            time, _, trial_id = heapq.heappop(self._events)
            if time > self.max_time:
                self.clock.now = self.max_time
                break
            self.clock.now = time
            self._on_step(self._trials[trial_id])
            self._fill()
        best = self._sign * self._best if self._trials else math.nan
        steps = sum(len(t.steps) for t in self._trials)
        return SimulationResult(tuple(self._trials), self.clock.now, best, self._hit, steps)

    def _fill(self) -> None:
        """Give free workers work: the stopper's resumes first, then new trials."""
        while self._running < self.workers:
            free = self.workers - self._running
            commands = (
                []
                if self.stopper is None
                else self.stopper.poll(free_slots=free, can_start_new=self._can_start_new)
            )
            for command in commands:
                trial = self._trials[int(command.trial_id)]
                if command.decision is Decision.RESUME:
                    self._resume(trial)
                else:
                    self._finish(trial, TrialStatus.STOPPED)
            while self._running < self.workers and self._can_start_new:
                self._start_new()
            if not commands:
                return

    def _start_new(self) -> None:
        batch = self.strategy.sample_hyperparameter_candidates(1)
        if not batch:
            self._exhausted = True
            return
        trial = TrialRecord(len(self._trials), batch[0], self.benchmark.learning_curve(batch[0]))
        self._trials.append(trial)
        if self.stopper is not None:
            self.stopper.on_trial_start(trial.trial_id)
        self._resume(trial)

    def _resume(self, trial: TrialRecord) -> None:
        trial.status = TrialStatus.RUNNING
        self._running += 1
        self._schedule(trial)

    def _schedule(self, trial: TrialRecord) -> None:
        step = len(trial.steps)  # index of the next step: resumes never repeat a step
        heapq.heappush(
            self._events, (self.clock.now + trial.curve.durations[step], self._seq, trial.trial_id)
        )
        self._seq += 1

    def _on_step(self, trial: TrialRecord) -> None:
        step = len(trial.steps) + 1
        value = trial.curve.values[step - 1]
        trial.steps.append(step)
        trial.values.append(value)
        trial.times.append(self.clock.now)
        if not math.isnan(value) and self._sign * value > self._best:
            self._best = self._sign * value
            if self.target is not None and self._best >= self._sign * self.target:
                self._hit = self.clock.now
        decision = Decision.CONTINUE
        if self.stopper is not None:
            decision = self.stopper.on_report(trial.trial_id, step, value)
        if step == len(trial.curve.values):
            self._running -= 1
            self._finish(trial, TrialStatus.COMPLETED)
        elif decision is Decision.CONTINUE:
            self._schedule(trial)
        elif decision is Decision.SUSPEND:
            self._running -= 1
            trial.status = TrialStatus.SUSPENDED
            trial.suspensions += 1
            self._tell(trial)
        else:
            self._running -= 1
            self._finish(trial, TrialStatus.STOPPED)

    def _finish(self, trial: TrialRecord, status: TrialStatus) -> None:
        trial.status = status
        if self.stopper is not None:
            self.stopper.on_trial_complete(trial.trial_id)
        self._tell(trial)

    def _tell(self, trial: TrialRecord) -> None:
        if not trial.told:
            trial.told = True
            score = trial.values[-1] if trial.values else math.nan
            if not self.tell_stopped and len(trial.values) < len(trial.curve.values):
                score = math.nan
            self.strategy.update_state([trial.config], [score])


def best_so_far(trials: Sequence[TrialRecord], direction: Direction) -> list[tuple[float, Any]]:
    """``(time, best value)`` after each report, in time order: the anytime performance."""
    sign = 1.0 if direction is Direction.MAXIMIZE else -1.0
    events = sorted(
        (t, v) for trial in trials for t, v in zip(trial.times, trial.values, strict=True)
    )
    trace, best = [], -math.inf
    for time, value in events:
        if not math.isnan(value) and sign * value > best:
            best = sign * value
            trace.append((time, sign * best))
    return trace
