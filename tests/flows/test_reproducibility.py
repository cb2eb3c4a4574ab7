"""Batch mode is reproducible: the same spec and seed give the same trial table, scores
included, for the quickstart with ``deterministic: true``; another seed gives another table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import ultron
from ultron.master.strategy import build_strategy
from ultron.spec.loader import load_spec

REPO = Path(__file__).parents[2]
QUICKSTART = REPO / "examples" / "quickstart"

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


def _spec(tmp_path: Path, seed: int) -> dict[str, Any]:
    spec = yaml.safe_load((QUICKSTART / "job.yaml").read_text())
    spec["search_space"]["epochs"] = [3]  # the model reads it: short trials
    return spec | {
        "code": str(QUICKSTART / "code"),
        "seed": seed,
        "loop": "batch",
        "deterministic": True,
        "cache": False,  # every run trains every trial: nothing is answered from a cache
        "num_iterations": 4,
        "parallelism": 2,
        "storage": str(tmp_path / "runs"),
    }


def _table(result: ultron.HPOResult) -> list[tuple[Any, ...]]:
    return [(t.trial_id, t.hyperparameters, str(t.status), t.score) for t in result.trials]


def test_same_seed_same_table_other_seed_other_table(tmp_path: Path, redis_url: str) -> None:
    first = ultron.run(_spec(tmp_path, 11), redis_url=redis_url)
    again = ultron.run(_spec(tmp_path, 11), redis_url=redis_url)
    assert first.job_id != again.job_id
    assert all(t.status.value == "completed" for t in first.trials + again.trials)
    assert _table(first) == _table(again)  # same configurations, order and scores
    assert len({t.score for t in first.trials}) > 1  # the scores depend on the configuration

    # Another seed: the job's strategy proposes other configurations from the first round on
    # (tests/flows/test_experiment.py runs jobs of three seeds and compares their tables).
    def rounds(seed: int) -> list[dict[str, Any]]:
        strategy = build_strategy(load_spec(_spec(tmp_path, seed)))
        return [
            *strategy.sample_hyperparameter_candidates(2),
            *strategy.sample_hyperparameter_candidates(2),
        ]

    assert rounds(11) == [t.hyperparameters for t in first.trials]  # what the jobs ran
    assert rounds(12) != rounds(11)
