"""The LCBench suite's aggregates over (task, seed) pairs, on made-up runs (no surrogate)."""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
INF = math.inf


@pytest.fixture(scope="module")
def tables() -> ModuleType:
    """The checkout's ``benchmarks`` package (not installed: it runs from the checkout)."""
    sys.path.insert(0, str(REPO))
    try:
        from benchmarks import suite_tables

        return suite_tables
    finally:
        sys.path.remove(str(REPO))


def _suite(hours: dict[str, list[list[float]]], seeds: int) -> dict[str, Any]:
    """``hours[method][task][seed]``; the regret of a run is its hours (or 1 when never)."""
    from benchmarks.suite_runs import SuiteSettings

    runs = {}
    for method, per_task in hours.items():
        for t, per_seed in enumerate(per_task):
            for s, h in enumerate(per_seed):
                regret = h if math.isfinite(h) else 1.0
                runs[str(t), method, 8, s] = {"hours": h, "regret": regret, "cpu_s": 1.0}
    tasks = [str(t) for t in range(len(next(iter(hours.values()))))]
    return {
        "settings": SuiteSettings(seeds=seeds),
        "stats": {t: {"target": 90.0} for t in tasks},
        "runs": runs,
        "tasks": tasks,
        "methods": list(hours),
        "workers": [8],
        "seeds": {8: seeds},
    }


def test_three_seeds_give_means_over_pairs_and_the_spread_over_seeds(tables: ModuleType) -> None:
    suite = _suite(
        {
            # two tasks, three seeds each
            "Random": [[0.4, 0.8, INF], [0.2, 0.2, 0.2]],
            "POP (ours)": [[0.1, 0.4, 0.5], [0.1, INF, 0.4]],
        },
        seeds=3,
    )
    agg = tables.aggregate(suite)
    pop, rnd = agg["POP (ours)", 8], agg["Random", 8]
    assert (pop["reached"], pop["pairs"], rnd["reached"]) == (5, 6, 5)
    assert math.isclose(pop["hours"], statistics.geometric_mean([0.1, 0.4, 0.5, 0.1, 0.4]))
    # pairs where both reached: (0, s0) 0.4/0.1, (0, s1) 0.8/0.4, (1, s0) 0.2/0.1, (1, s2) 0.2/0.4
    assert pop["speedup_pairs"] == 4
    assert math.isclose(pop["speedup"], statistics.geometric_mean([4.0, 2.0, 2.0, 0.5]))
    # ranks per pair: seed 0 POP 1, 1; seed 1 POP 1, 2; seed 2 POP 1 (random never), 2
    per_seed = [1.0, 1.5, 1.5]
    assert math.isclose(pop["time_rank"][0], statistics.fmean(per_seed))
    assert math.isclose(pop["time_rank"][1], statistics.stdev(per_seed))
    regrets = [statistics.fmean([0.1, 0.1]), statistics.fmean([0.4, 1.0]), 0.45]
    assert math.isclose(pop["regret"][0], statistics.fmean(regrets))
    assert math.isclose(pop["regret"][1], statistics.stdev(regrets))

    text = "\n".join(tables.aggregate_tables(suite) + tables.head_to_head(suite))
    assert "| POP (ours) | 1.33 ± 0.29 |" in text
    assert f"| POP (ours) | {pop['hours']:.3f} h (5/6) |" in text
    assert "| Random | x" in text and "(4 pairs); as fast on 4/6 |" in text  # 3 faster, 1 alone
    rows = tables.task_tables(suite)
    assert "| 0 | 90.00 | 0.800 h (2/3) / 0.733 | 0.400 h (3/3) / 0.333 |" in rows


def test_one_seed_has_no_spread_and_the_task_table_no_counts(tables: ModuleType) -> None:
    suite = _suite({"Random": [[0.4], [INF]], "ASHA": [[0.2], [0.3]]}, seeds=1)
    asha = tables.aggregate(suite)["ASHA", 8]
    assert asha["time_rank"] == (1.0, 0.0) and asha["reached"] == 2
    assert "| 1 | 90.00 | - / 1.000 | 0.300 h / 0.300 |" in tables.task_tables(suite)


def test_a_section_can_hold_parts_run_with_other_seeds(tables: ModuleType) -> None:
    """8 workers over 3 seeds, and a part of fewer seeds (say, 64 workers) under its heading."""
    three = _suite({"Random": [[0.4, 0.8, 0.2]], "ASHA": [[0.2, 0.3, 0.1]]}, seeds=3)
    one = _suite({"Random": [[0.4]], "ASHA": [[0.5]]}, seeds=1)
    text = tables.section(three, command="x", parts=[one], note="Ran on two cores.")
    assert text.startswith(tables.START) and text.endswith(tables.END)
    assert "(3 seed(s); 0.0 CPU hours" in text and "\nRan on two cores.\n" in text
    assert "### 8 workers (1 seed(s)), on 1 tasks" in text
    assert (
        "| method | 8 workers, 3 seed(s) |" in text and "| method | 8 workers, 1 seed(s) |" in text
    )
