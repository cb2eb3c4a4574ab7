"""An elastic job on SLURM: scaled up, worker jobs are submitted; scaled down, the worker jobs
of the workers that went idle are cancelled while the last trials still run."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

import ultron
from tests.flows.elastic import (
    assert_scaled_up_then_down,
    scaling,
    spans_of,
    timed_spec,
    up_then_down,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]

# More than the other backends' jobs: trials go on one at a time while SLURM starts the new
# worker jobs (seconds each on a small machine).
TRIALS = 20


def test_a_slurm_job_adds_and_cancels_worker_jobs(
    tmp_path: Path, redis_url: str, slurm: Any
) -> None:
    name = f"elastic-slurm-{uuid.uuid4().hex[:6]}"  # in the worker jobs' names
    job_id = f"{name}-job"
    client = redis.Redis.from_url(redis_url)
    counts: list[tuple[float, int]] = []  # (when, worker jobs queued or running)
    stop = threading.Event()

    def count_worker_jobs() -> None:
        while not stop.wait(0.2):
            lines = slurm.squeue("--format=%j %t")
            ours = [line for line in lines if name in line and not line.endswith(" CG")]
            counts.append((time.time(), len(ours)))

    counter = threading.Thread(target=count_worker_jobs, daemon=True)
    counter.start()
    # Down once the new worker jobs run trials: a trial started since ran with two others.
    steps = up_then_down(client, job_id, done_first=0)
    driver, scaled = scaling(client, job_id, steps, redis_url)
    spec = timed_spec(
        tmp_path, redis_url, trials=TRIALS, name=name, loop="async",
        cluster={"type": "slurm", "walltime": "00:15:00"},
    )  # fmt: skip
    try:
        result = ultron.run(spec, job_id=job_id)
        driver.join(timeout=10)
    finally:
        stop.set()
        counter.join(timeout=5)
    assert_scaled_up_then_down(result, scaled, TRIALS)
    down_at = scaled.asked[1][0]
    spans = spans_of(result)
    assert max(n for _, n in counts) == 3  # two worker jobs submitted on the way up
    last_end = max(end for _, end in spans)
    # Scaled down: the idle workers' jobs were cancelled while the last trial still ran.
    assert any(n == 1 for when, n in counts if down_at < when < last_end)
    assert slurm.squeue() == []  # and finalize left none
