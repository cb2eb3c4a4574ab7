"""The Resource Limiter (paper Fig. 7): a Redis semaphore of compute units, made atomic and fair.

The paper reads ``resource_counter``, compares it with ``max_resources``, then ``INCRBY``s it:
two jobs can both pass the check, and a job that dies never gives its units back. Here a grant
is a *lease* that one Lua script checks and records at once; a lease not renewed in time
expires (by the Redis server's clock), so a killed job's units come back on their own.

Units may be fractions: a job of four trials with 0.25 GPU each holds 1 unit, and two jobs of
0.5 fit in 1 (counted exactly, up to a tolerance of 1e-9; the limits are whole numbers).

Limits: a global ``max_units`` and, per tenant, ``tenant_max_units``; a platform team stores
them in Redis and each job reads them when it starts waiting (:mod:`ultron.limiter.limits`).

Fair waiting: a job that waits (``acquire_blocking``, or ``acquire(..., queue=True)``) joins
a queue, and the script grants units by these rules:

1. Within a tenant, first come first served: only a tenant's oldest waiting job (its *head*)
   may take units; the others wait behind it even when they would fit.
2. Across tenants, round robin: the heads take turns in the order of their tenant's last
   grant (the tenant served longest ago first; a tenant never served before any other), ties
   by arrival. A job takes units only if every head before it, taking its units in turn,
   leaves enough for it. A head held back by its own tenant's limit is passed over (it waits
   for its own tenant's units, which no other tenant can give it).
3. No starvation, big jobs included: a head before a job that does not fit stops that job, so
   the units it needs gather as holders release, however many small jobs come after it. Each
   grant sends its tenant to the back of the turns, so with a finite set of tenants every head
   reaches the front. The price: units stay idle while a big head gathers them.

A waiter's entry lives ``ttl_s`` (the lease TTL) after its last attempt, and a waiting job
attempts at least every ``ttl_s / 3``: a waiter whose process died leaves the queue on its own.
A job that is not waiting (``acquire`` without ``queue``) counts as arriving now. Each grant,
release and departure publishes the heads of the queues on the ``events`` channel: a head
attempts at once (units do not sit idle while it sleeps), the jobs behind it do not ask.

The Lua script and the Redis keys it keeps are in :mod:`ultron.limiter.script`;
:class:`ultron.limiter.lease_keeper.LeaseKeeper` renews a lease from a thread;
:meth:`ResourceLimiter.resize` grows or shrinks one (an elastic job).
"""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import redis

from ultron.errors import ResourceTimeoutError, UltronError
from ultron.limiter.leases import Holding, Lease, Waiting
from ultron.limiter.limits import _check_count, _issue, _text
from ultron.limiter.script import KEY_NAMES, SCRIPT
from ultron.redis import keys

__all__ = ["ResourceLimiter"]

logger = logging.getLogger(__name__)


def _units(raw: Any) -> float:
    """A count of units as the script returns it (a string: it may be a fraction); an int
    when whole."""
    value = float(_text(raw))
    return int(value) if value.is_integer() else value


def _check_units(units: object) -> None:
    number = units if isinstance(units, int | float) and not isinstance(units, bool) else None
    if number is None or not math.isfinite(number) or number <= 0:
        rule = "it must be a number of units above 0 (a fraction, such as 0.5 GPU, too)"
        raise UltronError(_issue("units", units, rule, "request more than 0 units"))


def _check_ttl(ttl_s: float) -> int:
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, int | float) or not ttl_s > 0:
        raise UltronError(_issue("ttl_s", ttl_s, "it must be above 0 seconds", "pass e.g. 30"))
    return max(1, round(ttl_s * 1000))


def _wait(events: Any, job_id: str, seconds: float, check: Callable[[], None] | None) -> bool:
    """Waits up to ``seconds`` for news that ``job_id`` may take units now.

    News (units or turns moved) names the jobs at the heads of their tenants' queues, the only
    ones that may take units; the others wait on without asking Redis. ``check`` is called at
    least every 0.2 s.

    Returns:
        Whether news came for ``job_id`` (attempt again now).
    """
    until = time.monotonic() + max(0.0, seconds)
    while (left := until - time.monotonic()) > 0:
        if check is not None:
            check()
        message = events.get_message(timeout=min(left, 0.2))
        if message is not None and job_id in _heads(message.get("data")):
            return True
    return False


def _heads(data: Any) -> list[str]:
    try:
        heads = json.loads(_text(data))
    except ValueError:
        return []
    return [str(head) for head in heads] if isinstance(heads, list) else []


class ResourceLimiter:
    """Grants compute units to jobs, never more than ``max_units`` at once, fairly, on Redis.

    The module docstring gives the rules of the queue.

    Args:
        redis_client: client of the Redis that all jobs share.
        max_units: cluster-wide limit (``max_resources`` in the paper).
        namespace: prefix of the Redis keys.
        tenant: tenant whose units this limiter takes.
        tenant_max_units: limit for ``tenant``; None for no limit beyond ``max_units``.

    Example:
        >>> limiter = ResourceLimiter(redis.Redis.from_url(redis_url), max_units=4,
        ...                           namespace="doctest")
        >>> lease = limiter.acquire("job-1", 3)
        >>> limiter.acquire("job-2", 2) is None, limiter.in_use()
        (True, 3)
        >>> limiter.release(lease), limiter.in_use()
        (True, 0)
    """

    def __init__(
        self,
        redis_client: redis.Redis,
        *,
        max_units: int,
        namespace: str = keys.NAMESPACE,
        tenant: str = "default",
        tenant_max_units: int | None = None,
    ) -> None:
        self.max_units = _check_count("max_units", max_units, fix="set max_units to 1 or more")
        if tenant_max_units is not None:
            _check_count("tenant_max_units", tenant_max_units, fix="pass None for no limit")
        if not tenant:
            raise UltronError(_issue("tenant", tenant, "it must not be empty", "name it"))
        self.client = redis_client
        self.namespace = namespace
        self.tenant = tenant
        self.tenant_max_units = tenant_max_units
        self._keys = [keys.limiter(name, namespace=namespace) for name in KEY_NAMES]
        # register_script only hashes the source; the script is loaded on first use.
        self._script = redis_client.register_script(SCRIPT)

    def _call(self, *args: str | float) -> Any:
        return self._script(keys=self._keys, args=args)

    def _check_request(self, job_id: str, units: float) -> None:
        if not isinstance(job_id, str) or not job_id:
            raise UltronError(_issue("job_id", job_id, "it must be a non-empty string", "name it"))
        _check_units(units)
        field = "units (parallelism x per-trial units)"
        fix = "lower parallelism or the per-trial cpu/gpu, or raise the limit"
        if units > self.max_units:
            rule = f"it must be at most max_units={self.max_units}, so it can never be granted"
            raise ResourceTimeoutError(_issue(field, units, rule, fix))
        if self.tenant_max_units is not None and units > self.tenant_max_units:
            rule = f"it must be at most tenant_max_units={self.tenant_max_units} of tenant "
            rule += f"{self.tenant!r}, so it can never be granted"
            raise ResourceTimeoutError(_issue(field, units, rule, fix))

    def _try(
        self, job_id: str, units: float, ttl_s: float, *, queue: bool
    ) -> tuple[Lease | None, float, float, str, bool]:
        ttl_ms = _check_ttl(ttl_s)
        granted, lease_id, held, tenant, total, mine, blocker, head = self._call(
            "acquire", uuid.uuid4().hex, job_id, units, self.tenant, ttl_ms,
            self.max_units, self.tenant_max_units or 0, ttl_ms if queue else 0,
        )  # fmt: skip
        if not int(granted):
            return None, _units(total), _units(mine), _text(blocker), bool(int(head))
        lease = Lease(_text(lease_id), job_id, _units(held), _text(tenant), float(ttl_s))
        return lease, _units(total), _units(mine), "", True

    def acquire(
        self, job_id: str, units: float, *, ttl_s: float = 30.0, queue: bool = False
    ) -> Lease | None:
        """Takes ``units`` for ``job_id`` if they fit now and its turn has come; else None.

        Idempotent per job: while ``job_id`` holds a live lease, acquiring again returns that
        lease (extended by ``ttl_s``) and counts nothing twice, so a command retried after a
        lost reply is safe. The returned lease keeps the units of the first grant.

        Args:
            job_id: the job asking.
            units: units it asks for.
            ttl_s: seconds the lease (and, with ``queue``, the waiter's entry) lives.
            queue: when not granted, keep ``job_id`` in the queue (its place kept for ``ttl_s``
                after each attempt; ``leave_queue`` removes it). Without it the job counts as
                arriving now and leaves no trace.

        Raises:
            ResourceTimeoutError: ``units`` exceeds ``max_units`` or ``tenant_max_units``, so
                the request could never be granted.
        """
        self._check_request(job_id, units)
        lease, *_ = self._try(job_id, units, ttl_s, queue=queue)
        return lease

    def leave_queue(self, job_id: str) -> bool:
        """Takes ``job_id`` out of the queue; True if it was waiting."""
        return bool(int(self._call("leave", job_id)))

    def acquire_blocking(
        self,
        job_id: str,
        units: float,
        *,
        ttl_s: float = 30.0,
        timeout_s: float = 300.0,
        retry_delay_s: float = 1.0,
        backoff: float = 1.5,
        max_delay_s: float = 10.0,
        check: Callable[[], None] | None = None,
    ) -> Lease:
        """Waits in the queue, retrying with growing delays (the paper's delayed retry).

        A release, a grant or a waiter leaving wakes the jobs at the heads of their tenants'
        queues at once (a Redis channel), so units do not sit idle while the job whose turn it
        is sleeps; without such news,
        attempts come at most ``min(max_delay_s, ttl_s / 3)`` apart, so the job's place in the
        queue (kept ``ttl_s`` after each attempt) lives while it waits. However the wait ends
        (granted, timed out, an error), the job leaves the queue. ``check`` is called at least
        every 0.2 s while waiting; what it raises (a cancelled job's error) ends the wait.

        Raises:
            ResourceTimeoutError: not granted within ``timeout_s``, or never grantable.
        """
        self._check_request(job_id, units)
        _check_ttl(ttl_s)
        deadline = time.monotonic() + timeout_s
        delay, max_delay_s = retry_delay_s, min(max_delay_s, ttl_s / 3)
        # Subscribed before the first attempt, so that no release after it goes unnoticed.
        events = self.client.pubsub(ignore_subscribe_messages=True)
        try:
            events.subscribe(self._keys[-1])
            while True:
                lease, total, mine, blocker, head = self._try(job_id, units, ttl_s, queue=True)
                if lease is not None:
                    return lease
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    msg = self._timeout_message(job_id, units, timeout_s, total, mine, blocker)
                    raise ResourceTimeoutError(msg)
                logger.info(
                    "job %s waits for %s units (%s in use; held back by %s)",
                    job_id, units, total, blocker,
                )  # fmt: skip
                # A job behind its tenant's head waits for news that it heads the queue; the
                # attempts at most ttl_s / 3 apart keep its place.
                wait_s = min(delay, max_delay_s) if head else ttl_s / 3
                if not _wait(events, job_id, min(wait_s, remaining), check):
                    delay = min(delay * backoff, max_delay_s)
        finally:
            events.close()
            self._leave_quietly(job_id)

    def _leave_quietly(self, job_id: str) -> None:
        try:
            self.leave_queue(job_id)
        except (redis.RedisError, OSError) as exc:  # its entry expires after ttl_s anyway
            logger.warning("job %s could not leave the limiter's queue: %s", job_id, exc)

    def _timeout_message(
        self, job_id: str, units: float, timeout_s: float, total: float, mine: float, blocker: str
    ) -> str:
        tenant_part, limits = "", "max_units"
        if self.tenant_max_units is not None:
            tenant_part = f"; tenant {self.tenant!r} uses {mine} of "
            tenant_part += f"tenant_max_units={self.tenant_max_units}"
            limits = "max_units or tenant_max_units"
        queue_part = ""
        if blocker and not blocker.startswith("("):
            queue_part = f"; job {blocker!r} waits before it (first come first served)"
        return (
            f"job {job_id!r} could not acquire {units} units within timeout_s={timeout_s:g}: "
            f"{total} of max_units={self.max_units} units are in use{tenant_part}{queue_part}. "
            f"Fix: raise {limits}, lower parallelism or the per-trial units, or wait (raise "
            "timeout_s); `ultron jobs` shows who holds and who waits"
        )

    def renew(self, lease: Lease, *, ttl_s: float | None = None) -> bool:
        """Extends ``lease`` by ``ttl_s`` (default: its own); False if it had already expired."""
        ttl_ms = _check_ttl(lease.ttl_s if ttl_s is None else ttl_s)
        return bool(int(self._call("renew", lease.lease_id, ttl_ms)))

    def release(self, lease: Lease) -> bool:
        """Gives the units of ``lease`` back; True if it was live. Safe to call twice."""
        return bool(int(self._call("release", lease.lease_id)))

    def resize(self, lease: Lease, units: float) -> Lease | None:
        """Grows or shrinks a live lease to ``units`` (an elastic job scaled up or down).

        Giving units back always succeeds and wakes the waiting jobs. Taking more is granted
        like a new request: only within the limits and behind every job already waiting, so
        growing never jumps the queue.

        Returns:
            The lease with its new units, or None when the extra units are not free now.

        Raises:
            UltronError: ``units`` is not above 0, or the lease is no longer live (expired or
                released): the job must acquire again.
        """
        _check_units(units)
        done, held = self._call(
            "resize", lease.lease_id, units, self.max_units, self.tenant_max_units or 0
        )
        if int(done) < 0:
            raise UltronError(
                f"the lease of job {lease.job_id!r} is not live (it expired or was released), "
                "so it cannot be resized. Fix: acquire the units again"
            )
        return replace(lease, units=_units(held)) if int(done) else None

    def in_use(self, *, tenant: str | None = None) -> float:
        """Units held by live leases, all tenants' or only ``tenant``'s."""
        total, mine = self._call("usage", tenant or "")
        return _units(mine) if tenant is not None else _units(total)

    def holders(self) -> dict[str, Holding]:
        """Live leases keyed by job id."""
        rows = self._call("holders")
        out: dict[str, Holding] = {}
        for i in range(0, len(rows), 6):
            lease_id, job, units, tenant, ms_left, granted_ms = rows[i : i + 6]
            out[_text(job)] = Holding(
                _text(lease_id), _units(units), _text(tenant), int(ms_left) / 1000,
                int(granted_ms) / 1000,
            )  # fmt: skip
        return out

    def waiters(self) -> list[Waiting]:
        """Jobs waiting for units, by arrival (live entries only)."""
        rows = self._call("waiters")
        return [
            Waiting(
                _text(job), _text(tenant), _units(units), int(since_ms) / 1000, int(left) / 1000
            )
            for job, tenant, units, since_ms, left in (
                rows[i : i + 5] for i in range(0, len(rows), 5)
            )
        ]
