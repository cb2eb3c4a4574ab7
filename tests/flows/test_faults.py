"""Trial failures, classified: crashes retried, user errors recorded, timeouts stopped."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

import ultron
from ultron.errors import JobFailedError
from ultron.trial_records import TrialStatus

TOY = Path(__file__).parents[1] / "data" / "toy"

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


def _spec(tmp_path: Path, redis_url: str, behaviours: list[str], **extra: object) -> dict:
    return {
        "name": "faults",
        "code": str(TOY),
        "model": "toy_model:Behaves",
        "search_space": {"behaviour": behaviours, "tag": [uuid.uuid4().hex]},
        "strategy": "grid",
        "num_iterations": len(behaviours),
        "parallelism": 2,
        "objective": {"metric": "loss"},
        "storage": str(tmp_path / "runs"),
        "redis_url": redis_url,
        **extra,
    }


def test_each_failure_is_classified_and_the_job_completes(tmp_path: Path, redis_url: str) -> None:
    behaviours = ["ok", "exit_once", "raise", "hang"]
    result = ultron.run(
        _spec(tmp_path, redis_url, behaviours, trial_timeout=8, retries=1, max_failed_share=0.5)
    )
    assert result.status == "completed"
    by = {t.hyperparameters["behaviour"]: t for t in result.trials}
    assert (by["ok"].status, by["ok"].attempts) == (TrialStatus.COMPLETED, 1)
    # os._exit(1) in the first attempt only: an infrastructure failure, retried, then fine.
    assert (by["exit_once"].status, by["exit_once"].attempts) == (TrialStatus.COMPLETED, 2)
    # An exception in score: the user's error, recorded with its traceback, not retried.
    assert (by["raise"].status, by["raise"].attempts) == (TrialStatus.FAILED, 1)
    assert "ValueError: this configuration always fails" in (by["raise"].traceback or "")
    # Past trial_timeout: stopped and recorded.
    assert by["hang"].status is TrialStatus.TIMEOUT
    assert "trial_timeout" in (by["hang"].error or "")


def test_job_fails_when_too_many_trials_fail_and_says_why(tmp_path: Path, redis_url: str) -> None:
    with pytest.raises(JobFailedError) as info:
        ultron.run(
            _spec(tmp_path, redis_url, ["raise", "ok", "nan", "no_metric"], max_failed_share=0.25),
            job_id=f"too-many-failures-{uuid.uuid4().hex[:6]}",
        )
    message = str(info.value)
    assert "more than max_failed_share=0.25" in message and "Fix:" in message
    (run_dir,) = (tmp_path / "runs").iterdir()
    best = json.loads((run_dir / "best.json").read_text())
    assert best["status"] == "failed" and "JobFailedError" in best["error"]
