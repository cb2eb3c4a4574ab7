"""benchmarks/scaling.py: efficiency against P=1, the same configurations in every mode, and
the table, JSON and plot it writes (its real-sized runs are by hand: benchmarks/RESULTS.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _benchmarks_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO))  # the benchmarks package runs from the checkout


def _needs_training() -> None:
    for module in ("torch", "sklearn", "matplotlib"):
        pytest.importorskip(module, reason=f"the scaling benchmark trains with {module}")


def test_efficiency_is_t1_over_p_times_tp_of_the_same_mode() -> None:
    from benchmarks.scaling import Run, efficiency_rows, same_scores, table

    runs = [
        Run("ultron async", 1, 40.0, 45.0, {0: 0.5, 1: 0.7}),
        Run("ultron async", 4, 12.5, 16.0, {0: 0.5, 1: 0.7}),
        Run("optuna threads", 1, 30.0, 30.0, {0: 0.5, 1: 0.7}),
        Run("optuna threads", 4, 15.0, 15.0, {0: 0.5, 1: 0.7}),
    ]
    rows = {(r["mode"], r["parallelism"]): r for r in efficiency_rows(runs)}
    assert rows["ultron async", 1]["efficiency"] == 1.0
    assert rows["ultron async", 4]["speedup"] == pytest.approx(40 / 12.5)
    assert rows["ultron async", 4]["efficiency"] == pytest.approx(40 / (4 * 12.5))
    assert rows["optuna threads", 4]["efficiency"] == pytest.approx(30 / (4 * 15))  # its own T1
    assert same_scores(runs) == (True, 0.0)
    about = {"command": "c", "cores": 4, "cpu": "x", "date": "d", "commit": "abc"}
    printed = table(list(rows.values()), {**about, "load_average": [0.5]}, 2, 3)
    assert "| ultron async | 4 | 2 | 12.50 | 3.20 | 80.0% | 16.00 |" in printed
    assert printed.startswith("`c`: 2 configurations x 3 epochs, 4 cores (x), d, commit abc")


def test_a_mode_without_p1_or_with_other_configurations_is_named() -> None:
    from benchmarks.scaling import Run, efficiency_rows, same_scores

    with pytest.raises(ValueError, match="'optuna journal' has no P=1 run"):
        efficiency_rows([Run("optuna journal", 2, 1.0, 1.0)])
    other = [Run("a", 1, 1.0, 1.0, {0: 0.5}), Run("a", 2, 1.0, 1.0, {1: 0.5})]
    assert same_scores(other)[0] is False
    differ = [Run("a", 1, 1.0, 1.0, {0: 0.5}), Run("a", 2, 1.0, 1.0, {0: 0.25})]
    assert same_scores(differ) == (True, 0.25)


def test_the_smallest_run_writes_a_consistent_table_json_and_plot(tmp_path: Path) -> None:
    _needs_training()
    from benchmarks.scaling import main

    out = tmp_path / "scaling"
    argv = ["--parallelism", "1", "2", "--configs", "4", "--epochs", "1", "--out", str(out)]
    main([*argv, "--modes", "optuna-threads"])  # in this process: the cheapest mode
    document = json.loads((out / "scaling.json").read_text())
    rows = {(r["mode"], r["parallelism"]): r for r in document["rows"]}
    assert set(rows) == {("optuna threads", 1), ("optuna threads", 2)}
    for (mode, p), row in rows.items():
        assert row["trials"] == 4
        t1 = rows[mode, 1]["search_s"]
        assert row["efficiency"] == pytest.approx(t1 / (p * row["search_s"]))
        assert 0 < row["span_s"] <= row["search_s"]  # the trials' own clocks, inside the search
    assert {tuple(sorted(run["scores"])) for run in document["runs"]} == {("0", "1", "2", "3")}
    assert document["machine"]["cores"] >= 2 and document["machine"]["command"]
    printed = (out / "scaling.md").read_text()
    assert "| optuna threads | 2 | 4 |" in printed
    assert "Every run trained the same 4 configurations: yes" in printed
    assert (out / "scaling.png").read_bytes().startswith(b"\x89PNG")


def test_optunas_journal_mode_runs_the_enqueued_configurations_once(tmp_path: Path) -> None:
    """The journal mode's P processes take the enqueued trials, none twice (a sleep of 0
    stands in for training: what is checked is who runs which configuration)."""
    import functools

    from benchmarks.overhead import _sleep_objective, optuna_journal

    enqueue = [{"x": x} for x in (0.1, 0.2, 0.3, 0.4, 0.5)]
    objective = functools.partial(_sleep_objective, sleep=0.0)
    study, search, total = optuna_journal(objective, 5, 2, str(tmp_path), enqueue=enqueue)
    assert sorted(t.params["x"] for t in study.trials) == [0.1, 0.2, 0.3, 0.4, 0.5]
    assert 0 < search <= total


def test_parallelism_without_1_is_refused_before_any_compute(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks.scaling import main

    with pytest.raises(SystemExit) as stopped:
        main(["--parallelism", "2", "--out", str(tmp_path / "none")])
    assert stopped.value.code == 2
    assert "it must include 1" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()
