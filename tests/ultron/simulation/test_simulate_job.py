"""The simulator: the real master loop on a simulated clock, with workers, budget, target,
what the strategy is told, and stoppers' decisions honoured at the step they are made (on a free
cluster) or one step later; and what it charges besides the steps (dispatch latency, a
checkpoint written on a stop or suspend and read on a resume)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from ultron.algorithms import Choice, Direction, GridSearch, RandomSearch, SearchSpace, Uniform
from ultron.algorithms.stoppers import ASHA, Command, Decision, Hyperband, Stopper
from ultron.simulation.benchmark import LearningCurve
from ultron.simulation.costs import SimulationCosts
from ultron.simulation.jobs import simulate_job
from ultron.trial_records import TrialStatus

STEPS = 27
FREE = SimulationCosts.free()  # the loop's own logic, on a cluster that costs nothing


class Steps:
    """Config ``x`` reports ``x * step`` for 4 steps of ``x`` seconds each."""

    search_space = SearchSpace({"x": Choice((1, 2, 3, 4, 5, 6))})
    direction = Direction.MAXIMIZE
    max_resource = 4

    def learning_curve(self, config: dict[str, Any]) -> LearningCurve:
        x = config["x"]
        return LearningCurve(tuple(float(x * s) for s in range(1, 5)), (float(x),) * 4)


class Curves:
    """Accuracy curves that rise to x (the configuration's quality) at speed k; 1 s a step."""

    search_space = SearchSpace({"x": Uniform(0.0, 1.0), "k": Uniform(0.05, 0.5)})
    direction = Direction.MAXIMIZE
    max_resource = STEPS

    def learning_curve(self, config: dict[str, Any]) -> LearningCurve:
        steps = np.arange(1, STEPS + 1)
        values = config["x"] * (1 - np.exp(-config["k"] * steps))
        return LearningCurve(tuple(float(v) for v in values), (1.0,) * STEPS)


class Recorder(GridSearch):
    """Grid search over :class:`Steps` that writes down what it is told, in order."""

    def __init__(self) -> None:
        super().__init__(Steps.search_space)
        self.told: list[tuple[int, float]] = []

    def update_state(self, candidates: Any, scores: Any) -> None:
        self.told += [(c["x"], s) for c, s in zip(candidates, scores, strict=True)]


class Scripted(Stopper):
    """Decides what ``script`` says at (trial, step); resumes suspended trials once nothing new
    can start."""

    def __init__(self, script: dict[tuple[str, int], Decision]) -> None:
        super().__init__(direction="maximize", max_resource=Steps.max_resource)
        self.script = script
        self.suspended: list[str] = []
        self.completed: list[str] = []

    def on_report(self, trial_id: Any, step: int, value: float) -> Decision:
        decision = self.script.get((trial_id, step), Decision.CONTINUE)
        if decision is Decision.SUSPEND:
            self.suspended.append(trial_id)
        return decision

    def on_trial_complete(self, trial_id: Any) -> None:
        self.completed.append(trial_id)

    def poll(self, *, free_slots: int, can_start_new: bool = True) -> list[Command]:
        if can_start_new:
            return []
        resumed, self.suspended = self.suspended[:free_slots], self.suspended[free_slots:]
        return [Command(t, Decision.RESUME) for t in resumed]


def test_workers_run_in_parallel_on_the_simulated_clock() -> None:
    job = simulate_job(Steps(), GridSearch(Steps.search_space), budget=6, workers=3, costs=FREE)
    # workers take x = 1, 2, 3; then 4, 5, 6 start at 4, 8 and 12 seconds
    assert job.elapsed == 12 + 24
    assert len(job.trials) == 6
    assert all(t.status is TrialStatus.COMPLETED for t in job.trials)
    assert job.steps_trained == 24
    ends = {t.hyperparameters["x"]: job.curves[t.trial_id][-1]["time"] for t in job.trials}
    assert ends == {1: 4.0, 2: 8.0, 3: 12.0, 4: 20.0, 5: 28.0, 6: 36.0}


def test_without_a_stopper_every_sampled_trial_runs_to_its_end() -> None:
    bench = Curves()
    job = simulate_job(
        bench, RandomSearch(bench.search_space, seed=4), budget=40, workers=8, costs=FREE
    )
    # the same strategy, asked the same way, proposes the same 40 configurations
    again = RandomSearch(bench.search_space, seed=4)
    configs = [again.sample_hyperparameter_candidates(1)[0] for _ in range(40)]
    assert sorted(t.hyperparameters["x"] for t in job.trials) == sorted(c["x"] for c in configs)
    assert job.best_score == max(bench.learning_curve(c).values[-1] for c in configs)
    assert job.elapsed == 5 * STEPS  # 40 trials, 8 at a time
    assert job.steps_trained == 40 * STEPS
    assert set(job.steps_reached.values()) == {STEPS}


def test_the_target_ends_the_job_when_a_finished_trial_reaches_it() -> None:
    job = simulate_job(
        Steps(), GridSearch(Steps.search_space), budget=6, workers=1, target=8.0, costs=FREE
    )
    # x=1 ends at 4 s with 4.0; x=2 runs 4 steps of 2 s and ends with 8.0
    assert job.time_to_target(8.0) == job.elapsed == 4 + 2 * 4
    assert [t.hyperparameters["x"] for t in job.trials] == [1, 2]
    assert job.trials_started == 2
    assert job.time_to_target(100.0) == math.inf


def test_stop_and_suspend_are_honoured_at_the_step_they_are_decided() -> None:
    stopper = Scripted({("0000", 2): Decision.SUSPEND, ("0001", 1): Decision.STOP})
    recorder = Recorder()
    job = simulate_job(Steps(), recorder, budget=3, workers=1, stopper=stopper, costs=FREE)
    rows = {t.trial_id: t for t in job.trials}
    steps = {t: [(r["step"], r["time"]) for r in job.curves[t]] for t in rows}
    # x=1 leaves its worker after step 2, and resumes at step 3 once the budget is launched
    assert steps["0000"] == [(1, 1.0), (2, 2.0), (3, 17.0), (4, 18.0)]
    assert rows["0000"].status is TrialStatus.COMPLETED and rows["0000"].attempts == 2
    assert steps["0001"] == [(1, 4.0)]  # x=2 stopped at its first step
    assert rows["0001"].status is TrialStatus.STOPPED and rows["0001"].score == 2.0
    assert steps["0002"] == [(s, 4.0 + 3 * s) for s in range(1, 5)]
    assert job.steps_trained == 9 and job.elapsed == 18.0
    assert job.trials_started == 3  # a resume is not a new trial
    # the strategy hears a trial when it ends, not when it is suspended
    assert recorder.told == [(2, 2.0), (3, 12.0), (1, 4.0)]
    assert stopper.completed == ["0001", "0002", "0000"]


def test_stopped_trials_are_told_their_last_value_or_nan() -> None:
    for tell_stopped in (True, False):
        recorder = Recorder()
        asha = ASHA(direction="minimize", max_resource=4, reduction_factor=2)  # x=1 is best
        simulate_job(
            Steps(),
            recorder,
            budget=6,
            workers=1,
            stopper=asha,
            tell_stopped=tell_stopped,
            costs=FREE,
        )
        scores = dict(recorder.told)
        assert scores[1] == 4.0  # the first (and best) runs all 4 steps
        if tell_stopped:
            assert scores[6] == 6.0  # stopped at the first rung, told its value there
        else:
            assert math.isnan(scores[6])


def test_best_over_time_is_monotone() -> None:
    job = simulate_job(Steps(), GridSearch(Steps.search_space), budget=6, workers=2)
    times = [t for t, _ in job.best_over_time]
    values = [v for _, v in job.best_over_time]
    assert times == sorted(times) and values == sorted(values)
    assert values[-1] == 24.0 == job.best_score


def test_asha_in_the_master_trains_fewer_steps_and_keeps_the_best() -> None:
    bench = Curves()
    full = simulate_job(bench, RandomSearch(bench.search_space, seed=1), budget=60, workers=8)
    asha = simulate_job(
        bench,
        RandomSearch(bench.search_space, seed=1),
        budget=60,
        workers=8,
        stopper=ASHA(direction="maximize", max_resource=STEPS, reduction_factor=3),
    )
    assert len(asha.trials) == 60
    assert any(t.status is TrialStatus.STOPPED for t in asha.trials)
    assert asha.steps_trained < 0.6 * full.steps_trained
    assert asha.best_score is not None and full.best_score is not None
    assert asha.best_score >= full.best_score - 0.05
    assert asha.elapsed < full.elapsed


def test_hyperband_suspends_and_resumes_in_the_master_without_repeating_steps() -> None:
    bench = Curves()
    job = simulate_job(
        bench,
        RandomSearch(bench.search_space, seed=2),
        budget=30,
        workers=4,
        stopper=Hyperband(direction="maximize", max_resource=STEPS, reduction_factor=3),
    )
    assert len(job.trials) == 30
    assert any(t.attempts > 1 for t in job.trials)  # some trials were suspended and resumed
    for trial in job.trials:  # resumed where it stopped: each step reported once, in order
        curve = job.curves[trial.trial_id]
        reached = job.steps_reached[trial.trial_id]
        assert [r["step"] for r in curve] == list(range(1, reached + 1))
        known = bench.learning_curve(trial.hyperparameters).values[:reached]
        assert [r["value"] for r in curve] == list(known)
    assert job.steps_trained < 30 * STEPS


def test_each_trial_pays_its_dispatch_latency_and_each_report_its_round_trip() -> None:
    costs = SimulationCosts(
        start_s=0.5, return_s=0.25, report_s=0.25, checkpoint_write_s=0, checkpoint_read_s=0
    )
    job = simulate_job(Steps(), GridSearch(Steps.search_space), budget=2, workers=1, costs=costs)
    steps = {
        t.hyperparameters["x"]: [r["time"] for r in job.curves[t.trial_id]] for t in job.trials
    }
    # x=1: submitted at 0, its first step begins at 0.5; each step (1 s) and its report (0.25 s)
    # take 1.25 s; the master has it at 5.5 + 0.25
    assert steps[1] == [1.75, 3.0, 4.25, 5.5]
    # x=2 is submitted as x=1's result arrives, and begins 0.5 later
    assert steps[2] == [5.75 + 0.5 + 2.25 * s for s in range(1, 5)]
    assert job.elapsed == 15.25 + 0.25 == job.best_over_time[-1][0]
    assert [t.duration for t in job.trials] == [5.75, 9.75]


def test_a_stop_and_a_suspend_pay_a_step_of_lag_a_checkpoint_write_and_read() -> None:
    """A decision reaches the trial with its next report (ultron.worker.runner answers each
    report with the stop flag as it is); the trial writes its checkpoint as it returns; a
    resumed attempt reads it back before its next step."""
    stopper = Scripted({("0000", 2): Decision.SUSPEND, ("0001", 1): Decision.STOP})
    costs = SimulationCosts(
        start_s=0.5, return_s=0.25, checkpoint_write_s=2, checkpoint_read_s=4, report_s=0
    )
    job = simulate_job(Steps(), Recorder(), budget=3, workers=1, stopper=stopper, costs=costs)
    rows = {t.trial_id: t for t in job.trials}
    steps = {t: [(r["step"], r["time"]) for r in job.curves[t]] for t in rows}
    # x=1 (1 s steps): suspended at step 2, hears it at step 3 (3.5), writes, result at 5.75
    # x=2 (2 s steps) starts at 5.75: stopped at step 1 (8.25), hears it at step 2 (10.25)
    assert steps["0001"] == [(1, 8.25), (2, 10.25)]
    assert rows["0001"].status is TrialStatus.STOPPED and rows["0001"].score == 4.0
    # x=3 (3 s steps) starts at 10.25 + 2 + 0.25 = 12.5 and ends at 25: a finished trial
    # writes its checkpoint too, so its result arrives at 27.25
    assert steps["0002"] == [(s, 13.0 + 3 * s) for s in range(1, 5)]
    # x=1 resumes at 27.25: dispatch 0.5, checkpoint read 4, then its last step (1 s)
    assert steps["0000"] == [(1, 1.5), (2, 2.5), (3, 3.5), (4, 32.75)]
    assert rows["0000"].status is TrialStatus.COMPLETED and rows["0000"].attempts == 2
    assert job.elapsed == 32.75 + 2 + 0.25
    assert job.steps_trained == 4 + 2 + 4  # each step once, the lagged ones included


def test_a_trial_suspended_as_it_trains_its_last_step_is_complete() -> None:
    stopper = Scripted({("0000", 3): Decision.SUSPEND})  # heard at step 4, its last
    costs = SimulationCosts(
        start_s=0.5, return_s=0.25, checkpoint_write_s=2, checkpoint_read_s=4, report_s=0
    )
    job = simulate_job(Steps(), Recorder(), budget=2, workers=1, stopper=stopper, costs=costs)
    rows = {t.trial_id: t for t in job.trials}
    assert [r["step"] for r in job.curves["0000"]] == [1, 2, 3, 4]
    # x=1 hears the suspension with its last step, and is complete: never resumed for nothing.
    # It returns at 4.5 + 2 + 0.25; x=2 runs from 6.75 to 15.25, its result at 17.5
    assert rows["0000"].attempts == 1 and rows["0000"].score == 4.0
    assert rows["0000"].status is TrialStatus.COMPLETED
    assert job.elapsed == 17.5
    assert job.steps_trained == 8


@pytest.mark.parametrize(
    ("field", "value"),
    [("start_s", -0.1), ("return_s", math.nan), ("checkpoint_read_s", "1"), ("decision_lag", 0.5)],
)
def test_costs_refuse_a_bad_value_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=f"^{field} is "):
        SimulationCosts(**{field: value})
