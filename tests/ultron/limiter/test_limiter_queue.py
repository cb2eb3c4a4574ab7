"""The resource limiter's waiting queue against a real Redis: first come first served within a
tenant, turns across tenants, no starvation, and waiters that leave or die leave the queue."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest
import redis

from ultron.errors import ResourceTimeoutError
from ultron.limiter.leases import Lease
from ultron.limiter.resource_limiter import ResourceLimiter

MAX_UNITS = 10  # as the limiter fixture's
UNITS = 3


def _tenant(
    redis_client: redis.Redis, namespace: str, tenant: str, tenant_max_units: int | None = None
) -> ResourceLimiter:
    return ResourceLimiter(
        redis_client,
        max_units=MAX_UNITS,
        namespace=namespace,
        tenant=tenant,
        tenant_max_units=tenant_max_units,
    )


def test_waiters_of_a_tenant_are_served_first_come_first_served(
    redis_client: redis.Redis, namespace: str
) -> None:
    team = _tenant(redis_client, namespace, "a")
    hog = _tenant(redis_client, namespace, "x").acquire("hog", MAX_UNITS)
    assert hog is not None
    for job in ("a-1", "a-2", "a-3"):
        assert team.acquire(job, UNITS, queue=True) is None
    assert [w.job_id for w in team.waiters()] == ["a-1", "a-2", "a-3"]
    assert all(w.tenant == "a" and w.units == UNITS for w in team.waiters())
    team.release(hog)
    # All three fit now (9 <= 10), but a job takes units only when those before it have.
    assert team.acquire("a-3", UNITS, queue=True) is None
    assert team.acquire("a-2", UNITS, queue=True) is None
    assert team.acquire("late", 1) is None  # a newcomer arrives after every waiter
    first = team.acquire("a-1", UNITS, queue=True)
    assert first is not None and [w.job_id for w in team.waiters()] == ["a-2", "a-3"]
    assert team.acquire("a-3", UNITS, queue=True) is None
    assert team.acquire("a-2", UNITS, queue=True) is not None
    assert team.acquire("a-3", UNITS, queue=True) is not None
    assert team.waiters() == [] and team.in_use() == 3 * UNITS
    since = team.holders()["a-1"].since
    assert abs(since - time.time()) < 60  # when it was granted, by the server's clock


def test_a_big_job_is_not_overtaken_by_small_ones_of_its_tenant(
    redis_client: redis.Redis, namespace: str
) -> None:
    team = _tenant(redis_client, namespace, "a")
    holder = team.acquire("holder", 5)
    assert holder is not None
    assert team.acquire("big", 8, queue=True) is None  # 5 + 8 > 10
    for i in range(5):  # each would fit (5 + 2 <= 10), and each waits behind the big job
        assert team.acquire(f"small-{i}", 2, queue=True) is None
    team.release(holder)
    assert team.acquire("small-0", 2, queue=True) is None
    assert team.acquire("big", 8, queue=True) is not None
    assert team.acquire("small-0", 2, queue=True) is not None


def test_no_tenant_is_starved_by_another_tenants_stream(
    redis_client: redis.Redis, namespace: str
) -> None:
    team_a, team_b = _tenant(redis_client, namespace, "a"), _tenant(redis_client, namespace, "b")
    running = [team_b.acquire(f"b-{i}", 5) for i in range(2)]  # tenant b fills the cluster
    assert None not in running
    for i in range(2, 6):  # and queues four more jobs before tenant a's first one arrives
        assert team_b.acquire(f"b-{i}", 5, queue=True) is None
    assert team_a.acquire("a-1", 5, queue=True) is None
    first, second = running
    assert first is not None and second is not None
    team_b.release(first)
    # b's next job arrived earlier, but tenant a has had no turn since tenant b's last one.
    assert team_b.acquire("b-2", 5, queue=True) is None
    assert team_a.acquire("a-1", 5, queue=True) is not None
    team_b.release(second)
    assert team_b.acquire("b-2", 5, queue=True) is not None
    holders = team_a.holders()
    assert sorted(holders) == ["a-1", "b-2"]
    assert [w.job_id for w in team_a.waiters()] == ["b-3", "b-4", "b-5"]


def test_a_big_job_is_not_starved_by_another_tenants_small_ones(
    redis_client: redis.Redis, namespace: str
) -> None:
    team_a, team_b = _tenant(redis_client, namespace, "a"), _tenant(redis_client, namespace, "b")
    small = [team_b.acquire(f"b-{i}", 2) for i in range(2)]
    assert team_a.acquire("big", 8, queue=True) is None  # 4 + 8 > 10
    stream = iter(range(2, 100))
    for lease in small:
        # A stream of small jobs would fit beside the holders, and each waits: the units the
        # big job needs gather as the holders release.
        assert team_b.acquire(f"b-{next(stream)}", 2) is None
        assert team_b.acquire(f"b-{next(stream)}", 2, queue=True) is None
        assert lease is not None
        team_b.release(lease)
    assert team_a.acquire("big", 8, queue=True) is not None
    assert team_b.in_use() == 8
    assert team_b.acquire("b-3", 2, queue=True) is not None  # room for b beside it: no wait


def test_a_head_held_back_by_its_own_tenant_limit_holds_back_no_one_else(
    redis_client: redis.Redis, namespace: str
) -> None:
    team_a = _tenant(redis_client, namespace, "a", tenant_max_units=3)
    team_b = _tenant(redis_client, namespace, "b")
    a_1 = team_a.acquire("a-1", 3)
    b_0 = team_b.acquire("b-0", 3)
    assert a_1 is not None and b_0 is not None
    team_b.release(b_0)  # tenant a's turn now comes before tenant b's
    assert team_a.acquire("a-2", 3, queue=True) is None  # a's limit: 3 + 3 > 3
    assert team_b.acquire("b-1", 3, queue=True) is not None  # a-2 waits for a's own units
    team_a.release(a_1)
    assert team_a.acquire("a-2", 3, queue=True) is not None


def test_a_wait_that_ends_leaves_the_queue(limiter: ResourceLimiter) -> None:
    hog = limiter.acquire("hog", MAX_UNITS)
    assert hog is not None
    with pytest.raises(ResourceTimeoutError):
        limiter.acquire_blocking("job-a", UNITS, timeout_s=0.2, retry_delay_s=0.05)
    assert limiter.waiters() == []
    assert limiter.acquire("job-b", UNITS, queue=True) is None
    assert limiter.leave_queue("job-b") is True and limiter.waiters() == []
    limiter.release(hog)


_WAITER = """
import sys, redis
from ultron.limiter.resource_limiter import ResourceLimiter
url, namespace = sys.argv[1], sys.argv[2]
limiter = ResourceLimiter(redis.Redis.from_url(url), max_units=10, namespace=namespace)
limiter.acquire_blocking("ghost", 3, ttl_s=1.0, timeout_s=600, retry_delay_s=0.1)
"""


def test_a_waiter_whose_process_died_leaves_the_queue_after_its_ttl(
    redis_url: str,
    limiter: ResourceLimiter,
    namespace: str,
    poll: Callable[..., bool],
) -> None:
    hog = limiter.acquire("hog", MAX_UNITS, ttl_s=60)
    assert hog is not None
    waiter = subprocess.Popen([sys.executable, "-c", _WAITER, redis_url, namespace])
    try:
        assert poll(lambda: [w.job_id for w in limiter.waiters()] == ["ghost"], timeout_s=30)
        time.sleep(1.5)  # past one TTL alive: its attempts keep its place
        assert [w.job_id for w in limiter.waiters()] == ["ghost"]
        waiter.send_signal(signal.SIGKILL)
        waiter.wait(timeout=10)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    limiter.release(hog)
    assert limiter.acquire("next", UNITS, queue=True) is None  # the dead waiter is still first
    assert poll(lambda: limiter.acquire("next", UNITS, queue=True) is not None, timeout_s=10)
    assert limiter.waiters() == [] and list(limiter.holders()) == ["next"]


def test_waiters_are_woken_by_news_not_by_their_next_retry(
    limiter: ResourceLimiter, poll: Callable[..., bool]
) -> None:
    # Their next retries are 30 s away, after their 20 s timeout: only the news that units
    # were released (for a-1) and that a-2 heads its tenant's queue now can get them granted.
    hog = limiter.acquire("hog", MAX_UNITS)
    assert hog is not None
    results: dict[str, object] = {}

    def wait(job_id: str) -> None:
        try:
            results[job_id] = limiter.acquire_blocking(
                job_id, UNITS, ttl_s=120, timeout_s=20, retry_delay_s=30, max_delay_s=30
            )
        except ResourceTimeoutError as exc:
            results[job_id] = exc

    threads = [threading.Thread(target=wait, args=(job_id,)) for job_id in ("a-1", "a-2")]
    for queued, thread in enumerate(threads, 1):  # a-1 first: a-2 waits behind it
        thread.start()
        assert poll(lambda: len(limiter.waiters()) == queued, timeout_s=10)  # noqa: B023
    assert [w.job_id for w in limiter.waiters()] == ["a-1", "a-2"]
    limiter.release(hog)
    for thread in threads:
        thread.join(timeout=30)
    assert all(isinstance(results.get(job_id), Lease) for job_id in ("a-1", "a-2")), results
    assert sorted(limiter.holders()) == ["a-1", "a-2"] and limiter.waiters() == []
