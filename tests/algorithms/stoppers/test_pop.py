"""POP on synthetic learning curves whose outcome is known."""

from __future__ import annotations

import json
import math
from itertools import pairwise
from typing import Any

import numpy as np
import pytest

from ultron.algorithms.base import Direction
from ultron.algorithms.random_search import RandomSearch
from ultron.algorithms.space import Choice, IntRange, SearchSpace
from ultron.algorithms.stoppers import POP, Decision
from ultron.simulation.benchmark import LearningCurve, SimulatedClock
from ultron.simulation.costs import SimulationCosts
from ultron.simulation.jobs import simulate_job
from ultron.trial_records import TrialStatus

MAX = 30


def curve(kind: str, seed: int) -> list[float]:
    """Accuracy in percent per epoch: 'good' reaches ~89, 'mediocre' ~70, 'flat' stays at chance."""
    noise = np.random.default_rng(seed).normal(0.0, 0.3, MAX)
    s = np.arange(1, MAX + 1)
    shapes = {
        "good": 93 - 60 * s**-0.8,
        "mediocre": 72 - 40 * s**-0.5,
        "flat": np.full(MAX, 10.0),
    }
    return [float(v) for v in shapes[kind] + noise]


class Synthetic:
    direction = Direction.MAXIMIZE
    max_resource = MAX
    search_space = SearchSpace(
        {"kind": Choice(("good", "mediocre", "flat", "flat")[:3]), "seed": IntRange(0, 10**6)}
    )

    def learning_curve(self, config: dict[str, Any]) -> LearningCurve:
        return LearningCurve(tuple(curve(config["kind"], config["seed"])), (1.0,) * MAX)


def make_pop(clock: Any, **options: Any) -> POP:
    defaults: dict[str, Any] = {
        "direction": "maximize",
        "max_resource": MAX,
        "target": 88.0,
        "slots": 4,
        "interval": 5,
        "kill_threshold": 15.0,
        "bounds": (0.0, 100.0),
        "seed": 0,
        "clock": clock,
    }
    return POP(**{**defaults, **options})


def report(pop: POP, clock: SimulatedClock, trial: str, values: list[float], steps: range) -> Any:
    decision = None
    for step in steps:
        clock.now += 1.0
        decision = pop.on_report(trial, step, values[step - 1])
    return decision


def test_non_learning_trials_are_stopped_at_the_kill_threshold() -> None:
    clock = SimulatedClock()
    pop = make_pop(clock)
    bench = Synthetic()
    job = simulate_job(
        bench,
        RandomSearch(bench.search_space, seed=1),
        stopper=pop,
        workers=4,
        budget=30,
        clock=clock,
        costs=SimulationCosts.free(),  # stopped at the boundary's own step, not one later
    )
    flat = [t for t in job.trials if t.hyperparameters["kind"] == "flat"]
    assert flat, "the seed should draw some flat curves"
    for trial in flat:
        assert trial.status is TrialStatus.STOPPED
        steps = [r["step"] for r in job.curves[trial.trial_id]]
        assert steps == list(range(1, 6))  # stopped at the first boundary
        assert pop.classify(trial.trial_id) == "poor"


def test_the_best_curve_is_promising_and_the_mediocre_one_is_suspended() -> None:
    clock = SimulatedClock()
    pop = make_pop(clock, slots=2)
    good, mediocre = curve("good", 1), curve("mediocre", 2)
    pop.on_trial_start("good")
    pop.on_trial_start("mediocre")
    assert report(pop, clock, "good", good, range(1, 6)) is Decision.CONTINUE
    assert report(pop, clock, "mediocre", mediocre, range(1, 6)) is Decision.SUSPEND
    assert pop.classify("good") == "promising"
    assert pop.classify("mediocre") == "opportunistic"


def test_a_suspended_trial_resumes_where_it_stopped() -> None:
    clock = SimulatedClock()
    pop = make_pop(clock, slots=1)
    pop.on_trial_start("good")  # holds the one promising slot
    report(pop, clock, "good", curve("good", 2), range(1, 6))
    pop.on_trial_start("a")
    values = curve("mediocre", 3)
    assert report(pop, clock, "a", values, range(1, 6)) is Decision.SUSPEND
    assert pop.poll(free_slots=1, can_start_new=False)[0].decision is Decision.RESUME
    assert pop.poll(free_slots=1, can_start_new=False) == []  # resumed once, not twice
    # its next report is step 6; it is judged again at the next boundary (step 10)
    assert report(pop, clock, "a", values, range(6, 10)) is Decision.CONTINUE


def test_suspended_trials_in_a_simulation_never_repeat_a_step() -> None:
    clock = SimulatedClock()
    pop = make_pop(clock, slots=3)
    bench = Synthetic()
    job = simulate_job(
        bench,
        RandomSearch(bench.search_space, seed=4),
        stopper=pop,
        workers=3,
        budget=12,
        clock=clock,
    )
    resumed = [t for t in job.trials if t.attempts > 1 and job.steps_reached[t.trial_id] > 5]
    assert resumed, "some suspended trial should have been resumed"
    for trial in job.trials:
        curve = job.curves[trial.trial_id]
        assert [r["step"] for r in curve] == list(range(1, len(curve) + 1))
        times = [r["time"] for r in curve]
        assert all(b > a for a, b in pairwise(times))
    assert job.best_score is not None and job.best_score >= 88.0  # the target is reached


def test_pop_reaches_the_target_faster_than_running_every_trial_to_the_end() -> None:
    def time_to_target(stopper: Any, clock: SimulatedClock) -> float:
        bench = Synthetic()
        job = simulate_job(
            bench,
            RandomSearch(bench.search_space, seed=7),
            stopper=stopper,
            workers=2,
            target=88.5,
            clock=clock,
            budget=200,
        )
        return job.time_to_target(88.5)

    clock = SimulatedClock()
    with_pop = time_to_target(make_pop(clock, slots=2, target=88.5), clock)
    without = time_to_target(None, SimulatedClock())
    assert with_pop < without < math.inf


def test_pop_state_round_trip() -> None:
    clock = SimulatedClock()
    pop = make_pop(clock)
    for name, kind in [("a", "good"), ("b", "mediocre")]:
        pop.on_trial_start(name)
        report(pop, clock, name, curve(kind, 5), range(1, 6))
    restored = make_pop(clock)
    restored.load_state_dict(json.loads(json.dumps(pop.state_dict())))
    values = curve("good", 6)
    for stopper in (pop, restored):
        stopper.on_trial_start("c")
    start = clock.now
    first = report(pop, clock, "c", values, range(1, 6))
    clock.now = start
    assert report(restored, clock, "c", values, range(1, 6)) == first
    assert math.isclose(pop._trials["c"].p or 0.0, restored._trials["c"].p or 0.0)


def test_pop_slots_follow_a_scaled_job() -> None:
    """``ultron scale`` hands POP the new parallelism: its slots S follow; 0 is refused."""
    pop = POP(direction="maximize", max_resource=20, target=0.9, slots=2, seed=0)
    pop.set_slots(5)
    assert pop.slots == 5
    with pytest.raises(ValueError, match="slots is 0"):
        pop.set_slots(0)


def test_with_finished_curves_pop_ranks_by_them_and_keeps_its_classes() -> None:
    """Once ``min_references`` trials have finished (or stopped at the target), ``p`` comes
    from their curves: a new good trial is promising, a mediocre one opportunistic, a flat
    one poor; a trial suspended before the references came is re-estimated by them."""
    clock = SimulatedClock()
    pop = make_pop(clock, slots=2, min_references=4)
    pop.on_trial_start("early")
    report(pop, clock, "early", curve("good", 20), range(1, 6))
    for i, kind in enumerate(["good", "good", "mediocre", "mediocre"]):
        pop.on_trial_start(f"ref{i}")
        report(pop, clock, f"ref{i}", curve(kind, 10 + i), range(1, MAX + 1))
    assert pop._model.calibrated
    before = pop._trials["early"].p
    pop.poll(free_slots=0)  # no slot: nothing resumes, nothing is re-estimated
    assert pop._trials["early"].p == before
    pop.poll(free_slots=1, can_start_new=False)
    assert pop._trials["early"].p is not None and pop._trials["early"].p > 0.5
    for name, kind in [("good", "good"), ("mediocre", "mediocre"), ("flat", "flat")]:
        pop.on_trial_start(name)
        report(pop, clock, name, curve(kind, 30), range(1, 6))
    assert pop.classify("good") == "promising"
    assert pop.classify("mediocre") == "opportunistic"
    assert (pop._trials["mediocre"].p or 0.0) < 0.2
    assert pop.classify("flat") == "poor"
    restored = make_pop(clock, slots=2, min_references=4)
    restored.load_state_dict(json.loads(json.dumps(pop.state_dict())))
    assert restored._model.references == pop._model.references == 4
    for stopper in (pop, restored):
        stopper.on_trial_start("late")
        report(stopper, clock, "late", curve("good", 40), range(1, 6))
    assert restored._trials["late"].p == pytest.approx(pop._trials["late"].p)


def test_the_dynamic_target_rises_once_reached_and_the_trial_goes_on() -> None:
    """HyperDrive §9: a report at the target raises it by ``raise_target_by``; nothing stops."""
    clock = SimulatedClock()
    pop = make_pop(clock, target=80.0, raise_target_by=2.0, kill_threshold=None)
    pop.on_trial_start("a")
    assert report(pop, clock, "a", [70.0, 81.0, 82.5, 99.5], range(1, 3)) is Decision.CONTINUE
    assert pop.target == 83.0  # 81 reached 80: the next target is 81 + 2
    assert report(pop, clock, "a", [70.0, 81.0, 82.5, 99.5], range(3, 4)) is Decision.CONTINUE
    assert pop.target == 83.0  # 82.5 did not reach it
    report(pop, clock, "a", [70.0, 81.0, 82.5, 99.5], range(4, 5))
    assert pop.target == 100.0  # capped at the bound
    assert pop.on_report("a", 5, 100.0) is Decision.STOP  # at the bound: reached, it stops
    restored = make_pop(clock, target=80.0, raise_target_by=2.0)
    restored.load_state_dict(json.loads(json.dumps(pop.state_dict())))
    assert restored.target == 100.0
    low = make_pop(clock, direction="minimize", target=0.5, raise_target_by=0.1, bounds=(0, 1))
    low.on_trial_start("b")
    low.on_report("b", 1, 0.45)
    assert math.isclose(low.target, 0.35)
    fixed = make_pop(clock, target=80.0)
    fixed.on_trial_start("c")
    assert fixed.on_report("c", 1, 81.0) is Decision.STOP and fixed.target == 80.0
    with pytest.raises(ValueError, match="raise_target_by is 0; it must be above 0"):
        make_pop(clock, raise_target_by=0)


def test_before_any_curve_finishes_pop_judges_against_trials_that_got_further() -> None:
    """With ``partial_quantile``, unfinished curves are references: before anything finishes,
    a trial ahead of the others at their deepest common step is promising and one behind them
    is suspended; a state round trip keeps the references."""
    clock = SimulatedClock()
    pop = make_pop(clock, slots=2, min_references=3, partial_quantile=0.5, kill_threshold=None)
    for i, kind in enumerate(["good", "mediocre", "mediocre", "good"]):
        pop.on_trial_start(f"ref{i}")
        report(pop, clock, f"ref{i}", curve(kind, 50 + i), range(1, 16))
    assert not pop._model.calibrated
    restored = make_pop(clock, slots=2, min_references=3, partial_quantile=0.5, kill_threshold=None)
    restored.load_state_dict(json.loads(json.dumps(pop.state_dict())))
    for stopper in (pop, restored):
        for name, kind in [("ahead", "good"), ("behind", "mediocre")]:
            stopper.on_trial_start(name)
            report(stopper, clock, name, curve(kind, 60), range(1, 6))
        assert stopper._trials["ahead"].p == pytest.approx(1.0, abs=0.2)
        assert stopper._trials["behind"].p == pytest.approx(0.0, abs=0.2)
        assert stopper.classify("behind") == "opportunistic"
    assert restored._trials["ahead"].p == pytest.approx(pop._trials["ahead"].p)
