"""What the Resource Limiter hands out and shows: a job's :class:`Lease` of units, and the
live leases (:class:`Holding`) and waiting jobs (:class:`Waiting`) that ``ultron jobs`` lists
(:class:`~ultron.limiter.resource_limiter.ResourceLimiter` makes and reads them).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Holding", "Lease", "Waiting"]


@dataclass(frozen=True)
class Lease:
    """Units granted to one job until the lease expires or is released.

    Attributes:
        lease_id: unique id of this grant.
        job_id: the job that holds it; one live lease per job.
        units: units held (parallelism x per-trial units; ``R_req`` in the paper's Fig. 7).
        tenant: the tenant the units count against.
        ttl_s: seconds the lease lives after each grant or renewal.
    """

    lease_id: str
    job_id: str
    units: float
    tenant: str
    ttl_s: float


@dataclass(frozen=True)
class Holding:
    """A live lease as seen by ``ResourceLimiter.holders``.

    Attributes:
        lease_id: id of the lease.
        units: units held.
        tenant: tenant the units count against.
        expires_in_s: seconds until the lease expires unless renewed.
        since: when the units were granted (seconds since the epoch, the Redis server's clock).
    """

    lease_id: str
    units: float
    tenant: str
    expires_in_s: float
    since: float = 0.0


@dataclass(frozen=True)
class Waiting:
    """A job waiting for units, as seen by ``ResourceLimiter.waiters``.

    Attributes:
        job_id: the waiting job.
        tenant: its tenant.
        units: units it asks for.
        since: when it started waiting (seconds since the epoch, the Redis server's clock).
        expires_in_s: seconds until its entry expires unless it attempts again.
    """

    job_id: str
    tenant: str
    units: float
    since: float
    expires_in_s: float
