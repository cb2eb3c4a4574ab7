"""ultron.reporting: statistics over seeds, regressions, and the files of the reports."""

from __future__ import annotations

import base64
import re
import statistics
import sys
from pathlib import Path

import numpy as np
import pytest

from ultron.algorithms.base import Direction
from ultron.reporting import (
    SeedRun,
    experiment_files,
    find_regressions,
    read_job,
    run_from_trials,
    summarize,
    write_files,
    write_job_report,
)
from ultron.reporting.plots import ReportingUnavailable, require_matplotlib
from ultron.trial_records import TrialResult, TrialStatus

PNG = b"\x89PNG\r\n\x1a\n"


def _trial(trial_id: str, score: float | None, lr: float, duration: float = 1.0) -> TrialResult:
    status = TrialStatus.COMPLETED if score is not None else TrialStatus.FAILED
    return TrialResult(trial_id, {"lr": lr, "opt": "adam"}, status, score=score, duration=duration)


def test_run_from_trials_orders_by_trial_id_and_times_from_reports() -> None:
    # Completion order differs from sampling order: the table is read in trial-id order.
    trials = [
        _trial("0001", 0.9, 0.1, 2.0),
        _trial("0000", 0.5, 0.01, 3.0),
        _trial("0002", None, 1),
    ]
    curves = {
        "0000": [{"step": 0, "time": 103.0, "accuracy": 0.5}],
        "0001": [{"step": 0, "time": 104.0, "accuracy": 0.9}],
    }
    run = run_from_trials("tpe", 3, "job", trials, curves)
    assert run.scores == (0.5, 0.9, None)
    # The first trial started at 100 (ended at 103 after 3 s); the failed one ends with the last.
    assert run.times == (3.0, 4.0, 4.0)
    assert run.best(Direction.MAXIMIZE) == 0.9 and run.best(Direction.MINIMIZE) == 0.5


def test_summarize_is_the_mean_and_sample_std_of_each_seeds_best() -> None:
    rng = np.random.default_rng(0)
    runs = [
        SeedRun(name, seed, f"j{seed}", tuple(rng.uniform(size=5)), tuple(range(5)))
        for name in ("a", "b")
        for seed in range(4)
    ]
    for row in summarize(runs, Direction.MINIMIZE):
        bests = [min(r.scores) for r in runs if r.strategy == row.strategy]
        assert row.best_by_seed == dict(enumerate(bests))
        assert row.mean == pytest.approx(np.mean(bests))
        assert row.std == pytest.approx(np.std(bests, ddof=1))


def test_regression_only_beyond_the_spread() -> None:
    before = {
        "p": [
            {"strategy": "a", "mean": 1.0, "std": 0.1},
            {"strategy": "b", "mean": 1.0, "std": 0.1},
        ]
    }
    after = {
        "p": [
            {"strategy": "a", "mean": 1.05, "std": 0.1},
            {"strategy": "b", "mean": 1.3, "std": 0.1},
        ]
    }
    found = find_regressions(after, before, {"p": Direction.MINIMIZE})
    assert [(r.problem, r.strategy) for r in found] == [("p", "b")]
    # The same change is an improvement when higher is better.
    assert find_regressions(after, before, {"p": Direction.MAXIMIZE}) == []


def _images(html: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([^"]+)"', html)]


def test_experiment_files_hold_the_table_and_inline_plots(tmp_path: Path) -> None:
    runs = [SeedRun("random", s, f"r{s}", (0.2 + s / 10, 0.5), (1.0, 2.0)) for s in range(3)] + [
        SeedRun("tpe", s, f"t{s}", (0.6, 0.7 + s / 100), (1.5, 3.0)) for s in range(3)
    ]
    files = experiment_files("exp", runs, direction=Direction.MAXIMIZE, metric="accuracy")
    written = write_files(str(tmp_path), files)
    assert sorted(written) == sorted(files)
    assert Path(written["best_vs_trials.png"]).read_bytes().startswith(PNG)
    html = Path(written["report.html"]).read_text()
    assert len(_images(html)) == 2 and all(i.startswith(PNG) for i in _images(html))
    assert "0.71" in html and "statistics" not in html  # tpe's mean: (0.70 + 0.71 + 0.72) / 3
    csv_rows = Path(written["summary.csv"]).read_text().splitlines()
    assert csv_rows[0].startswith("strategy,seeds,mean,std") and len(csv_rows) == 3
    assert statistics.fmean([0.7, 0.71, 0.72]) == pytest.approx(float(csv_rows[2].split(",")[2]))


def test_job_report_from_result_files(tmp_path: Path) -> None:
    import json

    trials = [_trial(f"{i:04d}", 0.1 * i, 10.0**-i) for i in range(1, 5)]
    curves = {
        t.trial_id: [{"step": s, "time": s, "accuracy": s * 0.1} for s in range(3)] for t in trials
    }
    (tmp_path / "trials.json").write_text(json.dumps([t.to_dict() for t in trials]))
    (tmp_path / "curves.json").write_text(json.dumps(curves))
    best = {"job_id": "j", "status": "completed", "metric": "accuracy", "mode": "maximize"}
    (tmp_path / "best.json").write_text(json.dumps(best))
    html = Path(write_job_report(read_job(str(tmp_path)))).read_text()
    assert "Best configuration" in html and "Leaderboard" in html
    assert len(_images(html)) == 3  # best so far, learning curves, score against each hp
    assert html.index("0004") < html.index("0001")  # the best (0.4) leads the leaderboard


def test_missing_matplotlib_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes the import fail as if matplotlib were not installed.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ReportingUnavailable, match=r"ultron-automl\[report\]"):
        require_matplotlib()


def test_the_score_plot_takes_a_conditional_space() -> None:
    """Momentum absent under Adam leaves that trial out of momentum's panel; a list of layers
    is plotted by its length."""
    from ultron.reporting.plots import score_vs_hyperparameters

    configs = [
        {"optimizer": "adam", "layers": [{"width": 32}]},
        {"optimizer": "sgd", "momentum": 0.9, "layers": [{"width": 32}, {"width": 64}]},
        {"optimizer": "sgd", "momentum": 0.5, "layers": [{"width": 16}]},
    ]
    png = score_vs_hyperparameters(configs, [0.3, 0.2, 0.4], "loss")
    assert png.startswith(b"\x89PNG")


def test_job_report_shows_each_exploit_of_population_based_training() -> None:
    from dataclasses import replace

    from ultron.reporting import job_report_html

    step = {
        "step": 4,
        "from": "0002",
        "value": 0.1,
        "from_value": 0.7,
        "config_before": {"lr": 0.001},
        "config_after": {"lr": 0.012},
    }
    trials = [replace(_trial("0001", 0.8, 0.012), lineage=[step]), _trial("0002", 0.7, 0.01)]
    html = job_report_html("pbt", trials, {}, direction=Direction.MAXIMIZE, metric="accuracy")
    lineage = html[html.index("Lineage (population-based training)") :]
    assert "0002" in lineage and "0.012" in lineage and "0.001" in lineage
    plain = job_report_html(
        "j", [_trial("0001", 0.8, 0.1)], {}, direction=Direction.MAXIMIZE, metric="a"
    )
    assert "Lineage" not in plain


def test_a_report_with_a_note_for_its_plots_draws_none_and_keeps_every_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fully cached job's report (finalize): the tables of the full report, the note where
    the plots were, and no matplotlib at all (absent here: a None entry fails its import)."""
    from dataclasses import replace

    from ultron.algorithms.objectives import Goal
    from ultron.reporting import job_report_html

    trials = [
        replace(_trial("0001", 0.8, 0.1), metrics={"a": 0.8, "b": 2.0}),
        replace(_trial("0002", 0.7, 0.01), metrics={"a": 0.7, "b": 1.0}),
    ]
    goals = (Goal("a", Direction.MAXIMIZE), Goal("b", Direction.MINIMIZE))
    args = ("j", trials, {"0001": [{"step": 1, "a": 0.5}]})
    drawn = job_report_html(*args, direction=Direction.MAXIMIZE, metric="a", goals=goals)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    noted = job_report_html(
        *args, direction=Direction.MAXIMIZE, metric="a", goals=goals, plots_note="drawn later"
    )
    assert "<img" not in noted and "<p>drawn later</p>" in noted

    def tables(page: str) -> list[str]:
        return re.findall(r"<table>.*?</table>", page)

    assert tables(noted) == tables(drawn) and len(tables(drawn)) == 3  # best, Pareto, board
    assert drawn.count("<img") == 4  # Pareto front, best so far, curves, score against hp
