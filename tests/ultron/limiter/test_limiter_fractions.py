"""The limiter counts fractions of a GPU exactly: jobs whose trials share GPUs, on a real Redis."""

from __future__ import annotations

import pytest
import redis

from ultron.errors import UltronError
from ultron.limiter.resource_limiter import ResourceLimiter
from ultron.spec.sections import Resources


def test_jobs_of_shared_gpus_fill_the_limit_exactly(
    redis_client: redis.Redis, namespace: str
) -> None:
    limiter = ResourceLimiter(redis_client, max_units=1, namespace=namespace)
    # Three jobs of one trial each at 1/3 GPU: their sum is 1 up to rounding, which must fit.
    third = Resources(gpu=1 / 3).units_for(1)
    leases = [limiter.acquire(f"job-{i}", third) for i in range(3)]
    assert all(lease is not None for lease in leases)
    assert limiter.in_use() == pytest.approx(1)
    assert limiter.acquire("job-late", 0.25) is None  # full: not even a quarter fits
    held = limiter.holders()
    assert sorted(h.units for h in held.values()) == [pytest.approx(1 / 3)] * 3
    for lease in leases:
        assert lease is not None and limiter.release(lease)
    assert limiter.in_use() == 0


def test_a_job_of_quarter_gpus_holds_one_unit_and_halves_add_up(
    redis_client: redis.Redis, namespace: str
) -> None:
    limiter = ResourceLimiter(redis_client, max_units=2, namespace=namespace, tenant="t")
    quarters = Resources(gpu=0.25).units_for(4)  # four trials share one GPU
    halves = Resources(gpu=0.5).units_for(1)
    assert (quarters, halves) == (1, 0.5)
    a = limiter.acquire("quarters", quarters)
    b = limiter.acquire("half-1", halves)
    assert a is not None and b is not None and b.units == 0.5
    assert limiter.in_use() == 1.5 and limiter.in_use(tenant="t") == 1.5
    assert limiter.acquire("one", 1) is None  # 1.5 + 1 > 2: a fraction is not rounded away
    c = limiter.acquire("half-2", halves)
    assert c is not None and limiter.in_use() == 2
    waiting = limiter.acquire("half-3", halves, queue=True)
    assert waiting is None and [w.units for w in limiter.waiters()] == [0.5]
    assert limiter.release(b)
    d = limiter.acquire("half-3", halves, queue=True)
    assert d is not None and limiter.waiters() == [] and limiter.in_use() == 2
    for lease in (a, c, d):
        limiter.release(lease)


@pytest.mark.parametrize("units", [0, -0.5, float("nan"), True])
def test_units_that_are_no_amount_are_refused(limiter: ResourceLimiter, units: object) -> None:
    with pytest.raises(UltronError, match=r"units is .*above 0.*Fix:"):
        limiter.acquire("job", units)  # type: ignore[arg-type]
