"""The stopper driver's step count when a trial reports after a decision (it hears a decision
with its next report, so it trains one step more than it was stopped or suspended at)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import redis

from ultron.algorithms.stoppers import POP, Decision
from ultron.master.early_stopping import StopperDriver
from ultron.redis import keys
from ultron.simulation.benchmark import SimulatedClock

TRIAL = "0000"


def _driver(client: Any = None, job_id: str = "job", **options: Any) -> tuple[StopperDriver, POP]:
    """POP over a flat curve far below its target: suspended at each boundary (every 2 steps)."""
    pop = POP(
        **{
            "direction": "maximize",
            "max_resource": 6,
            "target": 0.9,
            "slots": 1,
            "interval": 2,
            "bootstrap": 2,
            "seed": 0,
            "clock": SimulatedClock(),  # the time, set by the test
            **options,
        }
    )
    driver = StopperDriver(pop, client, job_id, metric="accuracy")  # no client: no stop flags
    driver.start_trial(TRIAL, {"lr": 0.1})
    return driver, pop


def _feed(driver: StopperDriver, *steps: int, at: float = 0.0) -> None:
    """The trial reports ``steps``, one second apart from ``at`` + its step (seconds)."""
    clock = driver.stopper.clock  # type: ignore[attr-defined]
    for step in steps:
        clock.now = at + step
        driver.feed({"trial_id": TRIAL, "step": step, "accuracy": 0.1 + step / 100})


def _curve(pop: POP) -> list[int]:
    (trial,) = [t for t_id, t in pop.state_dict()["trials"] if t_id == TRIAL]
    return list(trial["steps"])


def test_the_step_trained_after_a_suspension_is_counted_and_the_resume_goes_on_after_it() -> None:
    driver, pop = _driver()
    _feed(driver, 1, 2)
    assert driver.decided(TRIAL) is Decision.SUSPEND
    _feed(driver, 3)  # trained before it heard; its checkpoint, written as it returns, holds it
    assert driver.outcome(TRIAL) is Decision.SUSPEND
    assert driver.steps(TRIAL) == 3 and _curve(pop) == [1, 2, 3]
    driver.stopper.clock.now = 10.0  # type: ignore[attr-defined]
    (command,) = driver.poll(free_slots=1, can_start_new=False)
    assert command.decision is Decision.RESUME
    driver.resume_trial(TRIAL)
    _feed(driver, 4, at=7.0)  # the resumed attempt's first step: a boundary, judged as the 4th
    assert driver.steps(TRIAL) == 4 and _curve(pop) == [1, 2, 3, 4]
    assert driver.decided(TRIAL) is Decision.SUSPEND
    state = dict(pop.state_dict()["trials"])[TRIAL]
    # one second each, the late step's included, the suspension (3 to 10 s) not
    assert (state["timed_steps"], state["run_time"]) == (4, 4.0)


def test_a_step_a_resumed_attempt_reports_again_is_not_counted_twice() -> None:
    driver, pop = _driver()
    _feed(driver, 1, 2, 3)  # suspended at 2; 3 came late, and this checkpoint held only 2
    driver.resume_trial(TRIAL)
    _feed(driver, 3, 4)
    assert driver.steps(TRIAL) == 4 and _curve(pop) == [1, 2, 3, 4]


def test_a_late_decision_never_suspends_a_trial_that_reached_max_resource() -> None:
    # The decision at step 4 was slow to come: the trial reported 5 and 6, its last, meanwhile.
    driver, pop = _driver()
    _feed(driver, 1, 2)
    driver.resume_trial(TRIAL)
    _feed(driver, 3, 4)
    assert driver.decided(TRIAL) is Decision.SUSPEND
    _feed(driver, 5, 6)
    assert driver.outcome(TRIAL) is None  # complete: nothing left to resume
    assert driver.steps(TRIAL) == 6 and _curve(pop) == [1, 2, 3, 4, 5, 6]
    assert driver.poll(free_slots=1, can_start_new=False) == []
    assert pop.classify(TRIAL) != "unknown" and TRIAL in pop._references  # a finished curve


def test_a_trial_that_ran_to_its_end_before_its_reports_were_judged_is_complete(
    redis_client: redis.Redis,
) -> None:
    # Under load the master reads the report stream late: the whole curve is there when the
    # trial returns. Its boundary at step 2 suspends it (and sets its stop flag); its last
    # report, at max_resource, makes it complete and takes the flag away.
    job_id = f"late-{uuid.uuid4().hex[:8]}"
    driver, _ = _driver(redis_client, job_id)
    stream = keys.report_stream(job_id)
    for step in range(1, 7):
        report = {"trial_id": TRIAL, "step": step, "time": step, "accuracy": 0.1}
        redis_client.rpush(stream, json.dumps(report))
    assert driver.outcome(TRIAL) is None
    assert driver.steps(TRIAL) == 6
    assert not redis_client.exists(keys.trial_stop(job_id, TRIAL))


def test_a_stop_heard_at_max_resource_ends_the_trial_complete() -> None:
    driver, _ = _driver(kill_threshold=0.5, kill_after=5)  # poor from step 5
    _feed(driver, 1, 2)
    driver.resume_trial(TRIAL)
    _feed(driver, 3, 4)
    driver.resume_trial(TRIAL)
    _feed(driver, 5)
    assert driver.decided(TRIAL) is Decision.STOP
    _feed(driver, 6)
    assert driver.outcome(TRIAL) is None


def test_suspended_trials_keep_their_boundary_rank_after_a_late_report() -> None:
    # POP resumes suspended trials by the rank of their value at their boundary among all
    # trials'; a late report must not move that rank (no trial reported that step).
    driver, pop = _driver()
    driver.start_trial("0001", {"lr": 0.2})
    for trial_id, value in (("0000", 0.1), ("0001", 0.2)):
        for step in (1, 2, 3):
            driver.feed({"trial_id": trial_id, "step": step, "accuracy": value})
    assert [pop._trials[t].p for t in ("0000", "0001")] == [0.0, 0.0]
    (command,) = driver.poll(free_slots=1, can_start_new=False)
    assert command.trial_id == "0001"  # the better one at step 2
