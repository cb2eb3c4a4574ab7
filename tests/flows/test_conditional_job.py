"""A whole job over a conditional, variable-length space: what the model receives."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

import ultron
from ultron.trial_records import TrialStatus

TOY = Path(__file__).parents[2] / "tests" / "data" / "toy"

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


def test_a_conditional_space_reaches_the_model_with_only_its_active_parameters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("TOY_CALLS_FILE", str(calls))
    result = ultron.run(
        {
            "name": "conditional-space",
            "code": str(TOY),
            "model": "toy_model:Layered",  # raises on an inactive or a missing parameter
            "search_space": {
                "optimizer": ["adam", "sgd"],
                "momentum": {
                    "type": "uniform",
                    "low": 0,
                    "high": 0.99,
                    "when": {"optimizer": "sgd"},
                },
                "layers": {
                    "count": [1, 4],
                    "each": {"width": {"type": "int", "low": 16, "high": 256}},
                },
            },
            "strategy": "tpe",
            "num_iterations": 4,
            "parallelism": 2,
            "storage": str(tmp_path / "runs"),
            "redis_url": redis_url,
        }
    )
    assert [t.status for t in result.trials] == [TrialStatus.COMPLETED] * 4
    trained = [json.loads(line) for line in calls.read_text().splitlines()]
    assert len(trained) == 4
    for config in trained:  # as the model received it: nested, inactive ones absent
        assert ("momentum" in config) == (config["optimizer"] == "sgd")
        assert 1 <= len(config["layers"]) <= 4
    assert result.best_config is not None and isinstance(result.best_config["layers"], list)
    board = Path(result.files["leaderboard.csv"])
    rows = list(csv.DictReader(board.open()))
    assert all(isinstance(json.loads(row["layers"]), list) for row in rows)  # JSON, not repr
