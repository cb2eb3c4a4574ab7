"""The Resource Limiter (paper Fig. 7): a Redis semaphore of compute units, made atomic and fair.

The paper reads ``resource_counter``, compares it with ``max_resources``, then ``INCRBY``s it:
two jobs can both pass the check, and a job that dies never gives its units back. Here a grant
is a *lease* that one Lua script checks and records at once; a lease not renewed in time
expires (by the Redis server's clock), so a killed job's units come back on their own.

Limits: a global ``max_units`` and, per tenant, ``tenant_max_units``; a platform team stores
them in Redis (``ultron limits set``, :func:`set_max_units`, :func:`set_tenant_max_units`) and
each job reads them when it starts waiting (:func:`read_max_units`,
:func:`read_tenant_max_units`).

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

Keys under ``{namespace}:limiter:`` (:func:`ultron.services.keys.limiter`): ``leases``
(sorted set of lease ids scored by expiry in ms), ``units``, ``tenant``, ``owners`` and
``granted`` (hashes lease id -> units, tenant, job id, grant time in ms), ``jobs`` (hash job
id -> lease id, which makes ``acquire`` idempotent), ``waiting`` (sorted set of waiting job ids
by arrival ticket), ``waiters`` (hash job id -> JSON tenant, units, tenant limit, arrival
ms), ``waiter_expiry`` (sorted set of waiting job ids by expiry ms), ``heads`` (hash tenant
-> its oldest waiting job), ``seq`` (the ticket counter), ``served`` (hash tenant -> ticket of
its last grant), ``events`` (a pub/sub channel, not a key), and the limits ``max_units`` (a
string) and ``tenant_max_units`` (hash tenant -> units).
"""

from __future__ import annotations

import json
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

__all__ = [
    "Holding",
    "Lease",
    "LeaseKeeper",
    "ResourceLimiter",
    "Waiting",
    "read_max_units",
    "read_tenant_max_units",
    "set_max_units",
    "set_tenant_max_units",
    "tenant_limits",
]

logger = logging.getLogger(__name__)

_KEY_NAMES = (
    "leases", "units", "tenant", "owners", "jobs", "granted",
    "waiting", "waiters", "waiter_expiry", "seq", "served", "heads", "events",
)  # fmt: skip

# One script for every operation, so that each one reaps expired leases and waiters first, by
# the server's clock.  KEYS: as _KEY_NAMES, in order (the last, ``events``, is the channel that
# wakes waiting jobs when units or turns may have moved).  ARGV[1]: the operation.
_SCRIPT = """
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function drop(id)
  local job = redis.call('HGET', KEYS[4], id)
  if job and redis.call('HGET', KEYS[5], job) == id then redis.call('HDEL', KEYS[5], job) end
  for _, k in ipairs({2, 3, 4, 6}) do redis.call('HDEL', KEYS[k], id) end
  return redis.call('ZREM', KEYS[1], id)
end
local function tenant_of(job)
  local raw = redis.call('HGET', KEYS[8], job)
  return raw and cjson.decode(raw).t
end
-- Out of the queue; a tenant's head (KEYS[12]: tenant -> its oldest waiter) passes to the next.
local function unqueue(job)
  local tenant = tenant_of(job)
  redis.call('HDEL', KEYS[8], job)
  redis.call('ZREM', KEYS[9], job)
  local removed = redis.call('ZREM', KEYS[7], job)
  if tenant and redis.call('HGET', KEYS[12], tenant) == job then
    redis.call('HDEL', KEYS[12], tenant)
    for _, other in ipairs(redis.call('ZRANGE', KEYS[7], 0, -1)) do
      if tenant_of(other) == tenant then redis.call('HSET', KEYS[12], tenant, other) break end
    end
  end
  return removed
end
-- News for the waiting jobs: the heads, the only ones that may take units (see _wait).
local function wake()
  local hs = redis.call('HVALS', KEYS[12])
  if #hs > 0 then redis.call('PUBLISH', KEYS[13], cjson.encode(hs)) end
end
local reaped = 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)) do
  reaped = reaped + drop(id)
end
for _, job in ipairs(redis.call('ZRANGEBYSCORE', KEYS[9], '-inf', now)) do
  reaped = reaped + unqueue(job)
end
if reaped > 0 then wake() end
local function usage()
  local total, by = 0, {}
  for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    local u = tonumber(redis.call('HGET', KEYS[2], id) or '0')
    local tenant = redis.call('HGET', KEYS[3], id) or ''
    total = total + u
    by[tenant] = (by[tenant] or 0) + u
  end
  return total, by
end
local function served(tenant) return tonumber(redis.call('HGET', KEYS[11], tenant) or '0') end
local function first(a, b) return a.turn < b.turn or (a.turn == b.turn and a.ticket < b.ticket) end
-- Each tenant's oldest waiter, in the order of their turns.
local function heads()
  local out, rows = {}, redis.call('HGETALL', KEYS[12])
  for i = 1, #rows, 2 do
    local job = rows[i + 1]
    local raw, ticket = redis.call('HGET', KEYS[8], job), redis.call('ZSCORE', KEYS[7], job)
    if raw and ticket then
      local w = cjson.decode(raw)
      w.job, w.ticket, w.turn = job, tonumber(ticket), served(w.t)
      table.insert(out, w)
    end
  end
  table.sort(out, first)
  return out
end
local op = ARGV[1]
if op == 'acquire' then
  -- ARGV: op, lease_id, job_id, units, tenant, ttl_ms, max_units, tenant_max_units (0: none),
  -- queue_ttl_ms (0: do not queue).  Returns {granted, lease_id, units, tenant, total_in_use,
  -- tenant_in_use, what holds it back: a job id, '(max_units)' or '(tenant_max_units)', whether
  -- the job heads its tenant's queue (only a head may take units; the others wait for news)}.
  local job, tenant, units = ARGV[3], ARGV[5], tonumber(ARGV[4])
  local max_units, tenant_max, queue_ttl = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
  local total, by = usage()
  local mine = by[tenant] or 0
  local existing = redis.call('HGET', KEYS[5], job)
  if existing and redis.call('ZSCORE', KEYS[1], existing) then
    unqueue(job)
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[6]), existing)
    return {1, existing, tonumber(redis.call('HGET', KEYS[2], existing)),
            redis.call('HGET', KEYS[3], existing), total, mine, '', 1}
  end
  local ticket = redis.call('ZSCORE', KEYS[7], job)
  if queue_ttl > 0 then
    if not ticket then
      ticket = redis.call('INCR', KEYS[10])
      redis.call('ZADD', KEYS[7], ticket, job)
      local entry = {t = tenant, u = units, m = tenant_max, s = now}
      redis.call('HSET', KEYS[8], job, cjson.encode(entry))
      redis.call('HSETNX', KEYS[12], tenant, job)
    end
    redis.call('ZADD', KEYS[9], now + queue_ttl, job)
  end
  local me = {ticket = tonumber(ticket) or math.huge, turn = served(tenant)}
  local blocker = ''
  if total + units > max_units then blocker = '(max_units)'
  elseif tenant_max > 0 and mine + units > tenant_max then blocker = '(tenant_max_units)'
  else
    local room = max_units - total
    for _, h in ipairs(heads()) do
      if h.t == tenant then
        if h.ticket < me.ticket then blocker = h.job break end
      elseif first(h, me) and h.u <= max_units and (h.m == 0 or (by[h.t] or 0) + h.u <= h.m) then
        if h.u > room or room - h.u < units then blocker = h.job break end
        room = room - h.u
      end
    end
  end
  if blocker ~= '' then
    local head = redis.call('HGET', KEYS[12], tenant) == job or not ticket
    return {0, '', 0, '', total, mine, blocker, head and 1 or 0}
  end
  unqueue(job)
  redis.call('HSET', KEYS[11], tenant, redis.call('INCR', KEYS[10]))
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[6]), ARGV[2])
  redis.call('HSET', KEYS[2], ARGV[2], units)
  redis.call('HSET', KEYS[3], ARGV[2], tenant)
  redis.call('HSET', KEYS[4], ARGV[2], job)
  redis.call('HSET', KEYS[5], job, ARGV[2])
  redis.call('HSET', KEYS[6], ARGV[2], now)
  wake()
  return {1, ARGV[2], units, tenant, total + units, mine + units, '', 1}
elseif op == 'renew' then  -- ARGV: op, lease_id, ttl_ms
  if not redis.call('ZSCORE', KEYS[1], ARGV[2]) then return 0 end
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
  return 1
elseif op == 'release' then  -- ARGV: op, lease_id
  local dropped = drop(ARGV[2])
  if dropped > 0 then wake() end
  return dropped
elseif op == 'leave' then  -- ARGV: op, job_id: it stops waiting
  local removed = unqueue(ARGV[2])
  if removed > 0 then wake() end
  return removed
elseif op == 'usage' then  -- ARGV: op, tenant
  local total, by = usage()
  return {total, by[ARGV[2]] or 0}
elseif op == 'holders' then  -- flat: lease_id, job_id, units, tenant, ms to expiry, granted ms
  local out, rows = {}, redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  for i = 1, #rows, 2 do
    local id = rows[i]
    table.insert(out, id)
    table.insert(out, redis.call('HGET', KEYS[4], id) or '')
    table.insert(out, tonumber(redis.call('HGET', KEYS[2], id) or '0'))
    table.insert(out, redis.call('HGET', KEYS[3], id) or '')
    table.insert(out, tonumber(rows[i + 1]) - now)
    table.insert(out, tonumber(redis.call('HGET', KEYS[6], id) or '0'))
  end
  return out
elseif op == 'waiters' then  -- flat, by arrival: job_id, tenant, units, arrival ms, ms to expiry
  local out, rows = {}, redis.call('ZRANGE', KEYS[7], 0, -1)
  for _, job in ipairs(rows) do
    local raw = redis.call('HGET', KEYS[8], job)
    if raw then
      local w = cjson.decode(raw)
      table.insert(out, job)
      table.insert(out, w.t)
      table.insert(out, w.u)
      table.insert(out, w.s)
      table.insert(out, tonumber(redis.call('ZSCORE', KEYS[9], job) or now) - now)
    end
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
        since: when the units were granted (seconds since the epoch, the Redis server's clock).
    """

    lease_id: str
    units: int
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
    units: int
    since: float
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


def _stored_count(key: str, raw: Any, *, unset: str) -> int:
    text = _text(raw).strip()
    if not text.isdigit() or int(text) < 1:
        fix = f"set it to a positive integer with `ultron limits set`, or {unset}"
        raise UltronError(_issue(key, text, "it must be an integer of at least 1", fix))
    return int(text)


def read_max_units(client: redis.Redis, *, default: int, namespace: str = keys.NAMESPACE) -> int:
    """Returns the cluster-wide limit from ``{namespace}:limiter:max_units``, else ``default``.

    A platform team sets it with ``ultron limits set --max-units 64`` (or
    ``SET ultron:limiter:max_units 64``).

    Raises:
        UltronError: the key holds something other than a positive integer.
    """
    key = keys.limiter("max_units", namespace=namespace)
    raw = client.get(key)
    if raw is None:
        return default
    return _stored_count(key, raw, unset=f"DEL it to use the default {default}")


def read_tenant_max_units(
    client: redis.Redis, tenant: str, *, namespace: str = keys.NAMESPACE
) -> int | None:
    """Returns ``tenant``'s limit from ``{namespace}:limiter:tenant_max_units``, else None.

    A platform team sets it with ``ultron limits set --tenant T --max-units 8`` (or
    ``HSET ultron:limiter:tenant_max_units T 8``); None means no limit beyond the global one.

    Raises:
        UltronError: the tenant's field holds something other than a positive integer.
    """
    key = keys.limiter("tenant_max_units", namespace=namespace)
    raw = client.hget(key, tenant)
    if raw is None:
        return None
    return _stored_count(f"{key}[{tenant}]", raw, unset="unset it (`--unset`) for no limit")


def tenant_limits(client: redis.Redis, *, namespace: str = keys.NAMESPACE) -> dict[str, int]:
    """Every tenant limit stored in Redis, tenant -> units (checked as in ``read_*``)."""
    key = keys.limiter("tenant_max_units", namespace=namespace)
    raw = client.hgetall(key)
    return {
        _text(tenant): _stored_count(f"{key}[{_text(tenant)}]", value, unset="unset it")
        for tenant, value in sorted(raw.items(), key=lambda item: _text(item[0]))
    }


def set_max_units(
    client: redis.Redis, units: int | None, *, namespace: str = keys.NAMESPACE
) -> None:
    """Stores the cluster-wide limit; None removes it (jobs then use ``ULTRON_MAX_UNITS``).

    Jobs read it when they start waiting; jobs already holding units keep them.
    """
    key = keys.limiter("max_units", namespace=namespace)
    if units is None:
        client.delete(key)
        return
    client.set(key, _check_count("--max-units", units, fix="pass 1 or more, or --unset"))


def set_tenant_max_units(
    client: redis.Redis, tenant: str, units: int | None, *, namespace: str = keys.NAMESPACE
) -> None:
    """Stores ``tenant``'s limit; None removes it (only the global limit applies)."""
    if not tenant:
        raise UltronError(_issue("--tenant", tenant, "it must not be empty", "name the tenant"))
    key = keys.limiter("tenant_max_units", namespace=namespace)
    if units is None:
        client.hdel(key, tenant)
        return
    client.hset(key, tenant, _check_count("--max-units", units, fix="pass 1 or more, or --unset"))


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
        self._keys = [keys.limiter(name, namespace=namespace) for name in _KEY_NAMES]
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

    def _try(
        self, job_id: str, units: int, ttl_s: float, *, queue: bool
    ) -> tuple[Lease | None, int, int, str, bool]:
        ttl_ms = _check_ttl(ttl_s)
        granted, lease_id, held, tenant, total, mine, blocker, head = self._call(
            "acquire", uuid.uuid4().hex, job_id, units, self.tenant, ttl_ms,
            self.max_units, self.tenant_max_units or 0, ttl_ms if queue else 0,
        )  # fmt: skip
        if not int(granted):
            return None, int(total), int(mine), _text(blocker), bool(int(head))
        lease = Lease(_text(lease_id), job_id, int(held), _text(tenant), float(ttl_s))
        return lease, int(total), int(mine), "", True

    def acquire(
        self, job_id: str, units: int, *, ttl_s: float = 30.0, queue: bool = False
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
        units: int,
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
                    "job %s waits for %d units (%d in use; held back by %s)",
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
        self, job_id: str, units: int, timeout_s: float, total: int, mine: int, blocker: str
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

    def in_use(self, *, tenant: str | None = None) -> int:
        """Units held by live leases, all tenants' or only ``tenant``'s."""
        total, mine = self._call("usage", tenant or "")
        return int(mine) if tenant is not None else int(total)

    def holders(self) -> dict[str, Holding]:
        """Live leases keyed by job id."""
        rows = self._call("holders")
        out: dict[str, Holding] = {}
        for i in range(0, len(rows), 6):
            lease_id, job, units, tenant, ms_left, granted_ms = rows[i : i + 6]
            out[_text(job)] = Holding(
                _text(lease_id), int(units), _text(tenant), int(ms_left) / 1000,
                int(granted_ms) / 1000,
            )  # fmt: skip
        return out

    def waiters(self) -> list[Waiting]:
        """Jobs waiting for units, by arrival (live entries only)."""
        rows = self._call("waiters")
        return [
            Waiting(_text(job), _text(tenant), int(units), int(since_ms) / 1000, int(left) / 1000)
            for job, tenant, units, since_ms, left in (
                rows[i : i + 5] for i in range(0, len(rows), 5)
            )
        ]


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
