"""The benchmark flow: a small suite end to end, a dated report, and a planted regression."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ultron.flows.benchmark import SUITES, benchmark

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"

pytestmark = pytest.mark.usefixtures("prefect")


def _suite(random_is: str) -> dict[str, object]:
    return {
        "name": "small",
        "seeds": 3,
        # The label "random" runs whatever strategy the day's suite gives it.
        "strategies": {"random": {"strategy": random_is}, "tpe": {"strategy": "tpe"}},
        "problems": {
            "svm-grid": {"kind": "grid", "budget": 15, "workers": 2},
            "missing-grid": {"kind": "grid", "budget": 15},
        },
    }


def test_dated_reports_flag_a_strategy_swapped_for_a_worse_one(tmp_path: Path) -> None:
    if not (DATA / "hpo_grids_snoek").is_dir():
        pytest.skip(f"needs the shared benchmark data in {DATA}")
    storage = str(tmp_path / "runs")
    first = benchmark(_suite("random"), storage=storage, data_dir=str(DATA), date="2026-01-01")
    folder = Path(first["folder"])
    assert folder == tmp_path / "runs" / "benchmarks" / "small" / "2026-01-01"
    assert first["previous"] is None and first["regressions"] == []
    assert "missing-grid" in first["skipped"]  # an unknown grid is reported, not fatal
    assert (folder / "report.html").is_file() and (
        folder / "svm-grid" / "best_vs_time.png"
    ).is_file()
    summary = json.loads((folder / "summary.json").read_text())
    rows = {row["strategy"]: row for row in summary["problems"]["svm-grid"]}
    assert set(rows) == {"random", "tpe"} and all(r["seeds"] == 3 for r in rows.values())

    # The next night the label "random" runs grid search, which is worse in 15 trials.
    second = benchmark(_suite("grid"), storage=storage, data_dir=str(DATA), date="2026-01-02")
    assert second["previous"] == str(folder)
    assert len(second["regressions"]) == 1
    assert second["regressions"][0].startswith("svm-grid / random:")  # tpe did not change
    html = (Path(second["folder"]) / "report.html").read_text()
    assert "1 regression(s)" in html and "svm-grid / random" in html


def test_the_nightly_suite_names_problems_that_need_no_gpu() -> None:
    problems = SUITES["nightly"]["problems"]
    assert {p["kind"] for p in problems.values()} == {"job", "grid", "lcbench"}
    assert len(SUITES["nightly"]["strategies"]) >= 2
