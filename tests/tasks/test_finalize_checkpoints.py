"""A job whose checkpoint never reached the store says so: the summary names it, best.json warns."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

import ultron

TOY = Path(__file__).parents[1] / "data" / "toy"

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


def test_a_checkpoint_that_never_reached_the_store_is_named_in_the_summary(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOY_CALLS_FILE", str(tmp_path / "calls.jsonl"))
    monkeypatch.setenv("ULTRON_CHECKPOINT_FLUSH_S", "1")  # the failure is deterministic
    job_id = f"unsynced-{uuid.uuid4().hex[:8]}"
    store = tmp_path / "store"
    blocked = store / job_id / "checkpoints" / "0000"
    blocked.parent.mkdir(parents=True)
    blocked.write_text("a file where the trial's folder goes: the store refuses its writes")
    result = ultron.run(
        {
            "name": "unsynced",
            "code": str(TOY),
            "model": "toy_model:Checkpointed",
            "search_space": {"x": [1.0], "tag": [uuid.uuid4().hex]},
            "num_iterations": 1,
            "storage": str(store),
            "redis_url": redis_url,
        },
        job_id=job_id,
    )
    assert result.status == "completed"  # the trial scored; its checkpoints are what is missing
    named = {(c["trial_id"], c["checkpoint"]) for c in result.unsynced_checkpoints}
    assert named == {("0000", "epoch-0004"), ("0000", "epoch-0005")}  # keep_last=2 of 6
    (warning,) = result.warnings
    assert "trial 0000 checkpoint epoch-0005" in warning and "Fix:" in warning
    best = json.loads((store / job_id / "best.json").read_text())
    assert best["status"] == "completed" and best["warnings"] == result.warnings
    assert best["unsynced_checkpoints"] == result.unsynced_checkpoints
    for entry in result.unsynced_checkpoints:  # kept on the local disk, where the warning says
        assert Path(entry["local_path"], "COMPLETE").exists()
