"""The simulator: the real master loop against a benchmark, on a simulated clock.

As in HyperDrive's trace-driven simulator (section 7) and Syne Tune's simulator backend,
:func:`simulate_job` runs :class:`~ultron.master.loops.Master` — the same asynchronous loop,
strategy, score cache logic and stopper driver a real job uses — with a
:class:`SimulatedDispatcher` in place of Dask: each trial "trains" by replaying its known
learning curve (:class:`~ultron.simulation.benchmark.Benchmark`), one step per event, and the
clock jumps from event to event. Reports reach the stopper as they would from ``ultron.report``,
and a stop or suspend is honoured at that step (a cooperative model). A free worker first serves
the stopper's resumes, then asks the strategy for one new configuration; the strategy hears a
trial's score when the trial ends (finished or stopped; a suspended trial has not ended), as in
a real job. A day of a 256-worker cluster runs in seconds, because nothing trains. Nothing
touches Redis: the job's state and score cache live in memory (:class:`MemoryStore`,
:class:`MemoryCache`).

Example:
    >>> from ultron.algorithms import Choice, Direction, GridSearch, SearchSpace
    >>> from ultron.simulation.benchmark import LearningCurve
    >>> class Toy:
    ...     search_space = SearchSpace({"x": Choice((1, 2, 3))})
    ...     direction, max_resource = Direction.MINIMIZE, 3
    ...     def learning_curve(self, config):
    ...         return LearningCurve(values=(3.0, 2.0, float(config["x"])), durations=(1, 1, 1))
    >>> out = simulate_job(Toy(), GridSearch(Toy.search_space), budget=3, workers=3)
    >>> out.best_score, out.elapsed, out.steps_trained
    (1.0, 3.0, 9)
    >>> out.time_to_target(2.0)
    3.0
"""

from __future__ import annotations

import contextlib
import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ultron.algorithms.base import Direction, HPOAlgorithm
from ultron.algorithms.space import Config, SearchSpace
from ultron.algorithms.stoppers.base import Decision, Stopper
from ultron.master.early_stopping import StopperDriver
from ultron.master.job_state import JobState
from ultron.master.loops import Master, SearchSettings
from ultron.master.results import best_trial
from ultron.master.score_cache import answer, cache_field, stored_entry
from ultron.simulation.benchmark import Benchmark, LearningCurve, SimulatedClock
from ultron.trial_records import TrialRequest, TrialResult, TrialStatus

__all__ = ["MemoryCache", "MemoryStore", "SimulatedDispatcher", "SimulatedJob", "simulate_job"]

_METRIC = "value"


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

    def put(self, config: Config, entry: dict[str, Any]) -> None:
        self.entries[self._field(config)] = stored_entry(entry, metric=self.metric)

    def _field(self, config: Config) -> str:
        return cache_field(config, self.space)


@dataclass
class _Running:
    request: TrialRequest
    curve: LearningCurve
    started: float
    reports: list[dict[str, Any]] = field(default_factory=list)


class SimulatedDispatcher:
    """Runs trials by replaying their learning curves on a simulated clock.

    Args:
        benchmark: knows every configuration's learning curve.
        clock: the simulated clock (give the same one to stoppers that read time).
        driver: the stopper driver, fed each step's report as it happens.
    """

    def __init__(
        self, benchmark: Benchmark, clock: SimulatedClock, *, driver: StopperDriver | None = None
    ) -> None:
        self.benchmark = benchmark
        self.clock = clock
        self.driver = driver
        self.steps_trained = 0
        self._events: list[tuple[float, int, str]] = []
        self._seq = 0
        self._running: dict[str, _Running] = {}
        # Kept across suspensions: a resumed trial goes on from its checkpoint, on the same curve.
        self._curves: dict[str, LearningCurve] = {}
        self.progress: dict[str, int] = {}  # steps done per trial
        self._stopping: set[str] = set()  # asked to stop (the job's goal was reached)

    @property
    def in_flight(self) -> int:
        return len(self._running)

    @property
    def trials_started(self) -> int:
        """Trials that started training (a resume is not a new start)."""
        return len(self._curves)

    def request(
        self, trial_id: str, config: Config, *, attempt: int = 1, resume: bool = False
    ) -> TrialRequest:
        return TrialRequest(
            job_id="simulated",
            trial_id=trial_id,
            hyperparameters=config,
            model="",
            python="",
            metric=_METRIC,
            seed=0,
            checkpoint_path="",
            log_path="",
            redis_url="",
            resume=resume,
            attempt=attempt,
        )

    def start(self, *requests: TrialRequest) -> None:
        for request in requests:
            trial_id = request.trial_id
            if request.exploit_from is not None:
                self._exploit(request)
            if trial_id not in self._curves:
                self._curves[trial_id] = self.benchmark.learning_curve(request.hyperparameters)
            self._running[trial_id] = _Running(request, self._curves[trial_id], self.clock.now)
            self._schedule(trial_id)

    def _exploit(self, request: TrialRequest) -> None:
        """PBT's exploit: the trial takes its source's state (its curve so far, its step) and
        goes on under its new configuration, as the benchmark's ``continue_curve`` says."""
        continue_curve = getattr(self.benchmark, "continue_curve", None)
        if continue_curve is None:
            raise TypeError(
                f"{type(self.benchmark).__name__} has no continue_curve(prefix, config): it "
                "cannot simulate population-based training's exploit"
            )
        source = str(request.exploit_from)
        done = self.progress.get(source, 0)
        curve = self._curves[source]
        prefix = LearningCurve(curve.values[:done], curve.durations[:done])
        self._curves[request.trial_id] = continue_curve(prefix, request.hyperparameters)
        self.progress[request.trial_id] = done

    def _schedule(self, trial_id: str) -> None:
        running = self._running[trial_id]
        step = self.progress.get(trial_id, 0)
        self._seq += 1
        heapq.heappush(
            self._events, (self.clock.now + running.curve.durations[step], self._seq, trial_id)
        )

    def request_stop(self, reason: str, grace_s: float) -> list[str]:
        """Ask the running trials to stop: each returns at its next step (a cooperative model)."""
        self._stopping.update(self._running)
        return sorted(self._running)

    def wait_one(
        self, wake: Callable[[], bool] | None = None, timeout: float | None = None
    ) -> tuple[TrialResult, list[dict[str, Any]]] | None:
        """Advance the clock to the next trial that returns; its result and curve (``None``,
        the clock ``timeout`` later, when no trial returns before then). ``wake`` is not asked:
        nothing changes a simulated job's parallelism while it runs."""
        deadline = None if timeout is None else self.clock.now + timeout
        while True:
            if deadline is not None and (not self._events or self._events[0][0] > deadline):
                self.clock.now = max(self.clock.now, deadline)
                return None
            now, _, trial_id = heapq.heappop(self._events)
            self.clock.now = now
            running = self._running[trial_id]
            step = self.progress[trial_id] = self.progress.get(trial_id, 0) + 1
            self.steps_trained += 1
            value = running.curve.values[step - 1]
            report = {"trial_id": trial_id, "step": step, "time": now, _METRIC: value}
            running.reports.append(report)
            told = None
            if self.driver is not None:
                self.driver.feed(report)
                told = self.driver.decided(trial_id)
            if trial_id in self._stopping:
                told = Decision.STOP
            if told in (Decision.STOP, Decision.SUSPEND) or step >= len(running.curve.values):
                del self._running[trial_id]
                request = running.request
                result = TrialResult(
                    trial_id,
                    request.hyperparameters,
                    TrialStatus.COMPLETED,
                    score=value,
                    metrics={_METRIC: value},
                    attempts=request.attempt,
                    duration=now - running.started,
                )
                return result, running.reports
            self._schedule(trial_id)


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
        maximize = self.direction is Direction.MAXIMIZE
        for when, score in self.best_over_time:
            if (score >= target) if maximize else (score <= target):
                return when
        return math.inf


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
) -> SimulatedJob:
    """Run :class:`~ultron.master.loops.Master`'s asynchronous loop over a simulated cluster.

    With ``target``, the job ends as soon as a finished trial's score reaches it (as a user
    would cancel a job that found what it needed); otherwise it spends the whole budget.
    """
    clock = clock or SimulatedClock()
    driver = None
    if stopper is not None:
        driver = StopperDriver(stopper, None, "simulated", metric=_METRIC)
    dispatcher = SimulatedDispatcher(benchmark, clock, driver=driver)
    best: list[tuple[float, float]] = []
    direction = Direction(benchmark.direction)
    maximize = direction is Direction.MAXIMIZE
    folded = 0  # rows of the trial table already counted in ``best``

    def record(state: JobState, running: int, last: TrialResult | None) -> None:
        # Only the rows added since the last call: the whole table each time is quadratic.
        nonlocal folded
        scores = [best[-1][1]] if best else []
        top = best_trial([*state.trials[folded:], *([last] if last else [])], direction)
        folded = len(state.trials)
        if top is not None and top.score is not None:
            scores.append(top.score)
        if scores:
            best.append((clock.now, max(scores) if maximize else min(scores)))

    def reached() -> None:
        if target is not None and best:
            score = best[-1][1]
            if (score >= target) if maximize else (score <= target):
                raise _TargetReached

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
        on_result=record,
        driver=driver,
        check=reached,
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
        best_over_time=best,
        direction=direction,
    )
