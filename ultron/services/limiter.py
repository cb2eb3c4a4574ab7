"""The Resource Limiter (paper Fig. 7): a Redis semaphore of compute units, made atomic.

The paper reads ``resource_counter``, compares it with ``max_resources``, then ``INCRBY``s it:
two jobs can both pass the check, and a job that dies never gives its units back. Here a grant
is a *lease* that one Lua script checks and records at once; a lease not renewed in time
expires (by the Redis server's clock), so a killed job's units come back on their own.

Keys under ``{namespace}:limiter:``: ``leases`` (sorted set of lease ids scored by expiry in
ms), ``units``, ``tenant`` and ``owners`` (hashes lease id -> units, tenant, job id), ``jobs``
(hash job id -> lease id, which makes ``acquire`` idempotent) and, optionally, ``max_units``
(the cluster-wide limit an operator may set, see ``read_max_units``).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from ultron.errors import ConfigIssue, ResourceTimeoutError, UltronError
from ultron.services import keys

__all__ = ["Holding", "Lease", "LeaseKeeper", "ResourceLimiter", "read_max_units"]

logger = logging.getLogger(__name__)

# One script for every operation, so that each one reaps expired leases first, by the server's
# clock.  KEYS: 1 leases, 2 units, 3 tenant, 4 owners, 5 jobs.  ARGV[1]: the operation.
_SCRIPT = """
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function drop(id)
  local job = redis.call('HGET', KEYS[4], id)
  if job and redis.call('HGET', KEYS[5], job) == id then redis.call('HDEL', KEYS[5], job) end
  for k = 2, 4 do redis.call('HDEL', KEYS[k], id) end
  return redis.call('ZREM', KEYS[1], id)
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)) do drop(id) end
local function usage(tenant)
  local total, mine = 0, 0
  for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    local u = tonumber(redis.call('HGET', KEYS[2], id) or '0')
    total = total + u
    if redis.call('HGET', KEYS[3], id) == tenant then mine = mine + u end
  end
  return total, mine
end
local op = ARGV[1]
if op == 'acquire' then
  -- ARGV: op, lease_id, job_id, units, tenant, ttl_ms, max_units, tenant_max_units (0: none).
  -- Returns {granted, lease_id, units, tenant, total_in_use, tenant_in_use}.
  local existing = redis.call('HGET', KEYS[5], ARGV[3])
  local total, mine = usage(ARGV[5])
  if existing and redis.call('ZSCORE', KEYS[1], existing) then
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[6]), existing)
    return {1, existing, tonumber(redis.call('HGET', KEYS[2], existing)),
            redis.call('HGET', KEYS[3], existing), total, mine}
  end
  local units, tenant_max = tonumber(ARGV[4]), tonumber(ARGV[8])
  if total + units > tonumber(ARGV[7]) or (tenant_max > 0 and mine + units > tenant_max) then
    return {0, '', 0, '', total, mine}
  end
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[6]), ARGV[2])
  redis.call('HSET', KEYS[2], ARGV[2], units)
  redis.call('HSET', KEYS[3], ARGV[2], ARGV[5])
  redis.call('HSET', KEYS[4], ARGV[2], ARGV[3])
  redis.call('HSET', KEYS[5], ARGV[3], ARGV[2])
  return {1, ARGV[2], units, ARGV[5], total + units, mine + units}
elseif op == 'renew' then  -- ARGV: op, lease_id, ttl_ms
  if not redis.call('ZSCORE', KEYS[1], ARGV[2]) then return 0 end
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
  return 1
elseif op == 'release' then  -- ARGV: op, lease_id
  return drop(ARGV[2])
elseif op == 'usage' then  -- ARGV: op, tenant
  local total, mine = usage(ARGV[2])
  return {total, mine}
elseif op == 'holders' then  -- flat: lease_id, job_id, units, tenant, ms to expiry
  local out, rows = {}, redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  for i = 1, #rows, 2 do
    local id = rows[i]
    table.insert(out, id)
    table.insert(out, redis.call('HGET', KEYS[4], id) or '')
    table.insert(out, tonumber(redis.call('HGET', KEYS[2], id) or '0'))
    table.insert(out, redis.call('HGET', KEYS[3], id) or '')
    table.insert(out, tonumber(rows[i + 1]) - now)
  end
  return out
end
return redis.error_reply('unknown limiter operation ' .. tostring(op))
"""


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
    units: int
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
    """

    lease_id: str
    units: int
    tenant: str
    expires_in_s: float


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _issue(field: str, value: object, rule: str, fix: str) -> str:
    return str(ConfigIssue(field, value, rule, fix))


def _check_count(field: str, value: object, *, fix: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UltronError(_issue(field, value, "it must be an integer of at least 1", fix))
    return value


def _check_ttl(ttl_s: float) -> int:
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, int | float) or not ttl_s > 0:
        raise UltronError(_issue("ttl_s", ttl_s, "it must be above 0 seconds", "pass e.g. 30"))
    return max(1, round(ttl_s * 1000))


def read_max_units(client: redis.Redis, *, default: int, namespace: str = keys.NAMESPACE) -> int:
    """Returns the cluster-wide limit from ``{namespace}:limiter:max_units``, else ``default``.

    An operator sets the limit once with ``SET ultron:limiter:max_units 64``.

    Raises:
        UltronError: the key holds something other than a positive integer.
    """
    key = keys.limiter("max_units", namespace=namespace)
    raw = client.get(key)
    if raw is None:
        return default
    text = _text(raw).strip()
    if not text.isdigit() or int(text) < 1:
        fix = f"SET {key} to a positive integer, or DEL it to use the default {default}"
        raise UltronError(_issue(key, text, "it must be an integer of at least 1", fix))
    return int(text)


class ResourceLimiter:
    """Grants compute units to jobs, never more than ``max_units`` at once, on Redis.

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
        names = ("leases", "units", "tenant", "owners", "jobs")
        self._keys = [keys.limiter(name, namespace=namespace) for name in names]
        # register_script only hashes the source; the script is loaded on first use.
        self._script = redis_client.register_script(_SCRIPT)

    def _call(self, *args: str | int) -> Any:
        return self._script(keys=self._keys, args=args)

    def _check_request(self, job_id: str, units: int) -> None:
        if not isinstance(job_id, str) or not job_id:
            raise UltronError(_issue("job_id", job_id, "it must be a non-empty string", "name it"))
        _check_count("units", units, fix="request at least one unit")
        field = "units (parallelism x per-trial units)"
        fix = "lower parallelism or the per-trial cpu/gpu, or raise the limit"
        if units > self.max_units:
            rule = f"it must be at most max_units={self.max_units}, so it can never be granted"
            raise ResourceTimeoutError(_issue(field, units, rule, fix))
        if self.tenant_max_units is not None and units > self.tenant_max_units:
            rule = f"it must be at most tenant_max_units={self.tenant_max_units} of tenant "
            rule += f"{self.tenant!r}, so it can never be granted"
            raise ResourceTimeoutError(_issue(field, units, rule, fix))

    def _try(self, job_id: str, units: int, ttl_s: float) -> tuple[Lease | None, int, int]:
        granted, lease_id, held, tenant, total, mine = self._call(
            "acquire", uuid.uuid4().hex, job_id, units, self.tenant, _check_ttl(ttl_s),
            self.max_units, self.tenant_max_units or 0,
        )  # fmt: skip
        if not int(granted):
            return None, int(total), int(mine)
        lease = Lease(_text(lease_id), job_id, int(held), _text(tenant), float(ttl_s))
        return lease, int(total), int(mine)

    def acquire(self, job_id: str, units: int, *, ttl_s: float = 30.0) -> Lease | None:
        """Takes ``units`` for ``job_id`` if they fit now; returns None if they do not.

        Idempotent per job: while ``job_id`` holds a live lease, acquiring again returns that
        lease (extended by ``ttl_s``) and counts nothing twice, so a command retried after a
        lost reply is safe. The returned lease keeps the units of the first grant.

        Raises:
            ResourceTimeoutError: ``units`` exceeds ``max_units`` or ``tenant_max_units``, so
                the request could never be granted.
        """
        self._check_request(job_id, units)
        lease, _, _ = self._try(job_id, units, ttl_s)
        return lease

    def acquire_blocking(
        self,
        job_id: str,
        units: int,
        *,
        ttl_s: float = 30.0,
        timeout_s: float = 300.0,
        retry_delay_s: float = 1.0,
        backoff: float = 1.5,
        max_delay_s: float = 10.0,
        check: Callable[[], None] | None = None,
    ) -> Lease:
        """Like ``acquire``, retrying with growing delays (the paper's delayed retry) until granted.

        ``check`` is called at least every 0.2 s while waiting; what it raises (a cancelled
        job's error) ends the wait.

        Raises:
            ResourceTimeoutError: not granted within ``timeout_s``, or never grantable.
        """
        self._check_request(job_id, units)
        _check_ttl(ttl_s)
        deadline = time.monotonic() + timeout_s
        delay = retry_delay_s
        while True:
            lease, total, mine = self._try(job_id, units, ttl_s)
            if lease is not None:
                return lease
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                msg = self._timeout_message(job_id, units, timeout_s, total, mine)
                raise ResourceTimeoutError(msg)
            logger.info("job %s waits for %d units (%d in use)", job_id, units, total)
            until = time.monotonic() + max(0.0, min(delay, remaining, max_delay_s))
            while (left := until - time.monotonic()) > 0:
                if check is not None:
                    check()
                time.sleep(min(left, 0.2))
            delay = min(delay * backoff, max_delay_s)

    def _timeout_message(
        self, job_id: str, units: int, timeout_s: float, total: int, mine: int
    ) -> str:
        tenant_part, limits = "", "max_units"
        if self.tenant_max_units is not None:
            tenant_part = f"; tenant {self.tenant!r} uses {mine} of "
            tenant_part += f"tenant_max_units={self.tenant_max_units}"
            limits = "max_units or tenant_max_units"
        return (
            f"job {job_id!r} could not acquire {units} units within timeout_s={timeout_s:g}: "
            f"{total} of max_units={self.max_units} units are in use{tenant_part}. Fix: raise "
            f"{limits}, lower parallelism or the per-trial units, or wait (raise timeout_s)"
        )

    def renew(self, lease: Lease, *, ttl_s: float | None = None) -> bool:
        """Extends ``lease`` by ``ttl_s`` (default: its own); False if it had already expired."""
        ttl_ms = _check_ttl(lease.ttl_s if ttl_s is None else ttl_s)
        return bool(int(self._call("renew", lease.lease_id, ttl_ms)))

    def release(self, lease: Lease) -> bool:
        """Gives the units of ``lease`` back; True if it was live. Safe to call twice."""
        return bool(int(self._call("release", lease.lease_id)))

    def in_use(self, *, tenant: str | None = None) -> int:
        """Units held by live leases, all tenants' or only ``tenant``'s."""
        total, mine = self._call("usage", tenant or "")
        return int(mine) if tenant is not None else int(total)

    def holders(self) -> dict[str, Holding]:
        """Live leases keyed by job id."""
        rows = self._call("holders")
        out: dict[str, Holding] = {}
        for i in range(0, len(rows), 5):
            lease_id, job, units, tenant, ms_left = rows[i : i + 5]
            out[_text(job)] = Holding(
                _text(lease_id), int(units), _text(tenant), int(ms_left) / 1000
            )
        return out


class LeaseKeeper:
    """A daemon thread that renews a lease every ``ttl_s / 3`` until stopped.

    If the lease turns out to have expired (the process stalled longer than its TTL), the
    keeper stops, sets ``lost`` and calls ``on_lost``: the units may already be someone else's.
    Redis errors are logged and retried at the next tick.

    Args:
        limiter: the limiter that granted the lease.
        lease: the lease to keep.
        interval_s: seconds between renewals; default ``lease.ttl_s / 3``.
        on_lost: called with the lease, from the keeper thread, if it is lost.
    """

    def __init__(
        self,
        limiter: ResourceLimiter,
        lease: Lease,
        *,
        interval_s: float | None = None,
        on_lost: Callable[[Lease], None] | None = None,
    ) -> None:
        self.limiter = limiter
        self.lease = lease
        self.interval_s = lease.ttl_s / 3 if interval_s is None else interval_s
        self.on_lost = on_lost
        self._stop = threading.Event()
        self._lost = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"lease-keeper-{lease.job_id}", daemon=True
        )

    @property
    def lost(self) -> bool:
        """True once a renewal found the lease expired."""
        return self._lost.is_set()

    def start(self) -> LeaseKeeper:
        """Starts renewing; returns self."""
        self._thread.start()
        return self

    def stop(self, *, timeout_s: float = 5.0) -> None:
        """Stops renewing (the lease is not released). Idempotent."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                alive = self.limiter.renew(self.lease)
            except (redis.RedisError, OSError) as exc:
                logger.warning("renewing lease of job %s failed: %s", self.lease.job_id, exc)
                continue
            if not alive:
                logger.error("lease of job %s expired before renewal", self.lease.job_id)
                self._lost.set()
                if self.on_lost is not None:
                    self.on_lost(self.lease)
                return

    def __enter__(self) -> LeaseKeeper:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
