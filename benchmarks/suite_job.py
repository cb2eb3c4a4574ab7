"""One run of the LCBench suite: a method's strategy and stopper through the real master.

:func:`run_one` runs :func:`~ultron.simulation.jobs.simulate_job` on one task with the method's
strategy and stopper (:func:`method`), wrapped in a :class:`Deadline` that measures the time to
target and the regret for every method alike and ends the run (``benchmarks.lcbench_suite``
describes the rule). Each process keeps one surrogate session per task (:func:`bench`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.lcbench import (
    EPOCHS,
    SPACE,
    LCBench,
    _asha,
    _bandit,
    _earlyterm,
    _hyperband,
    _pop,
)
from benchmarks.lcbench_peers import DEHBPeer, OneEpochTopK
from benchmarks.suite_runs import SuiteSettings
from ultron.algorithms.random_search import RandomSearch
from ultron.algorithms.stoppers.base import Command, Decision, Stopper, TrialId, TrialPlan
from ultron.simulation.benchmark import SimulatedClock
from ultron.simulation.jobs import simulate_job

__all__ = ["Deadline", "bench", "method", "run_one"]


class Deadline(Stopper):
    """Ends the run once the target is reached and ``budget`` is spent, or at ``cap``.

    Strategy and stopper in one: it hands out the strategy's configurations until then (then
    none: the master winds down), and passes every report to the method's stopper (if any),
    stopping everything once the run is over. It has no ``state_dict`` on the
    strategy side and an empty one on the stopper side: the simulation's store drops
    checkpoints anyway, and a stopper's ``state_dict`` (called at each launch) grows with the
    trials, which makes a long simulation quadratic.
    """

    def __init__(
        self,
        strategy: Any,
        stopper: Stopper | None,
        clock: SimulatedClock,
        *,
        target: float,
        budget: float,
    ) -> None:
        super().__init__(direction="maximize", max_resource=EPOCHS)
        self.strategy, self.inner, self.clock = strategy, stopper, clock
        self.target, self.budget, self.cap = target, budget, 2 * budget
        self.best = -math.inf  # what the strategy heard: every trial that ended, stopped or not
        self.hit: float | None = None  # when a report first reached the target
        self.found = -math.inf  # the best report by ``budget``
        self._suspended: set[TrialId] = set()
        self._done = False

    def _over(self) -> bool:
        now = self.clock.now
        self._done = self._done or now >= self.cap or (now >= self.budget and self.hit is not None)
        return self._done

    def sample_hyperparameter_candidates(self, n: int) -> list[Any]:
        return [] if self._over() else self.strategy.sample_hyperparameter_candidates(n)

    def update_state(self, candidates: Sequence[Any], scores: Sequence[float]) -> None:
        self.best = max([self.best, *(x for x in scores if not math.isnan(x))])
        self.strategy.update_state(candidates, scores)

    def on_trial_start(self, trial_id: TrialId) -> TrialPlan:
        return (
            self.inner.on_trial_start(trial_id) if self.inner else super().on_trial_start(trial_id)
        )

    def on_report(self, trial_id: TrialId, step: int, value: float) -> Decision:
        # Measured here, before the method's stopper hears the report, for every method alike.
        now = self.clock.now
        if self.hit is None and now <= self.cap and value >= self.target:
            self.hit = now
        if now <= self.budget and not math.isnan(value):
            self.found = max(self.found, value)
        if self._over():  # the run is over: the method's stopper hears no more of it
            return Decision.STOP
        decision = self.inner.on_report(trial_id, step, value) if self.inner else Decision.CONTINUE
        if decision is Decision.SUSPEND:
            self._suspended.add(trial_id)
        return decision

    def on_trial_complete(self, trial_id: TrialId) -> None:
        if self.inner and not self._over():
            self.inner.on_trial_complete(trial_id)

    def poll(self, *, free_slots: int, can_start_new: bool = True) -> list[Command]:
        if self._over():  # a suspended trial left behind would keep the master waiting
            stops = [Command(t, Decision.STOP) for t in sorted(self._suspended, key=str)]
            self._suspended.clear()
            return stops
        commands = (
            self.inner.poll(free_slots=free_slots, can_start_new=can_start_new)
            if self.inner
            else []
        )
        for command in commands:
            self._suspended.discard(command.trial_id)
        return commands


def _pop_dynamic(workers: int, clock: SimulatedClock, target: float) -> Stopper:
    """POP with HyperDrive's dynamic target (not a default method: ``--methods`` names it):
    each time a trial reaches the target, it rises half a point of accuracy above that report.
    The time to target is POP's own (nothing differs before the first raise); the regret at
    ``H`` shows what going on after it buys."""
    return _pop(workers, clock, target, raise_target_by=0.5)


def method(
    name: str,
    workers: int,
    seed: int,
    clock: SimulatedClock,
    target: float,
    options: dict[str, Any] | None = None,
) -> tuple[Any, Stopper | None]:
    """The strategy and the stopper of method ``name`` (one object for a peer); ``options``:
    the stopper's keyword arguments on top of the suite's (POP, Bandit and EarlyTerm)."""
    if name == "Optuna TPE+Hyperband":
        from benchmarks.optuna_peer import OptunaPeer

        peer: Any = OptunaPeer(SPACE, seed=seed, direction="maximize", max_resource=EPOCHS)
        return peer, peer
    if name == "DEHB":
        peer = DEHBPeer(SPACE, seed=seed, max_resource=EPOCHS)
        return peer, peer
    if name == "1-epoch top-K":
        peer = OneEpochTopK(SPACE, seed=seed, max_resource=EPOCHS, n_configs=100, k=3)
        return peer, peer
    stoppers = {
        "Random": None,
        "ASHA": _asha,
        "Hyperband": _hyperband,
        "POP (ours)": _pop,
        "POP (dynamic target)": _pop_dynamic,
        "Bandit": _bandit,
        "EarlyTerm": _earlyterm,
    }
    make = stoppers[name]
    random = RandomSearch(SPACE, seed=seed, direction="maximize")
    return random, make(workers, clock, target, **(options or {})) if make else None


def run_one(
    task: str,
    name: str,
    workers: int,
    seed: int,
    settings: SuiteSettings,
    stats: dict[str, float],
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One simulated job of method ``name`` (its stopper with ``options``, see :func:`method`);
    its time to target (h, ``inf`` if never), regret and counts."""
    surrogate = bench(task)
    clock = SimulatedClock()
    horizon = stats["t52"] * settings.budget / workers
    strategy, stopper = method(name, workers, seed, clock, stats["target"], options)
    deadline = Deadline(strategy, stopper, clock, target=stats["target"], budget=horizon)
    started = time.process_time()
    try:
        job = simulate_job(
            surrogate, deadline, budget=10**9, workers=workers, stopper=deadline, clock=clock
        )
    finally:
        if hasattr(strategy, "close"):
            strategy.close()
    found = deadline.found if deadline.found > -math.inf else 0.0
    return {
        "hours": math.inf if deadline.hit is None else deadline.hit / 3600,
        "regret": (stats["best"] - found) / (stats["best"] - stats["median"]),
        "trials": job.trials_started,
        "epochs": job.steps_trained,
        "cpu_s": time.process_time() - started,
    }


_BENCHES: dict[str, LCBench] = {}


def bench(task: str) -> LCBench:
    """The task's surrogate: one ONNX session per task and process."""
    if task not in _BENCHES:
        _BENCHES[task] = LCBench(task)
    return _BENCHES[task]
