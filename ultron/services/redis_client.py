"""Redis clients: one that rides out a restart of the server, one that tries once.

Every ultron process (master, Dask workers, trial processes) connects through :func:`connect`:
commands that fail because the server is down or restarting are retried with exponential
backoff for up to ``ULTRON_REDIS_RETRY_S`` seconds (default 120), so a Redis that is killed and
restarted mid-job (with its append-only file) costs the job a pause, not its life.

That patience is wrong for a question such as "does a server answer at this address?", which
:func:`connect_once` asks: short timeouts and no retry, so a wrong address fails in seconds
(see :mod:`ultron.services.reachability`).
"""

from __future__ import annotations

from typing import Any

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.exceptions import BusyLoadingError, ConnectionError, TimeoutError
from redis.retry import Retry

from ultron.settings import settings

__all__ = ["connect", "connect_once"]


def connect(url: str, **kwargs: Any) -> redis.Redis:
    """A client of ``url`` that retries through connection failures."""
    budget_s = settings().redis_retry_s
    backoff = ExponentialBackoff(cap=2.0, base=0.05)
    retries = max(1, int(budget_s / 2.0) + 6)  # the backoff reaches its 2 s cap in ~6 tries
    return redis.Redis.from_url(
        url,
        retry=Retry(backoff, retries),
        retry_on_error=[ConnectionError, TimeoutError, BusyLoadingError],
        socket_connect_timeout=5,
        health_check_interval=30,
        **kwargs,
    )


def connect_once(url: str, *, timeout_s: float) -> redis.Redis:
    """A client of ``url`` that gives up after ``timeout_s`` per connect or reply, never retrying.

    redis-py retries three times by default; a probe must not. The host name lookup is not
    bounded by the timeouts: callers that must bound it run the probe in a thread.
    """
    return redis.Redis.from_url(
        url,
        retry=Retry(NoBackoff(), 0),
        socket_connect_timeout=timeout_s,
        socket_timeout=timeout_s,
    )
