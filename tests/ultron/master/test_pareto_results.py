"""A job's results with several objectives and constraints: the Pareto front in best.json and
HPOResult, the best feasible trial, infeasible trials marked in their rows, the leaderboard's
order, the strategy told metric dicts, and a cache entry answering only the metrics asked."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from ultron.algorithms.base import Direction
from ultron.algorithms.objectives import Bound, Goal
from ultron.master.core import _score
from ultron.master.results import HPOResult, best_trial, write_results
from ultron.master.score_cache import answer
from ultron.reporting import read_job, write_job_report
from ultron.trial_records import TrialResult, TrialStatus

GOALS = (Goal("accuracy", Direction.MAXIMIZE), Goal("latency_ms"))
MEMORY = (Bound("memory_mb", high=2000.0),)


def trial(i: int, width: float, status: TrialStatus = TrialStatus.COMPLETED) -> TrialResult:
    metrics = {
        "accuracy": math.sqrt(width),
        "latency_ms": 10 + 90 * width,
        "memory_mb": 200 + 3000 * width,
    }
    return TrialResult(
        f"{i:04d}", {"width": width}, status, score=metrics["accuracy"], metrics=metrics
    )


# 0003 (width 0.9) is the most accurate, and infeasible; 0004 is dominated by 0001.
TRIALS = [
    trial(0, 0.1),
    trial(1, 0.5),
    trial(2, 0.0, TrialStatus.FAILED),
    trial(3, 0.9),
    TrialResult(
        "0004",
        {"width": 0.6},
        TrialStatus.COMPLETED,
        score=0.4,
        metrics={"accuracy": 0.4, "latency_ms": 70.0, "memory_mb": 2000.0},
    ),
]


def test_best_json_holds_the_feasible_front_and_rows_mark_infeasible_trials(tmp_path: Path) -> None:
    files = write_results(
        str(tmp_path),
        trials=TRIALS,
        curves={},
        direction=Direction.MAXIMIZE,
        metric="accuracy",
        extra={},
        goals=GOALS,
        bounds=MEMORY,
    )
    best = json.loads(Path(files["best.json"]).read_text())
    assert [p["trial_id"] for p in best["pareto"]] == ["0000", "0001"]  # 0003 is infeasible
    assert best["pareto"][1]["objectives"] == {"accuracy": math.sqrt(0.5), "latency_ms": 55.0}
    assert best["best_trial"] == "0001"  # the best feasible by the first objective
    assert best["infeasible_trials"] == ["0003"]
    assert best["objectives"][0] == {"metric": "accuracy", "mode": "maximize"}
    rows = {r["trial_id"]: r for r in json.loads(Path(files["trials.json"]).read_text())}
    assert rows["0003"]["feasible"] is False and rows["0001"]["feasible"] is True
    assert "feasible" not in rows["0002"]  # a failed trial is not judged
    board = list(csv.DictReader(Path(files["leaderboard.csv"]).read_text().splitlines()))
    assert [r["trial_id"] for r in board] == ["0001", "0000", "0004", "0003"]
    assert [r["pareto_rank"] for r in board] == ["0", "0", "1", ""]
    assert [r["feasible"] for r in board] == ["True", "True", "True", "False"]
    assert {"accuracy", "latency_ms", "memory_mb", "width"} <= set(board[0])


def test_hpo_result_gives_the_front_and_the_best_feasible_trial() -> None:
    best = best_trial(TRIALS, Direction.MAXIMIZE, goals=GOALS, bounds=MEMORY)
    assert best is not None and best.trial_id == "0001"
    alone = best_trial(TRIALS, Direction.MAXIMIZE, bounds=MEMORY)  # one objective, constrained
    assert alone is not None and alone.trial_id == "0001"
    assert best_trial(TRIALS, Direction.MAXIMIZE).trial_id == "0003"  # type: ignore[union-attr]
    assert best_trial(TRIALS[3:4], Direction.MAXIMIZE, bounds=MEMORY) is None  # none feasible
    summary: dict[str, Any] = {
        "job_id": "j",
        "status": "completed",
        "best_config": best.hyperparameters,
        "best_score": best.score,
        "trials": [t.to_dict() for t in TRIALS],
        "results_url": "x",
        "files": {},
        "mode": "maximize",
        "pareto": ["0000", "0001"],
    }
    result = HPOResult.from_summary(summary)
    assert [t.trial_id for t in result.pareto] == ["0000", "0001"]
    assert result.pareto[1].metrics["latency_ms"] == 55.0


def test_the_report_draws_the_pareto_front(tmp_path: Path) -> None:
    write_results(
        str(tmp_path),
        trials=TRIALS,
        curves={},
        direction=Direction.MAXIMIZE,
        metric="accuracy",
        extra={"job_id": "j", "status": "completed"},
        goals=GOALS,
        bounds=MEMORY,
    )
    html = Path(write_job_report(read_job(str(tmp_path)))).read_text()
    assert "Pareto front (2 trials)" in html and 'alt="Pareto front"' in html
    assert "Best configuration (feasible)" in html


def test_the_strategy_is_told_the_asked_metrics() -> None:
    asked = ("accuracy", "latency_ms", "memory_mb")
    assert _score(TRIALS[1], asked) == TRIALS[1].metrics
    assert math.isnan(_score(TRIALS[2], asked))  # type: ignore[arg-type]
    assert _score(TRIALS[1]) == math.sqrt(0.5)


def test_a_cached_entry_answers_only_when_it_holds_every_metric_asked() -> None:
    entry = {"score": 0.9, "metrics": {"accuracy": 0.9, "latency_ms": 50.0}, "job_id": "j"}
    ask = {"metric": "accuracy", "enabled": True, "job_id": "k", "trial_id": "0"}
    assert answer(entry, **ask, also=("accuracy", "latency_ms")) is not None
    assert answer(entry, **ask, also=("accuracy", "latency_ms", "memory_mb")) is None
    assert answer(entry, **ask) is not None  # a job of one objective
