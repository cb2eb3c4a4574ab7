"""An elastic job's lease: grown and shrunk in place, never past the limits or the queue."""

from __future__ import annotations

import pytest

from ultron.errors import UltronError
from ultron.limiter.elastic import fit_parallelism
from ultron.limiter.resource_limiter import ResourceLimiter


def test_a_lease_grows_only_into_free_units_and_shrinks_at_once(limiter: ResourceLimiter) -> None:
    lease = limiter.acquire("job-a", 2)
    other = limiter.acquire("job-b", 6)
    assert lease is not None and other is not None
    grown = limiter.resize(lease, 4)  # 6 + 4 = 10: fits exactly
    assert grown is not None and grown.units == 4 and grown.lease_id == lease.lease_id
    assert limiter.resize(grown, 5) is None  # 6 + 5 > 10
    assert limiter.holders()["job-a"].units == 4 and limiter.in_use() == 10
    shrunk = limiter.resize(grown, 1)
    assert shrunk is not None and shrunk.units == 1 and limiter.in_use() == 7
    assert limiter.acquire("job-c", 3) is not None  # the units given back are free for others
    limiter.release(shrunk)
    with pytest.raises(UltronError, match="not live"):
        limiter.resize(shrunk, 2)


def test_growing_waits_behind_a_queued_job(limiter: ResourceLimiter) -> None:
    lease = limiter.acquire("job-a", 2)
    assert lease is not None
    assert limiter.acquire("job-b", 6) is not None
    # job-w waits for 3 units (2 are free): the running job may not take them before it.
    assert limiter.acquire("job-w", 3, queue=True) is None
    assert limiter.resize(lease, 3) is None
    limiter.leave_queue("job-w")
    assert limiter.resize(lease, 3) is not None


def test_fit_takes_as_many_trials_as_fit(limiter: ResourceLimiter) -> None:
    lease = limiter.acquire("job-a", 0.5)  # one trial of half a GPU
    assert limiter.acquire("job-b", 8) is not None
    assert lease is not None
    lease, trials = fit_parallelism(
        limiter, lease, units_for=lambda n: n * 0.5, have=1, most=8
    )  # 2 units free: 4 trials
    assert (trials, lease.units) == (4, 2)
    same, again = fit_parallelism(limiter, lease, units_for=lambda n: n * 0.5, have=4, most=8)
    assert (again, same.units) == (4, 2)  # nothing more free: as it was
