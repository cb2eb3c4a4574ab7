"""Population-based training in a real job: every exploit is a copy of a checkpoint that a
trial wrote (the model checks each one it loads), and the lineage is in the rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ultron
from ultron.trial_records import TrialStatus

REPO = Path(__file__).parents[2]
TOY = REPO / "tests" / "data" / "toy"

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


def test_exploit_copies_a_checkpoint_a_trial_wrote_and_the_rows_keep_the_lineage(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls, registry = tmp_path / "calls.jsonl", tmp_path / "registry"
    registry.mkdir()
    monkeypatch.setenv("TOY_CALLS_FILE", str(calls))
    monkeypatch.setenv("TOY_REGISTRY", str(registry))
    result = ultron.run(
        {
            "name": "pbt",
            "code": str(TOY),
            "model": "toy_model:Population",
            "search_space": {"lr": [0.1, 1.0], "epochs": [4], "epoch_s": [0.1]},
            "strategy": "grid",
            "num_iterations": 2,
            "parallelism": 2,
            "objective": {"metric": "accuracy", "mode": "maximize"},
            "early_stopping": {"type": "pbt", "max_resource": 4, "options": {"interval": 2}},
            "storage": str(tmp_path / "runs"),
            "redis_url": redis_url,
        }
    )
    assert result.status == "completed" and len(result.trials) == 2
    assert result.unsynced_checkpoints == [] and result.warnings == []
    assert all(t.status is TrialStatus.COMPLETED for t in result.trials), [
        (t.trial_id, t.status, t.error, t.lineage) for t in result.trials
    ]
    loads = [json.loads(line) for line in calls.read_text().splitlines()]
    assert loads and all(entry["known"] for entry in loads)  # never a checkpoint no trial wrote
    copies = [e for e in loads if e["writer"] != e["trial"]]
    rows = {t.trial_id: t for t in result.trials}
    exploited = [t for t in result.trials if t.lineage]
    assert len(exploited) == 1 and len(copies) == 1  # population 2, one round: one exploit
    (row,) = exploited
    (step,) = row.lineage
    donor = rows[step["from"]]
    assert (copies[0]["trial"], copies[0]["writer"]) == (row.trial_id, donor.trial_id)
    # The donor's newest checkpoint when it paused: the boundary's or one written before it
    # heard the decision (a report's answer comes with the next report).
    copied = copies[0]["epoch"]
    assert step["step"] == 2 and 2 <= copied < 4
    assert step["config_before"]["lr"] == 0.1 and donor.hyperparameters["lr"] == 1.0
    assert row.hyperparameters == step["config_after"] and step["config_after"]["lr"] > 0.1
    # It went on from the donor's weights (1.0 per epoch) with its own new rate.
    assert row.score == pytest.approx(copied * 1.0 + (4 - copied) * step["config_after"]["lr"])
    table = json.loads(Path(result.files["trials.json"]).read_text())
    stored = [r for r in (table if isinstance(table, list) else table["trials"]) if r["lineage"]]
    assert stored and stored[0]["lineage"][0]["from"] == donor.trial_id
