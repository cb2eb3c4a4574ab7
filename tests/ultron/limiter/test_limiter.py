"""The resource limiter against a real Redis: atomic grants, leases, tenants, timeouts."""

from __future__ import annotations

import json
import multiprocessing
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from pathlib import Path

import pytest
import redis

from ultron.errors import ResourceTimeoutError, UltronError
from ultron.limiter.lease_keeper import LeaseKeeper
from ultron.limiter.leases import Lease
from ultron.limiter.limits import read_max_units
from ultron.limiter.resource_limiter import ResourceLimiter

MAX_UNITS = 10
UNITS = 3  # e.g. parallelism 3 x 1 GPU per trial
WORKERS = 50
CONTENTION_S = 1.5


def test_acquire_release_and_holders(limiter: ResourceLimiter) -> None:
    lease = limiter.acquire("job-a", 4, ttl_s=5)
    assert lease is not None
    assert (lease.job_id, lease.units, lease.tenant) == ("job-a", 4, "default")
    assert limiter.in_use() == 4
    held = limiter.holders()
    assert list(held) == ["job-a"]
    assert held["job-a"].units == 4 and held["job-a"].lease_id == lease.lease_id
    assert 0 < held["job-a"].expires_in_s <= 5
    assert limiter.acquire("job-b", 7) is None  # 4 + 7 > 10
    assert limiter.release(lease) is True
    assert limiter.release(lease) is False  # idempotent
    assert limiter.in_use() == 0 and limiter.holders() == {}


def test_acquire_is_idempotent_per_job(limiter: ResourceLimiter) -> None:
    first = limiter.acquire("job-a", 3)
    again = limiter.acquire("job-a", 3)  # e.g. a retry after a lost reply
    assert first is not None and again is not None
    assert again.lease_id == first.lease_id
    assert limiter.in_use() == 3
    assert limiter.release(again) is True
    assert limiter.in_use() == 0
    fresh = limiter.acquire("job-a", 3)
    assert fresh is not None and fresh.lease_id != first.lease_id
    limiter.release(fresh)


def test_units_above_max_fail_at_once(limiter: ResourceLimiter) -> None:
    with pytest.raises(ResourceTimeoutError, match=r"parallelism x per-trial units\) is 11"):
        limiter.acquire("job-a", MAX_UNITS + 1)
    started = time.monotonic()
    with pytest.raises(ResourceTimeoutError, match="max_units=10, so it can never be granted"):
        limiter.acquire_blocking("job-a", MAX_UNITS + 1, timeout_s=60, retry_delay_s=5)
    assert time.monotonic() - started < 5  # it did not wait for units that cannot exist
    assert limiter.in_use() == 0


def test_acquire_blocking_times_out_with_a_clear_message(limiter: ResourceLimiter) -> None:
    hog = limiter.acquire("hog", 9)
    assert hog is not None
    with pytest.raises(ResourceTimeoutError) as caught:
        limiter.acquire_blocking("job-a", UNITS, timeout_s=0.3, retry_delay_s=0.05)
    message = str(caught.value)
    assert "could not acquire 3 units" in message
    assert "9 of max_units=10 units are in use" in message
    assert "Fix: raise max_units, lower parallelism" in message
    assert limiter.in_use() == 9
    limiter.release(hog)


def test_acquire_blocking_waits_for_a_release(limiter: ResourceLimiter) -> None:
    hog = limiter.acquire("hog", MAX_UNITS)
    assert hog is not None
    timer = threading.Timer(0.3, limiter.release, args=(hog,))
    timer.start()
    lease = limiter.acquire_blocking("job-a", UNITS, timeout_s=10, retry_delay_s=0.05)
    timer.join()
    assert lease.units == UNITS and limiter.in_use() == UNITS
    limiter.release(lease)


def test_per_tenant_limit(redis_client: redis.Redis, namespace: str) -> None:
    team_a = ResourceLimiter(
        redis_client, max_units=MAX_UNITS, namespace=namespace, tenant="a", tenant_max_units=4
    )
    team_b = ResourceLimiter(redis_client, max_units=MAX_UNITS, namespace=namespace, tenant="b")
    first = team_a.acquire("a-1", 3)
    assert first is not None
    assert team_a.acquire("a-2", 3) is None  # 3 + 3 > 4 for tenant a, though 6 <= 10 overall
    other = team_b.acquire("b-1", 6)
    assert other is not None  # tenant b is not held back by tenant a's limit
    assert team_a.in_use() == 9
    assert team_a.in_use(tenant="a") == 3 and team_a.in_use(tenant="b") == 6
    with pytest.raises(ResourceTimeoutError, match="tenant_max_units=4 of tenant 'a'"):
        team_a.acquire("a-3", 5)
    with pytest.raises(ResourceTimeoutError, match="tenant 'a' uses 3 of tenant_max_units=4"):
        team_a.acquire_blocking("a-2", 3, timeout_s=0.2, retry_delay_s=0.05)
    for lease in (first, other):
        team_a.release(lease)
    assert team_a.in_use() == 0


def test_unrenewed_lease_expires(limiter: ResourceLimiter, poll: Callable[..., bool]) -> None:
    lease = limiter.acquire("job-a", MAX_UNITS, ttl_s=0.2)
    assert lease is not None
    assert poll(lambda: limiter.in_use() == 0, timeout_s=5)
    assert limiter.renew(lease) is False
    assert limiter.release(lease) is False
    assert limiter.holders() == {}


def test_lease_keeper_renews_and_reports_loss(
    limiter: ResourceLimiter, poll: Callable[..., bool]
) -> None:
    lease = limiter.acquire("job-a", UNITS, ttl_s=0.3)
    assert lease is not None
    with LeaseKeeper(limiter, lease) as keeper:
        time.sleep(0.9)  # three TTLs: only renewals keep it alive
        assert limiter.in_use() == UNITS and not keeper.lost
    lost: list[str] = []
    limiter.release(lease)
    keeper = LeaseKeeper(
        limiter, lease, interval_s=0.05, on_lost=lambda gone: lost.append(gone.job_id)
    )
    with keeper:
        assert poll(lambda: keeper.lost, timeout_s=5)
    assert lost == ["job-a"]


def test_max_units_from_redis(redis_client: redis.Redis, namespace: str) -> None:
    assert read_max_units(redis_client, default=8, namespace=namespace) == 8
    redis_client.set(f"{namespace}:limiter:max_units", "64")
    assert read_max_units(redis_client, default=8, namespace=namespace) == 64
    redis_client.set(f"{namespace}:limiter:max_units", "lots")
    with pytest.raises(UltronError, match="max_units is 'lots'; it must be an integer"):
        read_max_units(redis_client, default=8, namespace=namespace)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_units": 0}, "max_units is 0; it must be an integer of at least 1"),
        ({"max_units": 4, "tenant_max_units": 0}, "tenant_max_units is 0"),
        ({"max_units": 4, "tenant": ""}, "tenant is ''; it must not be empty"),
    ],
)
def test_bad_arguments_name_the_field(
    redis_client: redis.Redis, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(UltronError, match=message):
        ResourceLimiter(redis_client, **kwargs)  # type: ignore[arg-type]


def test_bad_request_names_the_field(limiter: ResourceLimiter) -> None:
    with pytest.raises(UltronError, match="units is 0"):
        limiter.acquire("job-a", 0)
    with pytest.raises(UltronError, match="ttl_s is -1"):
        limiter.acquire("job-a", 1, ttl_s=-1)
    with pytest.raises(UltronError, match="job_id is ''"):
        limiter.acquire("", 1)


def _contend(url: str, namespace: str, worker: int, blocking: bool) -> None:
    """One acquirer: waits for the start signal, then acquires, holds and releases until told.

    While holding, it adds its units to a shared counter, so the counter's peak is a lower
    bound of what the limiter granted at once.
    """
    client = redis.Redis.from_url(url, decode_responses=True)
    limiter = ResourceLimiter(client, max_units=MAX_UNITS, namespace=namespace)
    client.incr(f"{namespace}:ready")
    while (stop_at := client.get(f"{namespace}:stop_at")) is None:
        time.sleep(0.01)
    peak = grants = 0
    while (left := float(stop_at) - time.time()) > 0:
        job_id = f"worker-{worker}-{grants}"
        if blocking:
            try:
                lease: Lease | None = limiter.acquire_blocking(
                    job_id, UNITS, timeout_s=left, retry_delay_s=0.002, max_delay_s=0.02
                )
            except ResourceTimeoutError:
                break
        else:
            lease = limiter.acquire(job_id, UNITS, ttl_s=30)
        if lease is None:
            time.sleep(0.01)
            continue
        peak = max(peak, client.incrby(f"{namespace}:holding", UNITS))
        time.sleep(0.005)
        client.decrby(f"{namespace}:holding", UNITS)
        limiter.release(lease)
        grants += 1
    client.rpush(f"{namespace}:results", json.dumps([peak, grants]))
    client.close()


def _run_contention(
    redis_url: str,
    namespace: str,
    workers: list[threading.Thread] | list[BaseProcess],
    poll: Callable[..., bool],
) -> None:
    """Starts the workers, lets them contend while sampling ``in_use``, then checks the books."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    monitor = ResourceLimiter(client, max_units=MAX_UNITS, namespace=namespace)
    for worker in workers:
        worker.start()
    assert poll(lambda: int(client.get(f"{namespace}:ready") or 0) == WORKERS, timeout_s=60)
    samples: list[tuple[int, int]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append((monitor.in_use(), int(client.get(f"{namespace}:holding") or 0)))
            time.sleep(0.001)

    sampler = threading.Thread(target=sample)
    sampler.start()
    client.set(f"{namespace}:stop_at", time.time() + CONTENTION_S)
    for worker in workers:
        worker.join(timeout=60)
    done.set()
    sampler.join()
    results = [json.loads(r) for r in client.lrange(f"{namespace}:results", 0, -1)]
    assert len(results) == WORKERS
    peaks = [peak for peak, _ in results] + [held for _, held in samples]
    assert max(in_use for in_use, _ in samples) <= MAX_UNITS
    assert max(peaks) <= MAX_UNITS
    assert max(peaks) >= 2 * UNITS  # several holders at once, so the test is not vacuous
    # More grants than fit at once: released units were granted again (how many in the
    # window depends on the machine's load, so no count of them is asserted).
    assert sum(grants for _, grants in results) > MAX_UNITS // UNITS
    assert monitor.in_use() == 0 and monitor.holders() == {}  # no leaks
    assert int(client.get(f"{namespace}:holding") or 0) == 0
    client.close()


def test_50_threads_never_exceed_max(
    redis_url: str, namespace: str, poll: Callable[..., bool]
) -> None:
    threads = [
        threading.Thread(target=_contend, args=(redis_url, namespace, i, True))
        for i in range(WORKERS)
    ]
    _run_contention(redis_url, namespace, threads, poll)


def test_50_processes_never_exceed_max(
    redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch, poll: Callable[..., bool]
) -> None:
    # The children import _contend by this module's name, tests.ultron.services.test_limiter:
    # from the repository's root (pytest's importlib mode leaves it off sys.path).
    monkeypatch.syspath_prepend(str(Path(__file__).parents[3]))
    # forkserver: 50 spawned interpreters take tens of seconds on a small machine, and a plain
    # fork copies the threads other fixtures started (Prefect's test server): the children
    # are forked from a clean single-threaded server that has imported redis once.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["redis", "ultron.limiter.resource_limiter"])
    procs = [
        context.Process(target=_contend, args=(redis_url, namespace, i, False))
        for i in range(WORKERS)
    ]
    _run_contention(redis_url, namespace, procs, poll)
    assert [proc.exitcode for proc in procs] == [0] * WORKERS


_HOLDER = """
import sys, time, redis
from ultron.limiter.lease_keeper import LeaseKeeper
from ultron.limiter.resource_limiter import ResourceLimiter
url, namespace, units = sys.argv[1], sys.argv[2], int(sys.argv[3])
limiter = ResourceLimiter(redis.Redis.from_url(url), max_units=units, namespace=namespace)
lease = limiter.acquire("holder", units, ttl_s=2.0)
if lease is None:
    sys.exit("no lease")
LeaseKeeper(limiter, lease).start()
print("held", flush=True)
time.sleep(600)
"""


def test_killed_holder_gives_units_back_after_ttl(
    redis_url: str,
    limiter: ResourceLimiter,
    namespace: str,
    poll: Callable[..., bool],
) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, redis_url, namespace, str(MAX_UNITS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stderr is not None
        if holder.stdout.readline().strip() != "held":
            pytest.fail(f"the holder did not take the units: {holder.stderr.read()}")
        acquired_at = time.monotonic()
        # Past one TTL with the holder alive: only its keeper's renewals keep the units taken.
        time.sleep(max(0.0, acquired_at + 2.5 - time.monotonic()))
        assert limiter.in_use() == MAX_UNITS
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert limiter.in_use() == MAX_UNITS  # still held right after the kill
    assert limiter.acquire("newcomer", MAX_UNITS) is None
    assert poll(lambda: limiter.acquire("newcomer", MAX_UNITS) is not None, timeout_s=10)
    assert list(limiter.holders()) == ["newcomer"]
