"""benchmarks/pbt.py at a small size: PBT through the real master loop on the simulator."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _benchmarks_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO))  # the benchmarks package runs from the checkout


def test_pbt_beats_random_search_at_the_same_epochs_on_a_moving_optimum() -> None:
    from benchmarks.pbt import MovingOptimum, run

    toy = MovingOptimum(epochs=20)
    random_job = run("random", toy, population=8, interval=2, seed=0)
    pbt_job = run("pbt", toy, population=8, interval=2, seed=0)
    assert pbt_job.steps_trained == random_job.steps_trained == 8 * 20
    assert (pbt_job.best_score or 0) > (random_job.best_score or 0)
    assert (pbt_job.best_score or 0) > toy.best_constant()
    exploited = [t for t in pbt_job.trials if t.lineage]
    assert exploited and all(t.hyperparameters == t.lineage[-1]["config_after"] for t in exploited)
