"""The quickstart through ``cluster: {type: slurm}``: two Dask workers as SLURM jobs on a real
(one-node, loopback) SLURM cluster; one worker job is cancelled with ``scancel`` mid-trial."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

import ultron
from ultron.redis import keys
from ultron.trial_records import TrialStatus

QUICKSTART = Path(__file__).parents[2] / "examples" / "quickstart" / "job.yaml"

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


def _trials_mid_way(client: redis.Redis, job_id: str) -> int:
    """How many trials have reported some of their 15 epochs and not the last few: with two
    single-trial workers, two such trials mean both workers are in the middle of one."""
    pattern = keys.trial_reports(job_id, "*")
    # One SCAN round trip per 10,000 keys, not per 10 (Redis's default COUNT): by this test the
    # session's Redis holds the keys of every earlier test, and a poll that takes seconds can
    # miss the few seconds in which both trials are mid-way.
    found = client.scan_iter(match=pattern, count=10_000)
    return sum(2 <= int(client.llen(key)) <= 10 for key in found)


def test_quickstart_on_slurm_survives_a_cancelled_worker_job(
    tmp_path: Path, redis_url: str, slurm: Any
) -> None:
    job_id = f"slurm-quickstart-{uuid.uuid4().hex[:6]}"
    client = redis.Redis.from_url(redis_url)
    cancelled: dict[str, Any] = {}

    def cancel_a_worker_job() -> None:
        deadline = time.monotonic() + 400
        while _trials_mid_way(client, job_id) < 2:
            if time.monotonic() > deadline:
                return
            time.sleep(0.1)
        jobs = subprocess.run(
            ["squeue", "--noheader", "--states=RUNNING", "--format=%i %j"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\n")
        ours = [line.split() for line in jobs if "quickstart-digits" in line]
        subprocess.run(["scancel", ours[0][0]], check=True)
        cancelled.update(job=ours[0][0], running=len(ours), names={name for _, name in ours})

    canceller = threading.Thread(target=cancel_a_worker_job, daemon=True)
    canceller.start()
    result = ultron.run(
        QUICKSTART,
        job_id=job_id,
        cluster={"type": "slurm", "walltime": "00:15:00"},
        num_iterations=6,  # three rounds of two: enough for a cancel mid-way, in CI's budget
        cache=False,  # train every trial, though an earlier test scored the quickstart's
        redis_url=redis_url,
        storage=str(tmp_path / "runs"),
    )
    canceller.join(timeout=5)

    assert cancelled.get("running") == 2, f"two worker jobs were not running: {cancelled}"
    assert result.status == "completed"
    assert len(result.trials) == 6  # num_iterations, each configuration once
    assert len({t.trial_id for t in result.trials}) == 6
    configs = {tuple(sorted(t.hyperparameters.items())) for t in result.trials}
    assert len(configs) == 6
    assert all(t.status is TrialStatus.COMPLETED and t.score is not None for t in result.trials)
    # The trial its cancelled job was running failed once (the worker died) and was retried on
    # another worker; nothing else ran twice.
    assert sorted(t.attempts for t in result.trials) == [1] * 5 + [2]
    (retried,) = [t for t in result.trials if t.attempts == 2]
    curves = json.loads(Path(result.files["curves.json"]).read_text())
    steps = [report["step"] for report in curves[retried.trial_id]]
    assert steps[0] > 0 and steps[-1] == 14  # it resumed from its checkpoint, not epoch 0
    (job_name,) = cancelled["names"]
    assert all(str(t.worker).startswith(f"{job_name}-") for t in result.trials)  # SLURM's
    # finalize closed the cluster: no job of ours is queued, running or completing.
    assert slurm.squeue() == []
