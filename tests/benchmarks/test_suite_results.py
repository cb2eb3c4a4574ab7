"""benchmarks.suite_results' parts: each its worker counts and seeds, a bad one refused."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def results(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``benchmarks.suite_results`` from the checkout (not installed)."""
    monkeypatch.syspath_prepend(str(REPO))
    import benchmarks.suite_results

    return benchmarks.suite_results


def test_a_part_is_worker_counts_and_seeds(results: ModuleType) -> None:
    assert results._part("64,256:1") == ([64, 256], 1)
    assert results._part("8:3") == ([8], 3)


@pytest.mark.parametrize("bad", ["64,256", "8:x", "0:3", "8:0"])
def test_a_bad_part_is_refused_with_its_value_and_the_form(
    results: ModuleType, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        results.main(["--part", bad])
    assert stop.value.code == 2
    assert repr(bad) in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["0", "1.5", "x", "nan"])
@pytest.mark.parametrize("module", ["suite_results", "lcbench_suite"])
def test_a_bad_target_quantile_is_refused_with_its_value_and_the_rule(
    results: ModuleType, module: str, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import benchmarks.lcbench_suite

    if module == "suite_results":
        main, given = results.main, ["--part", "8:1", "--target-quantile", bad]
    else:
        main, given = benchmarks.lcbench_suite.main, ["--target-quantile", bad]
    with pytest.raises(SystemExit) as stop:
        main(given)
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert repr(bad) in error and "above 0 and at most 1" in error


def test_writing_the_headline_section_at_another_target_is_refused(
    results: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    written = tmp_path / "RESULTS.md"
    written.write_text("# Benchmark results\n")
    with pytest.raises(SystemExit) as stop:
        results.main(
            ["--part", "8:1", "--target-quantile", "0.99", "--write-results", "--results",
             str(written)]
        )  # fmt: skip
    assert stop.value.code == 2
    assert "headline tables, at 0.95" in capsys.readouterr().err
    assert written.read_text() == "# Benchmark results\n"


def test_the_tables_read_the_runs_of_their_target_quantile(
    results: ModuleType, tmp_path: Path
) -> None:
    from benchmarks.data import DataMissing
    from benchmarks.suite_runs import RunCache, SuiteSettings

    cache = RunCache(tmp_path)
    near_best = SuiteSettings(seeds=1, quantile=0.99)
    try:
        cache.put_stats("189906", near_best, {"target": 90.0, "best": 91.0, "median": 80.0})
    except DataMissing as error:  # the cache's key holds the surrogate's fingerprint
        pytest.skip(str(error))
    run = {"hours": 0.5, "regret": 0.1, "trials": 8, "epochs": 100, "cpu_s": 1.0}
    cache.put(("189906", "Random", 8, 0), near_best, run)
    found = {
        q: results.parts_from_cache(
            [([8], 1)], task_ids=["189906"], methods=["Random"], cache=cache, quantile=q
        )[0]
        for q in (0.95, 0.99)
    }
    assert found[0.95]["tasks"] == [] and found[0.95]["left_out"] == ["189906"]
    assert found[0.99]["tasks"] == ["189906"]
    assert found[0.99]["runs"]["189906", "Random", 8, 0] == run
    assert found[0.99]["settings"].quantile == 0.99
