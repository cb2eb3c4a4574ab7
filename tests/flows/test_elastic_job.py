"""Elastic jobs on this machine's cluster (``local``): scaled up and down while they run, and
started with fewer trials than asked (``min_parallelism``) while another job holds units."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest
import redis

import ultron
import ultron.api
from tests.flows.elastic import (
    assert_scaled_up_then_down,
    done,
    most_at_once,
    scaling,
    spans_of,
    timed_spec,
    up_then_down,
    wait_for,
)
from ultron.limiter.lease_keeper import LeaseKeeper
from ultron.limiter.limits import set_tenant_max_units
from ultron.limiter.resource_limiter import ResourceLimiter

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


def test_a_local_job_scales_up_then_down(tmp_path: Path, redis_url: str) -> None:
    job_id = f"elastic-local-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    driver, scaled = scaling(client, job_id, up_then_down(client, job_id), redis_url)
    result = ultron.run(timed_spec(tmp_path, redis_url, loop="async"), job_id=job_id)
    driver.join(timeout=10)
    assert_scaled_up_then_down(result, scaled)


def test_min_parallelism_starts_with_what_is_free_and_grows(tmp_path: Path, redis_url: str) -> None:
    tenant = f"elastic-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    set_tenant_max_units(client, tenant, 4)
    other = ResourceLimiter(client, max_units=64, tenant=tenant, tenant_max_units=4)
    holder = other.acquire("another-job", 2)
    assert holder is not None
    keeper = LeaseKeeper(other, holder).start()  # held as long as the test wants
    job_id = f"elastic-min-{uuid.uuid4().hex[:8]}"
    released: list[float] = []

    def release_after_first_trials() -> None:
        wait_for(lambda: done(client, job_id) >= 2, "the first two trials")
        released.append(time.time())
        keeper.stop()
        other.release(holder)

    thread = threading.Thread(target=release_after_first_trials, daemon=True)
    thread.start()
    try:
        spec = timed_spec(
            tmp_path, redis_url, loop="async", tenant=tenant, parallelism=4, min_parallelism=1,
            num_iterations=10, search_space={"x": [float(x) for x in range(10)], "sleep": [2.0]},
        )  # fmt: skip
        result = ultron.run(spec, job_id=job_id)
    finally:
        keeper.stop()
        other.release(holder)
        set_tenant_max_units(client, tenant, None)
    thread.join(timeout=10)
    assert result.status == "completed" and len(result.trials) == 10
    spans = spans_of(result)
    assert most_at_once(spans, 0, released[0]) == 2  # started with the 2 free units
    assert most_at_once(spans, released[0], float("inf")) == 4  # grew once they were released
