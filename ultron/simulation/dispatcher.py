"""The simulated cluster: trials "train" by replaying their learning curves on a simulated clock.

:class:`SimulatedDispatcher` stands where Dask stands in a real job (the master's dispatcher
interface: ``request``, ``start``, ``wait_one``, ``request_stop``, ``in_flight``). Each step of
a trial is an event at the time its curve says; the clock jumps from event to event. A report
reaches the stopper driver as it would from ``ultron.report``; a stop or suspend reaches the
trial with its next report, as :mod:`ultron.worker.runner` answers it; and around the steps the
dispatcher charges the :class:`~ultron.simulation.costs.SimulationCosts` a real job pays.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ultron.algorithms.space import Config
from ultron.algorithms.stoppers.base import Decision
from ultron.master.early_stopping import StopperDriver
from ultron.simulation.benchmark import Benchmark, LearningCurve, SimulatedClock
from ultron.simulation.costs import SimulationCosts
from ultron.trial_records import TrialRequest, TrialResult, TrialStatus

__all__ = ["METRIC", "SimulatedDispatcher"]

METRIC = "value"
"""The name simulated trials report their curve's values under."""


@dataclass
class _Running:
    request: TrialRequest
    curve: LearningCurve
    started: float
    reports: list[dict[str, Any]] = field(default_factory=list)
    told_at: int | None = None  # the step a stop or suspend was decided on
    result: TrialResult | None = None  # set once the trial has returned, before the master has it


class SimulatedDispatcher:
    """Runs trials by replaying their learning curves on a simulated clock.

    Args:
        benchmark: knows every configuration's learning curve.
        clock: the simulated clock (give the same one to stoppers that read time).
        driver: the stopper driver, fed each step's report as it happens.
        costs: what the real system pays around the steps (default: measured).
    """

    def __init__(
        self,
        benchmark: Benchmark,
        clock: SimulatedClock,
        *,
        driver: StopperDriver | None = None,
        costs: SimulationCosts | None = None,
    ) -> None:
        self.benchmark = benchmark
        self.clock = clock
        self.driver = driver
        self.costs = costs if costs is not None else SimulationCosts()
        self.steps_trained = 0
        # (time, order, trial id, whether the master gets the trial's result then: else a step)
        self._events: list[tuple[float, int, str, bool]] = []
        self._seq = 0
        self._running: dict[str, _Running] = {}
        # Kept across suspensions: a resumed trial goes on from its checkpoint, on the same curve.
        self._curves: dict[str, LearningCurve] = {}
        self.progress: dict[str, int] = {}  # steps done per trial
        self._stopping: set[str] = set()  # asked to stop (the job's goal was reached)

    @property
    def in_flight(self) -> int:
        return len(self._running)

    def worker_slots(self) -> None:
        """None: every simulated trial starts at its submit (none waits behind another)."""
        return None

    def has_ready(self) -> bool:
        """False: the master writes as it waits, as it does for trials that end apart."""
        return False

    def reserve(self, count: int) -> None:
        """Nothing to keep waiting: every simulated trial starts at its submit."""

    def settle(self) -> None:
        """Nothing outlives its result here."""

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
            metric=METRIC,
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
            running = self._running[trial_id] = _Running(
                request, self._curves[trial_id], self.clock.now
            )
            delay = self.costs.start_s
            if request.resume or request.exploit_from is not None:
                delay += self.costs.checkpoint_read_s  # the attempt restores a checkpoint first
            if self.progress.get(trial_id, 0) < len(running.curve.values):
                self._schedule(trial_id, delay)
            else:  # suspended as it trained its last step: its checkpoint is the finished model
                self._return(running, running.curve.values[-1], trained=False, after=delay)

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

    def _schedule(self, trial_id: str, delay: float = 0.0) -> None:
        """The trial's next step is reported ``delay`` seconds plus the step's own and its
        report's from now."""
        running = self._running[trial_id]
        step = self.progress.get(trial_id, 0)
        took = running.curve.durations[step] + self.costs.report_s
        self._push(self.clock.now + delay + took, trial_id, ends=False)

    def _push(self, when: float, trial_id: str, *, ends: bool) -> None:
        self._seq += 1
        heapq.heappush(self._events, (when, self._seq, trial_id, ends))

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
            now, _, trial_id, ends = heapq.heappop(self._events)
            self.clock.now = now
            running = self._running[trial_id]
            if ends:  # the master has the trial's result now
                del self._running[trial_id]
                assert running.result is not None  # set when the trial returned
                return running.result, running.reports
            step = self.progress[trial_id] = self.progress.get(trial_id, 0) + 1
            self.steps_trained += 1
            value = running.curve.values[step - 1]
            report = {"trial_id": trial_id, "step": step, "time": now, METRIC: value}
            running.reports.append(report)
            if self.driver is not None:
                self.driver.feed(report)
                decision = self.driver.decided(trial_id)
                if decision in (Decision.STOP, Decision.SUSPEND) and running.told_at is None:
                    running.told_at = step
            last = step >= len(running.curve.values)
            lag = self.costs.decision_lag
            heard = running.told_at is not None and step >= running.told_at + lag
            if last or heard or trial_id in self._stopping:
                self._return(running, value, trained=True)
            else:
                self._schedule(trial_id)

    def _return(
        self, running: _Running, value: float, *, trained: bool, after: float = 0.0
    ) -> None:
        """The trial's ``score`` returns ``after`` seconds from now, having written its
        checkpoint first when it ``trained`` a step in this attempt; the master has its result
        ``return_s`` later."""
        request = running.request
        end = self.clock.now + after + self.costs.return_s
        end += self.costs.checkpoint_write_s if trained else 0.0
        running.result = TrialResult(
            request.trial_id,
            request.hyperparameters,
            TrialStatus.COMPLETED,
            score=value,
            metrics={METRIC: value},
            attempts=request.attempt,
            duration=end - running.started,
        )
        self._push(end, request.trial_id, ends=True)
