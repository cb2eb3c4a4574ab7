"""One whole job with two objectives and a constraint (examples/multiobjective): the Pareto front
reaches ``HPOResult.pareto``, ``best.json``, the report and the summary artifact, and the
infeasible trials are marked in their rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ultron
from ultron.paths import artifact_key

EXAMPLE = Path(__file__).parents[2] / "examples" / "multiobjective"

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


def _summary_artifact(job_id: str) -> str:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    key = artifact_key(job_id, "summary")
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key]))
        )
    return str(found[0].data)


def test_a_job_with_two_objectives_and_a_constraint_reports_its_front(
    tmp_path: Path, redis_url: str
) -> None:
    result = ultron.run(
        {
            "name": "pareto",
            "code": str(EXAMPLE / "code"),
            "model": "accuracy_latency.toy:Model",
            # Widths 0.5, 0.9 (infeasible: memory 2900 MB), 0.2 and 0.5 again at dropout 0.3.
            "search_space": {"width": [0.2, 0.5, 0.9], "dropout": [0.3]},
            "strategy": "grid",
            "num_iterations": 3,
            "parallelism": 2,
            "objectives": [
                {"metric": "accuracy", "mode": "max"},
                {"metric": "latency_ms", "mode": "min"},
            ],
            "constraints": [{"metric": "memory_mb", "max": 2000}],
            "redis_url": redis_url,
            "storage": str(tmp_path / "runs"),
        }
    )
    assert result.status == "completed", result
    widths = {t.trial_id: t.hyperparameters["width"] for t in result.trials}
    assert sorted(widths[t.trial_id] for t in result.pareto) == [0.2, 0.5]
    assert result.best_config == {"width": 0.5, "dropout": 0.3}  # the best feasible accuracy
    runs = Path(result.results_url)
    best = json.loads((runs / "best.json").read_text())
    assert sorted(p["trial_id"] for p in best["pareto"]) == sorted(
        t.trial_id for t in result.pareto
    )
    rows = json.loads((runs / "trials.json").read_text())
    assert {r["hyperparameters"]["width"]: r["feasible"] for r in rows} == {
        0.2: True,
        0.5: True,
        0.9: False,
    }
    assert "Pareto front (2 trials)" in (runs / "report.html").read_text()
    summary = _summary_artifact(result.job_id)
    assert "Pareto front (2 trials" in summary and "Infeasible trials: 1 of 3" in summary
