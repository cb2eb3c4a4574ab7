"""The real master loop on a simulated clock: same answers as the simulator, stoppers honoured."""

from __future__ import annotations

import doctest

import numpy as np

import ultron.simulation.jobs
from ultron.algorithms import Direction, RandomSearch, SearchSpace, Uniform
from ultron.algorithms.stoppers import ASHA, Hyperband
from ultron.simulation.benchmark import LearningCurve, Simulation
from ultron.simulation.jobs import simulate_job
from ultron.worker.trial import TrialStatus

STEPS = 27


class Curves:
    """Accuracy curves that rise to x (the configuration's quality) at speed k; 1 s a step."""

    search_space = SearchSpace({"x": Uniform(0.0, 1.0), "k": Uniform(0.05, 0.5)})
    direction = Direction.MAXIMIZE
    max_resource = STEPS

    def learning_curve(self, config: dict) -> LearningCurve:
        steps = np.arange(1, STEPS + 1)
        values = config["x"] * (1 - np.exp(-config["k"] * steps))
        return LearningCurve(tuple(float(v) for v in values), (1.0,) * STEPS)


def test_doctests() -> None:
    assert doctest.testmod(ultron.simulation.jobs).failed == 0


def test_the_master_and_the_simulator_agree_without_a_stopper() -> None:
    bench = Curves()
    master = simulate_job(bench, RandomSearch(bench.search_space, seed=4), budget=40, workers=8)
    reference = Simulation(
        bench, RandomSearch(bench.search_space, seed=4), workers=8, max_trials=40
    ).run()
    assert len(master.trials) == 40
    assert master.best_score == reference.best_value
    assert master.elapsed == reference.elapsed == 5 * STEPS  # 40 trials, 8 at a time
    assert master.steps_trained == reference.steps_run == 40 * STEPS


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
        steps = [report["step"] for report in job.curves[trial.trial_id]]
        assert steps == list(range(1, job.steps_reached[trial.trial_id] + 1))
    assert job.steps_trained < 30 * STEPS
