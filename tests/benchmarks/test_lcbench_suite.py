"""The LCBench suite at a tiny size: one task, one seed, 8 workers, a budget of two trainings.

Needs the YAHPO LCBench surrogate in ``../shared/data`` and ``onnxruntime``; skips otherwise.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
TASK = "189906"


@pytest.fixture(scope="module")
def suite_modules() -> ModuleType:
    """The checkout's ``benchmarks`` package (not installed: it runs from the checkout)."""
    sys.path.insert(0, str(REPO))
    try:
        from benchmarks import lcbench_suite
        from benchmarks.data import DataMissing

        try:
            lcbench_suite._bench(TASK)
        except DataMissing as error:
            pytest.skip(str(error))
        return lcbench_suite
    finally:
        sys.path.remove(str(REPO))


def _settings() -> Any:
    from benchmarks.suite_runs import SuiteSettings

    return SuiteSettings(seeds=1, budget=8.0, reference=200)


@pytest.fixture(scope="module")
def suite(suite_modules: ModuleType) -> dict[str, Any]:
    return suite_modules.run_suite(_settings(), task_ids=[TASK], workers=[8])


def _task_row(text: str, workers: int) -> list[str]:
    block = text.split(f"**{workers} workers**", 1)[1]
    row = next(line for line in block.splitlines() if line.startswith(f"| {TASK} |"))
    return [cell.strip() for cell in row.strip("|").split("|")]


def test_every_method_runs_through_the_master_and_its_cell_is_its_run(
    suite_modules: ModuleType, suite: dict[str, Any]
) -> None:
    pytest.importorskip("dehb", reason="every method's run, DEHB's included, needs dehb")
    from benchmarks.suite_tables import END, START, section

    text = section(suite, command="python -m benchmarks.lcbench_suite --test")
    assert text.startswith(START) and text.endswith(END)
    row = _task_row(text, 8)
    assert row[1] == f"{suite['stats'][TASK]['target']:.2f}"
    for method, cell in zip(suite_modules.METHODS, row[2:], strict=True):
        run = suite["runs"][TASK, method, 8, 0]
        assert run["trials"] > 0 and run["epochs"] >= run["trials"], method
        shown_time, shown_regret = cell.split(" / ")
        assert shown_regret == f"{run['regret']:.3f}", method
        assert (shown_time == "-") == math.isinf(run["hours"]), method
        if not math.isinf(run["hours"]):
            assert shown_time == f"{run['hours']:.3f} h"
    # the aggregate has one row per method; with one task each rank is a plain number
    for method in suite_modules.METHODS:
        assert any(line.startswith(f"| {method} | ") for line in text.splitlines())
    # early stopping trains fewer epochs per trial than full-budget random search
    runs = suite["runs"]
    per_trial = {
        m: runs[TASK, m, 8, 0]["epochs"] / runs[TASK, m, 8, 0]["trials"]
        for m in suite_modules.METHODS
    }
    assert per_trial["ASHA"] < per_trial["Random"]
    assert per_trial["1-epoch top-K"] < per_trial["Random"]


def test_a_method_that_never_reaches_the_target_shows_no_time(
    suite_modules: ModuleType, suite: dict[str, Any]
) -> None:
    from benchmarks.suite_tables import aggregate, section

    stats = {**suite["stats"][TASK], "target": 101.0}  # accuracy is in percent: unreachable
    run = suite_modules.run_one(TASK, "Random", 8, 0, _settings(), stats)
    assert math.isinf(run["hours"]) and math.isfinite(run["regret"])
    changed = {**suite, "runs": {**suite["runs"], (TASK, "Random", 8, 0): run}}
    assert _task_row(section(changed, command="x"), 8)[2].startswith("- / ")
    assert aggregate(changed)["Random", 8]["reached"] == 0
    assert math.isnan(aggregate(changed)["ASHA", 8]["speedup"])  # no random time to compare


def test_dehb_is_skipped_with_the_reason_when_absent(
    suite_modules: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A None entry makes `import dehb` raise ImportError: the package as if not installed.
    monkeypatch.setitem(sys.modules, "dehb", None)
    from benchmarks.suite_tables import section

    suite = suite_modules.run_suite(
        _settings(), task_ids=[TASK], methods=["Random", "DEHB"], workers=[8]
    )
    text = section(suite, command="x")
    assert "DEHB: DEHB skipped: the dehb package is not installed" in text
    assert _task_row(text, 8)[3] == "skipped"


def test_the_section_replaces_only_itself(suite: dict[str, Any], tmp_path: Path) -> None:
    from benchmarks.suite_tables import START, section, write_section

    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n## Someone else's table\n\n| a |\n")
    write_section(results, section(suite, command="first"))
    write_section(results, section(suite, command="second"))
    text = results.read_text()
    assert text.count(START) == 1 and "`second`" in text and "`first`" not in text
    assert "## Someone else's table\n\n| a |\n" in text
