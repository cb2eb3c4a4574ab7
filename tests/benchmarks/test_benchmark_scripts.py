"""Smoke tests of the orchestration benchmarks at tiny sizes (the real-job parts run by hand)."""

from __future__ import annotations

import math
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def benchmarks(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The repository's ``benchmarks`` package (not installed: it is run from the checkout)."""
    monkeypatch.syspath_prepend(str(REPO))
    import benchmarks

    return benchmarks


def test_optunas_journal_mode_runs_n_trials_in_p_processes(
    benchmarks: ModuleType, tmp_path: Path
) -> None:
    from benchmarks.overhead import run_optuna_journal, table

    peer = run_optuna_journal(6, 0.05, 2, str(tmp_path))
    assert peer["trials"] == 6
    assert peer["search"] >= 6 * 0.05 / 2  # never faster than the ideal
    ours = {**peer, "mode": "ultron async loop", "loop": "async", "overhead": 2 * peer["overhead"]}
    printed = table([ours, peer], 6, 0.05, 2)
    assert "optuna journal, process per worker" in printed
    assert "overhead ratio ultron async / optuna journal: 2.00" in printed


@pytest.mark.parametrize("loop", ["async", "batch"])
def test_scale_times_the_real_master_per_block(benchmarks: ModuleType, loop: str) -> None:
    from benchmarks.scale import run_simulated

    blocks = run_simulated(300, 4, 100, "random", loop)
    assert [row[0] for row in blocks.rows] == [100, 200, 300]
    assert all(math.isfinite(cpu) and cpu > 0 for _, cpu, _, _ in blocks.rows)
    assert "last block / first block CPU" in blocks.table("simulated")


def test_the_curve_check_tables_every_model_from_synthetic_curves(benchmarks: ModuleType) -> None:
    """``benchmarks.curves_check`` without the surrogate: its folds and table on made-up curves."""
    import numpy as np

    from benchmarks.curves_check import table, task_rows

    rng = np.random.default_rng(0)
    steps = np.arange(1, 53)
    values = rng.uniform(50, 90, (40, 1)) - rng.uniform(15, 40, (40, 1)) * steps**-0.6
    rows = task_rows(values, few=10, fallback=1, rng=rng)
    assert len([r for r in rows if r.model == "references"]) == 2 * 2 * 20 * 4  # every query
    printed = table({"t": rows}, configs=40, few=10, fallback=1)
    assert "| references | 20 | 4 |" in printed and "| fallback | 0 | 25 |" in printed
    assert "| ensemble | 0 | 10 |" in printed
