"""The tenant limits wired through real jobs: 3 jobs of 2 tenants at once, limits that fit 2.

Each job is a whole ``ultron.run`` (Prefect flow, Dask ``LocalCluster``, a trial process) of one
0.5 s trial on one unit, in a process of its own, as tenants submit them, against a Redis
private to this test (the global limit it sets is no other test's) and the session's Prefect
server. Processes, not threads: a job owns its code's module names in its process while it
runs (``user_code``), so two jobs in one process interfere (seen here: ``dictionary changed
size during iteration`` over ``sys.modules``, a half-imported ``distributed.dashboard``).

This proves the wiring: a job's ``tenant`` and the limits stored in Redis reach the limiter
(``tasks/acquire_resources.py``), each job holds its lease while it runs and gives it back at
the end. ``team-a`` may hold one unit: its second job waits for its first although a unit is
free. The property under load (20 jobs of 3 tenants: the global and tenant limits never
exceeded, first come first served within a tenant, turns across tenants) is shown in seconds
on the limiter alone by ``tests/ultron/limiter/test_tenant_load.py``.

A platform "maintenance" lease holds every unit while the jobs are submitted: each of them
waits, and the limiter's queue gives the order in which they came. Its release starts the
race. A sampler reads the limiter's books every 50 ms until the last job ends: units in use,
globally and per tenant, and when each lease was granted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from ultron.limiter.limits import set_max_units, set_tenant_max_units
from ultron.limiter.resource_limiter import ResourceLimiter
from ultron.servers.redis_process import EmbeddedRedis

TOY = Path(__file__).parents[1] / "data" / "toy"
MAX_UNITS = 2
TENANT_LIMITS = {"team-a": 1, "team-b": None}
JOBS = {"team-a": 2, "team-b": 1}  # 3 jobs of one unit each

# One job: runs the spec (a JSON file) and writes its status and its trials' statuses.
DRIVER = """
import json, sys
import ultron

spec, job_id, out = sys.argv[1:4]
if __name__ == "__main__":
    result = ultron.run(json.load(open(spec)), job_id=job_id)
    trials = [str(t.status.value) for t in result.trials]
    json.dump({"status": str(result.status), "trials": trials}, open(out, "w"))
"""

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


@dataclass
class _Books:
    """What the sampler saw: (total, units per tenant) per sample, and each job's grant time."""

    samples: list[tuple[int, dict[str, int]]] = field(default_factory=list)
    granted_at: dict[str, float] = field(default_factory=dict)  # the Redis server's clock
    tenant_of: dict[str, str] = field(default_factory=dict)  # each lease's tenant


def _start(tenant: str, job_id: str, x: float, url: str, root: Path) -> subprocess.Popen[str]:
    from prefect.settings import get_current_settings

    spec = {
        "name": "tenant-load",
        "code": str(TOY),
        "model": "toy_model:Sleepy",
        "search_space": {"x": [x], "sleep": [0.5]},
        "num_iterations": 1,
        "parallelism": 1,
        "redis_url": url,
        "storage": str(root / "runs"),
        "acquire_timeout": 600,
        "tenant": tenant,
    }
    (root / f"{job_id}.json").write_text(json.dumps(spec))
    env = {**os.environ, "PREFECT_API_URL": str(get_current_settings().api.url)}
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(root / f"{job_id}.json"), job_id,
         str(root / f"{job_id}.out.json")],
        stdout=subprocess.DEVNULL,
        stderr=open(root / f"{job_id}.err", "w"),  # the child owns it
        text=True,
        env=env,
        cwd=root,
    )  # fmt: skip


def _sample(monitor: ResourceLimiter, books: _Books, done: threading.Event) -> None:
    while not done.is_set():
        held = monitor.holders()
        by_tenant = {t: sum(h.units for h in held.values() if h.tenant == t) for t in TENANT_LIMITS}
        books.samples.append((sum(h.units for h in held.values()), by_tenant))
        for job_id, holding in held.items():
            if job_id != "maintenance":
                books.granted_at.setdefault(job_id, holding.since)
                books.tenant_of.setdefault(job_id, holding.tenant)
        time.sleep(0.05)


def test_real_jobs_of_two_tenants_share_within_the_limits(
    tmp_path: Path,
) -> None:
    jobs = {
        f"{tenant}-job-{i}": (tenant, float(100 * n + i))
        for n, (tenant, count) in enumerate(JOBS.items())
        for i in range(count)
    }
    with EmbeddedRedis(tmp_path / "redis", appendonly=False) as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        set_max_units(client, MAX_UNITS)
        for tenant, limit in TENANT_LIMITS.items():
            set_tenant_max_units(client, tenant, limit)
        monitor = ResourceLimiter(client, max_units=MAX_UNITS)
        gate = monitor.acquire("maintenance", MAX_UNITS, ttl_s=900)
        assert gate is not None
        procs = {
            job_id: _start(tenant, job_id, x, server.url, tmp_path)
            for job_id, (tenant, x) in jobs.items()
        }
        try:
            deadline = time.monotonic() + 400
            while len(monitor.waiters()) < len(jobs) and time.monotonic() < deadline:
                ended = {j: p.returncode for j, p in procs.items() if p.poll() is not None}
                assert ended == {}, (ended, [(tmp_path / f"{j}.err").read_text() for j in ended])
                time.sleep(0.2)
            queue = monitor.waiters()
            arrival = [waiting.job_id for waiting in queue]
            arrived_at = {waiting.job_id: waiting.since for waiting in queue}
            assert sorted(arrival) == sorted(jobs)

            books, done = _Books(), threading.Event()
            sampler = threading.Thread(target=_sample, args=(monitor, books, done), daemon=True)
            sampler.start()
            seconds, micros = client.time()
            opened_at = seconds + micros / 1e6
            monitor.release(gate)
            codes = {job_id: proc.wait(timeout=900) for job_id, proc in procs.items()}
            done.set()
            sampler.join()
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()

        failed = {j: (tmp_path / f"{j}.err").read_text()[-3000:] for j, c in codes.items() if c}
        assert failed == {}
        for job_id in jobs:
            out = json.loads((tmp_path / f"{job_id}.out.json").read_text())
            assert out == {"status": "completed", "trials": ["completed"]}, (job_id, out)
        assert len(books.samples) > 20  # sampled throughout, not once
        assert max(total for total, _ in books.samples) <= MAX_UNITS
        for tenant, limit in TENANT_LIMITS.items():
            assert max(by[tenant] for _, by in books.samples) <= (limit or MAX_UNITS), tenant
        assert sorted(books.granted_at) == sorted(jobs)  # each job's lease was seen
        assert books.tenant_of == {job_id: tenant for job_id, (tenant, _) in jobs.items()}
        for tenant in TENANT_LIMITS:  # first come first served within each tenant
            mine = [job_id for job_id in arrival if jobs[job_id][0] == tenant]
            grants = [books.granted_at[job_id] for job_id in mine]
            assert grants == sorted(grants), (tenant, mine, grants)
        assert monitor.in_use() == 0 and monitor.holders() == {} and monitor.waiters() == []

        print("\npeak queue wait per tenant, from the gate's opening and from arrival to grant:")
        for tenant in TENANT_LIMITS:
            mine = [job_id for job_id in jobs if jobs[job_id][0] == tenant]
            since_open = max(books.granted_at[j] - opened_at for j in mine)
            since_arrival = max(books.granted_at[j] - arrived_at[j] for j in mine)
            print(
                f"  {tenant}: {len(mine)} jobs, limit {TENANT_LIMITS[tenant] or 'none'}: "
                f"{since_open:.1f} s from the gate, {since_arrival:.1f} s from arrival"
            )
        client.close()
