"""Acceptance: 20 jobs of 3 tenants at once against limits that fit only a few at a time.

Each job is what ``tasks/acquire_resources.py`` does with the real limiter (reads the global
and its tenant's limits from Redis, waits in ``acquire_blocking``), then holds its units for a
random short time and releases them: whole Prefect jobs would take minutes here and add
nothing to what the limiter decides. A sampler watches the limiter's books and a counter the
jobs keep themselves, throughout.

This is where the property is shown: the global limit and each tenant's never exceeded (by the
books and by the jobs' own count), every job granted, first come first served within a tenant,
turns across tenants, nothing left held or queued. ``tests/flows/test_tenant_jobs_load.py``
runs three real jobs for the wiring only (a job's tenant and the stored limits reach the
limiter; a job holds its lease while it runs).
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass

import numpy as np
import pytest
import redis

from ultron.limiter.limits import (
    read_max_units,
    read_tenant_max_units,
    set_max_units,
    set_tenant_max_units,
)
from ultron.limiter.resource_limiter import ResourceLimiter

MAX_UNITS = 6
TENANT_LIMITS = {"team-a": 3, "team-b": 4, "team-c": None}
JOBS = {"team-a": 9, "team-b": 7, "team-c": 4}  # 20 jobs, tenant a sending the most
SEED = 14


@dataclass
class _Job:
    job_id: str
    tenant: str
    units: int
    hold_s: float
    waited_s: float = -1.0
    granted_at: float = -1.0  # the Redis server's clock, seconds
    error: str = ""


def _run_job(url: str, namespace: str, job: _Job, start: threading.Event, t0: list[float]) -> None:
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        limiter = ResourceLimiter(  # as acquire_resources builds it
            client,
            max_units=read_max_units(client, default=64, namespace=namespace),
            namespace=namespace,
            tenant=job.tenant,
            tenant_max_units=read_tenant_max_units(client, job.tenant, namespace=namespace),
        )
        start.wait()
        lease = limiter.acquire_blocking(
            job.job_id, job.units, ttl_s=10, timeout_s=120, retry_delay_s=0.01, max_delay_s=0.05
        )
        job.waited_s = time.monotonic() - t0[0]
        job.granted_at = limiter.holders()[job.job_id].since
        client.incrby(f"{namespace}:holding:{job.tenant}", job.units)
        time.sleep(job.hold_s)
        client.decrby(f"{namespace}:holding:{job.tenant}", job.units)
        limiter.release(lease)
    except Exception as exc:  # reported by the test, which checks every job
        job.error = repr(exc)
    finally:
        client.close()


def test_twenty_jobs_of_three_tenants_share_fairly_within_the_limits(redis_url: str) -> None:
    namespace = f"test-{uuid.uuid4().hex[:12]}"
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    set_max_units(client, MAX_UNITS, namespace=namespace)
    for tenant, limit in TENANT_LIMITS.items():
        set_tenant_max_units(client, tenant, limit, namespace=namespace)
    rng = np.random.default_rng(SEED)
    jobs = [
        _Job(
            f"{tenant}-{i}",
            tenant,
            int(rng.integers(1, min(3, TENANT_LIMITS[tenant] or 3) + 1)),
            float(rng.uniform(0.05, 0.3)),
        )
        for tenant, count in JOBS.items()
        for i in range(count)
    ]
    monitor = ResourceLimiter(client, max_units=MAX_UNITS, namespace=namespace)
    # A platform job holds every unit while the 20 are submitted, so that each one waits and
    # the order in which they came is the queue's (read below); its release starts the race.
    gate = monitor.acquire("maintenance", MAX_UNITS, ttl_s=60)
    assert gate is not None
    start, t0 = threading.Event(), [0.0]
    threads = [
        threading.Thread(target=_run_job, args=(redis_url, namespace, job, start, t0))
        for job in jobs
    ]
    for thread in threads:
        thread.start()
    t0[0] = time.monotonic()
    start.set()  # all 20 at once
    deadline = time.monotonic() + 60
    while len(monitor.waiters()) < len(jobs) and time.monotonic() < deadline:
        time.sleep(0.01)
    arrival = [waiting.job_id for waiting in monitor.waiters()]
    assert sorted(arrival) == sorted(job.job_id for job in jobs)

    samples: list[tuple[int, dict[str, int], dict[str, int]]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            held = monitor.holders().values()
            by_tenant = {t: sum(h.units for h in held if h.tenant == t) for t in TENANT_LIMITS}
            counted = {t: int(client.get(f"{namespace}:holding:{t}") or 0) for t in TENANT_LIMITS}
            samples.append((sum(h.units for h in held), by_tenant, counted))
            time.sleep(0.002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    monitor.release(gate)
    for thread in threads:
        thread.join(timeout=120)
    done.set()
    sampler.join()

    assert [job.error for job in jobs if job.error] == []  # every job was granted, none failed
    assert all(job.waited_s >= 0 for job in jobs)
    assert len(samples) > 50  # sampled throughout, not once
    assert max(total for total, _, _ in samples) <= MAX_UNITS
    assert max(sum(counted.values()) for _, _, counted in samples) <= MAX_UNITS
    for tenant, limit in TENANT_LIMITS.items():
        peak = max(max(by[tenant], counted[tenant]) for _, by, counted in samples)
        assert peak <= (limit or MAX_UNITS), tenant
    assert max(sum(by.values()) for _, by, _ in samples) >= 4  # several jobs at once
    by_id = {job.job_id: job for job in jobs}
    for tenant in TENANT_LIMITS:  # first come first served within each tenant
        mine = [by_id[job_id] for job_id in arrival if by_id[job_id].tenant == tenant]
        grants = [job.granted_at for job in mine]
        assert grants == sorted(grants), (tenant, [job.job_id for job in mine], grants)
    # Turns across tenants: none waits behind another's queue (team-a sent 9 jobs first or not).
    order = [job.tenant for job in sorted(jobs, key=lambda job: job.granted_at)]
    assert all(order.index(tenant) <= 4 for tenant in TENANT_LIMITS), order
    assert monitor.in_use() == 0 and monitor.holders() == {} and monitor.waiters() == []
    assert all(int(client.get(f"{namespace}:holding:{t}") or 0) == 0 for t in TENANT_LIMITS)

    print("\npeak queue wait per tenant (from submission to grant):")
    for tenant in TENANT_LIMITS:
        waits = [job.waited_s for job in jobs if job.tenant == tenant]
        print(
            f"  {tenant}: {len(waits)} jobs, limit {TENANT_LIMITS[tenant] or 'none'}, "
            f"peak {max(waits):.2f} s, mean {sum(waits) / len(waits):.2f} s"
        )
    client.close()


@pytest.fixture(autouse=True)
def _quiet_limiter_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING", logger="ultron.limiter.resource_limiter")
