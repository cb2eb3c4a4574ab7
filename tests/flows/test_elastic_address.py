"""An elastic job on a Dask scheduler that runs already (``cluster: {type: address}``): workers
that join the scheduler while the job runs are used once the job is scaled up to them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import ultron
from tests.flows.elastic import (
    SETTLE_S,
    assert_each_once,
    done,
    most_at_once,
    ran_at_once,
    scaling,
    spans_of,
    timed_spec,
    wait_for,
)

DASK = str(Path(sys.executable).with_name("dask"))

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


@pytest.fixture
def scheduler(tmp_path: Path) -> Iterator[tuple[str, Callable[[], None]]]:
    """``dask scheduler`` and one ``dask worker`` on loopback: its address, and a function
    that starts one more worker (one thread) there."""
    scheduler_file = tmp_path / "scheduler.json"
    logs = (tmp_path / "dask.log").open("wb")
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> None:
        started.append(
            subprocess.Popen(
                [DASK, *args], stdout=logs, stderr=subprocess.STDOUT, start_new_session=True
            )
        )

    try:
        start(
            "scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", ":0",
            "--scheduler-file", str(scheduler_file),
        )  # fmt: skip
        wait_for(
            lambda: scheduler_file.exists() and bool(scheduler_file.read_text()), "a scheduler"
        )
        address = json.loads(scheduler_file.read_text())["address"]

        def add_worker() -> None:
            start(
                "worker", address, "--nthreads", "1", "--memory-limit", "0",
                "--no-dashboard", "--host", "127.0.0.1",
            )  # fmt: skip

        add_worker()
        yield address, add_worker
    finally:
        for proc in reversed(started):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        logs.close()


def test_an_address_job_uses_workers_that_join_when_scaled(
    tmp_path: Path, redis_url: str, scheduler: tuple[str, Callable[[], None]]
) -> None:
    address, add_worker = scheduler
    job_id = f"elastic-address-{uuid.uuid4().hex[:8]}"

    # Two more workers join the scheduler as the job starts; it uses them once scaled to 3.
    add_worker()
    add_worker()
    client = redis.Redis.from_url(redis_url)
    steps = [
        (lambda: done(client, job_id) >= 1, 3),
        (lambda: done(client, job_id) >= 6 and ran_at_once(client, job_id) >= 3, 1),
    ]
    driver, asked, errors = scaling(client, job_id, steps, redis_url)
    spec = timed_spec(tmp_path, redis_url, cluster={"type": "address", "address": address})
    result = ultron.run(spec, job_id=job_id)  # the batch loop: rounds of `parallelism` trials
    driver.join(timeout=10)
    assert not errors, errors
    assert_each_once(result)
    (up_at, _), (down_at, _) = asked
    spans = spans_of(result)
    assert most_at_once(spans, 0, up_at) == 1
    assert most_at_once(spans, up_at + SETTLE_S, down_at) == 3
    assert most_at_once(spans, down_at + SETTLE_S, float("inf")) <= 1
