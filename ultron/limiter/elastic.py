"""Parallelism in whole trials over a lease of the Resource Limiter: as many trials as fit.

An elastic job (``min_parallelism``, ``ultron scale``) holds units for some number of trials
between a least and a most, and takes more as they free up: :func:`fit_parallelism` turns
"as many trials as the limiter gives now" into one lease resize.
"""

from __future__ import annotations

from collections.abc import Callable

from ultron.limiter.leases import Lease
from ultron.limiter.resource_limiter import ResourceLimiter

__all__ = ["fit_parallelism"]


def fit_parallelism(
    limiter: ResourceLimiter,
    lease: Lease,
    *,
    units_for: Callable[[int], float],
    have: int,
    most: int,
) -> tuple[Lease, int]:
    """Grows ``lease`` (units for ``have`` trials) to the most trials, up to ``most``, that fit.

    Each try is one atomic resize, from ``most`` down, so the largest count the limiter grants
    now wins; a count below ``have`` is never asked for.

    Args:
        limiter: the limiter that granted ``lease``.
        lease: the job's live lease.
        units_for: units of n trials (``Resources.units_for``: exact for fractions of a GPU).
        have: trials ``lease`` holds units for now.
        most: trials wanted.

    Returns:
        The lease (resized or as it was) and the trials it now holds units for.

    Example:
        >>> import redis
        >>> limiter = ResourceLimiter(redis.Redis.from_url(redis_url), max_units=4,
        ...                           namespace="doctest-fit")
        >>> other = limiter.acquire("other", 1)
        >>> lease = limiter.acquire("job", 1)
        >>> lease, trials = fit_parallelism(limiter, lease, units_for=float, have=1, most=5)
        >>> trials, lease.units
        (3, 3)
        >>> limiter.release(lease), limiter.release(other)
        (True, True)
    """
    for trials in range(most, have, -1):
        grown = limiter.resize(lease, units_for(trials))
        if grown is not None:
            return grown, trials
    return lease, have
