"""A job's goals in the master's loops (on the simulated dispatcher and clock): a time budget
and a target end the search, start no trial after, stop the running ones, and name the reason."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ultron.algorithms import Choice, Direction, GridSearch, SearchSpace
from ultron.master.goals import EndKind, JobEnd, JobGoals
from ultron.master.job_state import JobState
from ultron.master.loops import Master, SearchSettings
from ultron.simulation.benchmark import LearningCurve, SimulatedClock
from ultron.simulation.costs import SimulationCosts
from ultron.simulation.jobs import MemoryCache, MemoryStore, SimulatedDispatcher
from ultron.spec.job import JobSpec
from ultron.trial_records import TrialRequest, TrialResult, TrialStatus

SPACE = SearchSpace({"x": Choice(tuple(range(40)))})


class _Steps:
    """Config ``x`` scores ``x`` after 2 steps, 1 s and 1 + x/100 s (a grid gives x = 0, 1, 2,
    ... in order; no two trials end at the same time)."""

    search_space = SPACE
    direction = Direction.MAXIMIZE
    max_resource = 2

    def learning_curve(self, config: dict[str, Any]) -> LearningCurve:
        return LearningCurve((0.0, float(config["x"])), (1.0, 1.0 + config["x"] / 100))


class _Recording(SimulatedDispatcher):
    """The simulated dispatcher, noting when (simulated seconds) each trial was started."""

    def __init__(self, clock: SimulatedClock) -> None:
        super().__init__(_Steps(), clock, costs=SimulationCosts.free())  # the times above, exactly
        self.started_at: dict[str, float] = {}

    def start(self, *requests: TrialRequest) -> None:
        self.started_at.update((r.trial_id, self.clock.now) for r in requests)
        super().start(*requests)


def _run(loop: str, goals: JobGoals, *, budget: int = 40, parallelism: int = 3) -> Master:
    clock = SimulatedClock()
    master = Master(
        settings=SearchSettings(num_iterations=budget, parallelism=parallelism),
        strategy=GridSearch(SPACE),
        cache=MemoryCache(),
        dispatcher=_Recording(clock),
        store=MemoryStore("job"),
        state=JobState("job"),
        goals=goals,
        clock=lambda: clock.now,
    )
    master.run_batch() if loop == "batch" else master.run_async()
    return master


@pytest.mark.parametrize("loop", ["batch", "async"])
def test_a_time_budget_ends_the_search_and_stops_the_running_trials(loop: str) -> None:
    master = _run(loop, JobGoals(time_s=7.5, direction=Direction.MAXIMIZE))
    dispatcher = master.dispatcher
    assert isinstance(dispatcher, _Recording)
    assert master.state.end_reason == "time budget"
    assert max(dispatcher.started_at.values()) < 7.5  # nothing started once it ran out
    assert dispatcher.clock.now <= 7.5 + 1.0  # the running trials stopped at their next step
    cut = [t for t in master.state.trials if t.status is TrialStatus.STOPPED]
    assert cut and len(master.state.trials) == len(dispatcher.started_at) < 40
    assert master.state.search_seconds == pytest.approx(dispatcher.clock.now)


@pytest.mark.parametrize("loop", ["batch", "async"])
def test_a_target_ends_the_search_at_the_first_trial_that_reaches_it(loop: str) -> None:
    master = _run(loop, JobGoals(target=4.0, direction=Direction.MAXIMIZE))
    dispatcher = master.dispatcher
    assert isinstance(dispatcher, _Recording)
    assert master.state.end_reason == "target reached by trial 0004"
    reached_at = next(t for t in master.state.trials if t.trial_id == "0004")
    assert reached_at.status is TrialStatus.COMPLETED and reached_at.score == 4.0
    # None started after it returned; the ones running then were stopped.
    returned = dispatcher.started_at["0004"] + 2.04
    assert all(at < returned for at in dispatcher.started_at.values())
    later = [t for t in master.state.trials if t.trial_id > "0004"]
    assert all(t.status is TrialStatus.STOPPED for t in later)


class _Waking(_Recording):
    """Asks ``wake`` before it waits, as the real dispatcher does while no trial is done."""

    def wait_one(
        self, wake: Callable[[], bool] | None = None, timeout: float | None = None
    ) -> tuple[TrialResult, list[dict[str, Any]]] | None:
        if wake is not None and wake():
            return None
        return super().wait_one(wake, timeout)


class _ScaledOnce:
    """Stands in for the Scaler (the real one needs a limiter and workers: here only how the
    loops take a wake beside a time budget is tested): wakes the loop once, then allows 2."""

    def __init__(self) -> None:
        self.asked = False

    def wake(self) -> bool:
        first, self.asked = not self.asked, True
        return first

    def poll(self, in_flight: int) -> int:
        return 2 if self.asked else 3


@pytest.mark.parametrize("loop", ["batch", "async"])
def test_a_scaler_waking_the_loop_is_not_the_time_budget_running_out(loop: str) -> None:
    clock = SimulatedClock()
    dispatcher = _Waking(clock)
    master = Master(
        settings=SearchSettings(num_iterations=40, parallelism=3),
        strategy=GridSearch(SPACE),
        cache=MemoryCache(),
        dispatcher=dispatcher,
        store=MemoryStore("job"),
        state=JobState("job"),
        scaler=_ScaledOnce(),
        goals=JobGoals(time_s=7.5, direction=Direction.MAXIMIZE),
        clock=lambda: clock.now,
    )
    master.run_batch() if loop == "batch" else master.run_async()
    assert master.state.end_reason == "time budget"
    assert master.settings.parallelism == 2
    assert 7.5 <= clock.now <= 7.5 + 1.0  # it ran until the budget, not until the wake
    assert 6.0 < max(dispatcher.started_at.values()) < 7.5


def test_a_resumed_job_counts_the_time_its_earlier_runs_spent() -> None:
    clock = SimulatedClock()
    state = JobState("job", search_seconds=7.0)
    dispatcher = _Recording(clock)
    master = Master(
        settings=SearchSettings(num_iterations=40, parallelism=2),
        strategy=GridSearch(SPACE),
        cache=MemoryCache(),
        dispatcher=dispatcher,
        store=MemoryStore("job"),
        state=state,
        goals=JobGoals(time_s=10.0),
        clock=lambda: clock.now,
    )
    master.run_async()
    assert state.end_reason == "time budget"
    assert max(dispatcher.started_at.values()) < 3.0  # 3 s were left
    assert state.search_seconds == pytest.approx(7.0 + clock.now)


def test_without_goals_the_reason_is_the_trial_budget_or_the_exhausted_space() -> None:
    assert _run("async", JobGoals(), budget=5).state.end_reason == "budget: 5 trials"
    assert _run("batch", JobGoals(), budget=50).state.end_reason == "search space exhausted"


def _spec(**fields: Any) -> JobSpec:
    base = {"code": ".", "model": "pkg.train:Model", "search_space": {"x": [1, 2]}}
    return JobSpec.model_validate({**base, **fields}, context={"check_paths": False})


def test_pops_target_and_max_time_are_the_jobs_goals_unless_the_spec_sets_its_own() -> None:
    pop = {"type": "pop", "max_resource": 4, "options": {"target": 0.9, "max_time": 60}}
    objective = {"mode": "maximize"}
    assert JobGoals.of(_spec(early_stopping=pop, objective=objective)) == JobGoals(
        time_s=60.0, target=0.9, direction=Direction.MAXIMIZE
    )
    own = JobGoals.of(
        _spec(early_stopping=pop, objective={**objective, "target": 0.8}, budget={"time": "2m"})
    )
    assert (own.time_s, own.target) == (120.0, 0.8)
    other_metric = _spec(early_stopping={**pop, "metric": "loss"}, objective=objective)
    assert JobGoals.of(other_metric).target is None  # POP judges another metric
    dynamic = {**pop, "options": {**pop["options"], "raise_target_by": 0.01}}
    goals = JobGoals.of(_spec(early_stopping=dynamic, objective=objective))
    assert (goals.time_s, goals.target) == (60.0, None)  # POP raises it: not the job's end


def test_the_reasons_read_as_users_see_them() -> None:
    assert str(JobEnd(EndKind.TIME)) == "time budget"
    failed = JobEnd(EndKind.FAILED, error="JobFailedError: 3 of 4")
    assert str(failed) == "failed: JobFailedError: 3 of 4"
    minimize = JobGoals(target=0.1)
    assert minimize.reached(0.1) and minimize.reached(0.05) and not minimize.reached(0.2)
    assert not minimize.reached(float("nan"))


@pytest.mark.parametrize("loop", ["batch", "async"])
def test_a_resumed_job_whose_time_is_spent_ends_at_once(loop: str) -> None:
    # Its trials that were running when the last run stopped are not started again either.
    clock = SimulatedClock()
    dispatcher = _Recording(clock)
    master = Master(
        settings=SearchSettings(num_iterations=40, parallelism=2),
        strategy=GridSearch(SPACE),
        cache=MemoryCache(),
        dispatcher=dispatcher,
        store=MemoryStore("job"),
        state=JobState("job", search_seconds=10.0, next_trial=2),
        goals=JobGoals(time_s=10.0),
        clock=lambda: clock.now,
        interrupted={"0001": {"x": 1}},
    )
    master.run_batch() if loop == "batch" else master.run_async()
    assert master.state.end_reason == "time budget"
    assert dispatcher.started_at == {} and master.state.trials == []
