"""Oracle tests: Hyperband and ASHA budgets pinned against the published algorithms.

Li et al., "Hyperband" (JMLR 2017), Table 1 (R = 81, eta = 3) and Algorithm 1; Li et al.,
"A System for Massively Parallel Hyperparameter Tuning" (ASHA, MLSys 2020), Algorithm 2.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from ultron.algorithms.base import Direction
from ultron.algorithms.random_search import RandomSearch
from ultron.algorithms.space import SearchSpace, Uniform
from ultron.algorithms.stoppers import (
    ASHA,
    Decision,
    Hyperband,
    MedianStopping,
    asha_rungs,
    hyperband_brackets,
)
from ultron.simulation.benchmark import LearningCurve
from ultron.simulation.costs import SimulationCosts
from ultron.simulation.jobs import simulate_job

# The published schedules are the stoppers' own: on a free cluster a decision acts at the step
# it is made on (the real system's one step of lag is the simulator's, tested there).
FREE = SimulationCosts.free()

# Table 1 of the Hyperband paper: for each bracket s, (n_i, r_i) per rung i.
TABLE_1 = {
    4: [(81, 1), (27, 3), (9, 9), (3, 27), (1, 81)],
    3: [(34, 3), (11, 9), (3, 27), (1, 81)],
    2: [(15, 9), (5, 27), (1, 81)],
    1: [(8, 27), (2, 81)],
    0: [(5, 81)],
}


def test_hyperband_brackets_match_table_1_of_the_paper() -> None:
    brackets = hyperband_brackets(81, reduction_factor=3)
    assert [b.s for b in brackets] == [4, 3, 2, 1, 0]
    for bracket in brackets:
        assert [(r.trials, r.resource) for r in bracket.rungs] == TABLE_1[bracket.s]


def test_hyperband_budget_per_bracket() -> None:
    budgets = {b.s: b.budget for b in hyperband_brackets(81)}
    # sum_i n_i r_i, every bracket close to B = (s_max + 1) R = 405
    assert budgets == {4: 405, 3: 363, 2: 351, 1: 378, 0: 405}
    with_resume = {b.s: b.budget_with_resume for b in hyperband_brackets(81)}
    assert with_resume == {4: 297, 3: 276, 2: 279, 1: 324, 0: 405}


@pytest.mark.parametrize(
    ("max_resource", "eta", "firsts"),
    [(27, 3, [27, 12, 6, 4]), (16, 2, [16, 10, 7, 5, 5]), (243, 3, [243, 98, 41, 18, 9, 6])],
)
def test_hyperband_bracket_sizes_for_other_settings(
    max_resource: int, eta: int, firsts: list[int]
) -> None:
    brackets = hyperband_brackets(max_resource, reduction_factor=eta)
    assert [b.rungs[0].trials for b in brackets] == firsts
    assert all(b.rungs[-1].resource == max_resource for b in brackets)


def test_asha_rungs() -> None:
    assert asha_rungs(81) == [1, 3, 9, 27, 81]
    assert asha_rungs(100, min_resource=4, reduction_factor=2) == [4, 8, 16, 32, 64, 100]
    assert asha_rungs(81, bracket=2) == [9, 27, 81]


def test_bad_budgets_name_the_field() -> None:
    with pytest.raises(ValueError, match="reduction_factor is 1"):
        hyperband_brackets(81, reduction_factor=1)
    with pytest.raises(ValueError, match="max_resource is 2"):
        ASHA(max_resource=2, min_resource=3)


class Ordered:
    """Trial ``t`` reports loss ``rank(t) + 1/step``: a fixed order of quality, known here."""

    direction = Direction.MINIMIZE

    def __init__(self, max_resource: int, *, worse_later: bool = True) -> None:
        self.max_resource = max_resource
        self.search_space = SearchSpace({"x": Uniform(0.0, 1.0)})
        self.started = 0
        self.worse_later = worse_later

    def learning_curve(self, config: dict[str, Any]) -> LearningCurve:
        rank = self.started if self.worse_later else -self.started
        self.started += 1
        values = tuple(rank + 1 / s for s in range(1, self.max_resource + 1))
        return LearningCurve(values, (1.0,) * self.max_resource)


@pytest.mark.parametrize("workers", [1, 4, 16])
def test_hyperband_runs_the_published_number_of_trials_per_rung(workers: int) -> None:
    hb = Hyperband(max_resource=81, reduction_factor=3)
    bench = Ordered(81)
    job = simulate_job(
        bench,
        RandomSearch(bench.search_space, seed=0),
        stopper=hb,
        workers=workers,
        budget=143,
        costs=FREE,
    )
    assert hb.counts() == [(s, [n for n, _ in TABLE_1[s]]) for s in (4, 3, 2, 1, 0)]
    assert len(job.trials) == 143  # 81 + 34 + 15 + 8 + 5
    # Each step is run once: promoted trials resume from their checkpoint.
    assert job.steps_trained == sum(b.budget_with_resume for b in hyperband_brackets(81))
    for trial in job.trials:
        curve = job.curves[trial.trial_id]
        assert [r["step"] for r in curve] == list(range(1, job.steps_reached[trial.trial_id] + 1))
        # A promoted trial resumes on its own curve (loss = its rank + 1/step), not a new one.
        assert len({round(r["value"] - 1 / r["step"]) for r in curve}) == 1
    # Successive halving keeps the best: the bracket's first trial (lowest loss) goes all the way.
    assert job.steps_reached["0000"] == 81


def test_asha_promotion_pins_trials_per_rung() -> None:
    """With each new trial worse than all before, ASHA promotes exactly floor(n / eta^k)."""
    asha = ASHA(max_resource=81, reduction_factor=3, mode="promotion")
    bench = Ordered(81)
    simulate_job(
        bench,
        RandomSearch(bench.search_space, seed=0),
        stopper=asha,
        workers=1,
        budget=81,
        costs=FREE,
    )
    state = asha.state_dict()
    assert [len(rung) for rung in state["recorded"]] == [81, 27, 9, 3, 1]


def test_asha_promotion_promotes_at_least_the_top_third() -> None:
    """When later trials are better, earlier promotions stand and a few extra are made."""
    asha = ASHA(max_resource=27, reduction_factor=3, mode="promotion")
    bench = Ordered(27, worse_later=False)
    simulate_job(
        bench, RandomSearch(bench.search_space, seed=0), stopper=asha, workers=1, budget=27
    )
    sizes = [len(rung) for rung in asha.state_dict()["recorded"]]
    assert sizes[0] == 27
    assert all(sizes[k + 1] >= sizes[k] // 3 for k in range(len(sizes) - 1))


def test_asha_stopping_mode_keeps_the_top_third_at_each_rung() -> None:
    asha = ASHA(max_resource=9, reduction_factor=3)
    decisions = [asha.on_report(t, 1, loss) for t, loss in enumerate([5, 4, 6, 3, 7, 8])]
    # ranks among those recorded so far; keep ceil(n / 3)
    assert decisions == [
        Decision.CONTINUE,  # 1 recorded, keep 1
        Decision.CONTINUE,  # best of 2
        Decision.STOP,  # 3rd of 3, keep 1
        Decision.CONTINUE,  # best of 4
        Decision.STOP,
        Decision.STOP,
    ]
    assert asha.on_report(0, 9, 1.0) is Decision.STOP  # finished at max_resource


def test_hyperband_waits_for_its_rung_then_resumes_the_best() -> None:
    hb = Hyperband(max_resource=9, reduction_factor=3)  # brackets s=2: 9 trials, s=1: 5, s=0: 3
    for t in range(9):
        assert hb.on_trial_start(t).bracket == 2
    assert hb.on_trial_start(9).bracket == 1
    decisions = [hb.on_report(t, 1, float(9 - t)) for t in range(9)]
    # the last one to report completes the rung; it is the best, so it simply continues
    assert decisions == [Decision.SUSPEND] * 8 + [Decision.CONTINUE]
    commands = hb.poll(free_slots=4)
    resumed = [c.trial_id for c in commands if c.decision is Decision.RESUME]
    stopped = {c.trial_id for c in commands if c.decision is Decision.STOP}
    assert resumed == [7, 6]
    assert stopped == {0, 1, 2, 3, 4, 5}


def test_hyperband_closes_a_partial_bracket_when_nothing_new_can_start() -> None:
    hb = Hyperband(max_resource=9)
    for t in range(4):
        hb.on_trial_start(t)
        assert hb.on_report(t, 1, float(t)) is Decision.SUSPEND
    assert hb.poll(free_slots=1) == []
    commands = hb.poll(free_slots=1, can_start_new=False)
    assert next((c.trial_id, c.decision) for c in commands) == (0, Decision.RESUME)


@pytest.mark.parametrize(
    "make",
    [
        lambda: ASHA(max_resource=27, mode="promotion"),
        lambda: ASHA(max_resource=27),
        lambda: Hyperband(max_resource=27),
        lambda: MedianStopping(max_resource=27, min_trials=2),
    ],
)
def test_stopper_state_round_trip_gives_the_same_decisions(make: Any) -> None:
    def play(stopper: Any, trials: range) -> list[Any]:
        out = []
        for t in trials:
            stopper.on_trial_start(t)
            for step in (1, 3, 9):
                out.append(stopper.on_report(t, step, math.sin(t) + 1 / step))
            out.append(stopper.poll(free_slots=2))
        return out

    stopper = make()
    play(stopper, range(7))
    restored = make()
    restored.load_state_dict(json.loads(json.dumps(stopper.state_dict())))
    assert play(restored, range(7, 14)) == play(stopper, range(7, 14))


def test_median_stopping_needs_peers_and_respects_the_grace_period() -> None:
    median = MedianStopping(direction="maximize", min_resource=2, max_resource=5, min_trials=2)
    for t in range(2):
        for step in (1, 2):
            assert median.on_report(t, step, 0.8) is Decision.CONTINUE
    assert median.on_report(9, 1, 0.1) is Decision.CONTINUE  # grace period
    assert median.on_report(9, 2, 0.1) is Decision.STOP
    assert median.on_report(8, 2, 0.9) is Decision.CONTINUE
