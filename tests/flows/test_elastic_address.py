"""An elastic job on a Dask scheduler that runs already (``cluster: {type: address}``): workers
that join the scheduler while the job runs are used once the job is scaled up to them."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

import ultron
from tests.flows.dask_processes import DaskProcesses
from tests.flows.elastic import (
    assert_scaled_up_then_down,
    scaling,
    timed_spec,
    up_then_down,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


@pytest.fixture
def scheduler(dask_processes: DaskProcesses) -> tuple[str, Callable[[], None]]:
    """``dask scheduler`` and one ``dask worker`` on loopback: its address, and a function
    that starts one more worker (one thread) there."""
    address = dask_processes.scheduler()
    dask_processes.worker()
    return address, dask_processes.worker


def test_an_address_job_uses_workers_that_join_when_scaled(
    tmp_path: Path, redis_url: str, scheduler: tuple[str, Callable[[], None]]
) -> None:
    address, add_worker = scheduler
    job_id = f"elastic-address-{uuid.uuid4().hex[:8]}"

    # Two more workers join the scheduler as the job starts; it uses them once scaled to 3.
    add_worker()
    add_worker()
    client = redis.Redis.from_url(redis_url)
    # Down as soon as a round ran 3 at once: rounds of 1 follow, started after the lease shrank.
    steps = up_then_down(client, job_id, done_first=0)
    driver, scaled = scaling(client, job_id, steps, redis_url)
    spec = timed_spec(tmp_path, redis_url, cluster={"type": "address", "address": address})
    result = ultron.run(spec, job_id=job_id)  # the batch loop: rounds of `parallelism` trials
    driver.join(timeout=10)
    assert_scaled_up_then_down(result, scaled)
