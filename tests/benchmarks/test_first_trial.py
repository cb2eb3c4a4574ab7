"""benchmarks/first_trial.py's summary: forked workers and the spawned baseline side by side,
with the round-by-round ratio (the real jobs it times run by hand: see benchmarks/RESULTS.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _benchmarks_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO))  # the benchmarks package runs from the checkout


def test_the_summary_prints_both_and_the_median_ratio() -> None:
    from benchmarks.first_trial import summary

    runs = [{"first_score_s": s, "wall_s": s + 1} for s in (2.0, 1.0, 3.0)]
    baseline = [{"first_score_s": s, "wall_s": s + 1} for s in (4.0, 4.0, 3.0)]
    printed = summary(runs, baseline, what="ultron run")
    assert "over 3 round(s)" in printed
    assert "ultron run, forked workers" in printed and "first trial 1.00 / 2.00 s" in printed
    assert "ultron run, spawned" in printed and "first trial 3.00 / 4.00 s" in printed
    # ratios per round 0.5, 0.25, 1.0: median 0.5
    assert "time to first trial, forked / spawned: median x0.50\n" in printed
    assert "first trial at most 3 s (median, 2 cores): met" in printed.splitlines()[-1]


def test_the_summary_wants_rounds_in_pairs() -> None:
    from benchmarks.first_trial import summary

    with pytest.raises(ValueError, match="runs has 1 rounds and baseline 0"):
        summary([{"first_score_s": 1.0, "wall_s": 1.0}], [], what="ultron run")


def test_the_command_line_names_its_options() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.first_trial", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "--runs" in done.stdout and "--cli" in done.stdout
