"""Early stopping in real jobs: ASHA on a real PyTorch model, and a model that does not listen."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

import ultron
from ultron.trial_records import TrialStatus

REPO = Path(__file__).parents[2]
TOY = REPO / "tests" / "data" / "toy"

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


def _epochs(result: ultron.HPOResult) -> int:
    curves = json.loads(Path(result.files["curves.json"]).read_text())
    return sum(len(curve) for curve in curves.values())


def test_asha_trains_fewer_epochs_and_finds_about_the_best(tmp_path: Path, redis_url: str) -> None:
    quickstart = REPO / "examples" / "quickstart" / "job.yaml"
    common = {"redis_url": redis_url, "storage": str(tmp_path / "runs"), "loop": "async"}
    spec = ultron.JobSpec.model_validate(
        {**_load(quickstart), "code": str(quickstart.parent / "code")}
    )
    space = spec.model_dump(mode="json")["search_space"]

    def run(tag: str, **extra: object) -> ultron.HPOResult:
        # A fresh one-value hyper-parameter per run keeps the score cache out of the comparison
        # while the strategy draws exactly the same configurations in both runs.
        return ultron.run(spec, search_space={**space, "tag": [tag]}, **common, **extra)

    full = run(uuid.uuid4().hex)
    asha = run(
        uuid.uuid4().hex,
        early_stopping={
            "type": "asha",
            "max_resource": 15,
            "min_resource": 1,
            "reduction_factor": 3,
            "grace_period": 60,
        },
    )
    assert len(full.trials) == len(asha.trials) == 12
    assert _epochs(full) == 12 * 15
    stopped = [t for t in asha.trials if t.status is TrialStatus.STOPPED]
    assert stopped, "ASHA stopped no trial"
    assert _epochs(asha) < _epochs(full)
    assert asha.best_score is not None and full.best_score is not None
    assert asha.best_score >= full.best_score - 0.03  # within tolerance of the best


def test_a_model_that_ignores_stop_is_killed_after_the_grace_period(
    tmp_path: Path, redis_url: str
) -> None:
    result = ultron.run(
        {
            "name": "stubborn",
            "code": str(TOY),
            "model": "toy_model:Stubborn",
            "search_space": {"x": [1.0, 2.0, 8.0, 9.0], "steps": [20], "tag": [uuid.uuid4().hex]},
            "strategy": "grid",
            "num_iterations": 4,
            "parallelism": 2,
            "objective": {"metric": "loss"},
            "early_stopping": {
                "type": "median",
                "max_resource": 20,
                "min_resource": 2,
                "grace_period": 1.0,
                "options": {"min_trials": 1},
            },
            "storage": str(tmp_path / "runs"),
            "redis_url": redis_url,
        }
    )
    by_x = {t.hyperparameters["x"]: t for t in result.trials}
    assert by_x[1.0].status is TrialStatus.COMPLETED  # the best runs to its end
    # The seeded grid runs 8 and 1 first, then 2, then 9: by then the median of the others'
    # averages is 2, so 9 is stopped, and being stubborn it is killed.
    worst = by_x[9.0]
    assert worst.status is TrialStatus.STOPPED
    assert "grace period" in (worst.error or "")
    assert worst.score == 9.0  # the last value it reported
    assert worst.duration < 3.5  # killed long before its 20 steps of 0.2 s (4 s) were done
    assert result.best_config is not None and result.best_config["x"] == 1.0


def _load(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())


def test_suspended_trials_resume_from_their_checkpoint_without_repeating_steps(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("TOY_CALLS_FILE", str(calls))
    result = ultron.run(
        {
            "name": "hyperband",
            "code": str(TOY),
            "model": "toy_model:Epochs",
            "search_space": {
                "x": {"type": "uniform", "low": 0, "high": 10},
                "epochs": [9],
                "epoch_s": [0.3],
                "tag": [uuid.uuid4().hex],
            },
            "num_iterations": 10,
            "parallelism": 2,
            "objective": {"metric": "loss"},
            "early_stopping": {"type": "hyperband", "max_resource": 9, "reduction_factor": 3},
            "storage": str(tmp_path / "runs"),
            "redis_url": redis_url,
        }
    )
    assert result.status == "completed" and len(result.trials) == 10
    log = [json.loads(line) for line in calls.read_text().splitlines()]
    steps = [(e["x"], e["epoch"]) for e in log]
    assert len(steps) == len(set(steps))  # no step of any trial trained twice
    resumed = {e["x"] for e in log if e["resume"]}
    assert resumed, "no trial was suspended and resumed"
    for x in resumed:  # a resumed trial continues where it stopped
        epochs = [e["epoch"] for e in log if e["x"] == x]
        assert epochs == list(range(len(epochs)))
    assert sum(len(v) for v in [steps]) < 10 * 9  # brackets stopped some trials early
    assert all(t.status in (TrialStatus.COMPLETED, TrialStatus.STOPPED) for t in result.trials)
