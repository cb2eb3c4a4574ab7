"""benchmarks/dispatch_path.py on a real job: every hop between two trials on one worker is
timed, by the clocks of the parts that pass it, and the hops add up to the gap they split."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


def test_the_hops_between_two_trials_add_up_to_the_gap(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(REPO))  # the benchmarks package runs from the checkout
    from benchmarks.dispatch_path import measure

    # P=1: each hop follows the one before (at P>1 a trial may be submitted on a worker before
    # the master has that worker's last result, for another worker's). Trials of 0.1 s: from
    # the third or so on they run in the worker's slot (ultron.master.slots), whose hops the
    # path follows (a KeyError here: none ran in a slot).
    figures = measure(10, 0.1, tmp_path, {"redis_url": redis_url})
    assert all(value > 0 for value in figures.values()), figures
    gap = figures.pop("model end -> next model start (the gap)")
    path = [
        "model end -> master has it",
        "master has it -> next submit here",
        "submit (a push to its slot) -> run_trial starts",
        "run_trial starts -> model starts",
    ]
    # Medians of parts need not add up exactly to the median of their sum; half of it they do.
    assert sum(figures[name] for name in path) == pytest.approx(gap, rel=0.5), figures
