"""The Resource Limiter's Lua script: every operation, atomic, by the Redis server's clock.

:class:`ultron.limiter.resource_limiter.ResourceLimiter` runs it; its module docstring gives
the rules of the queue that the script keeps.

Keys under ``{namespace}:limiter:`` (:func:`ultron.redis.keys.limiter`): ``leases``
(sorted set of lease ids scored by expiry in ms), ``units``, ``tenant``, ``owners`` and
``granted`` (hashes lease id -> units, tenant, job id, grant time in ms), ``jobs`` (hash job
id -> lease id, which makes ``acquire`` idempotent), ``waiting`` (sorted set of waiting job ids
by arrival ticket), ``waiters`` (hash job id -> JSON tenant, units, tenant limit, arrival
ms), ``waiter_expiry`` (sorted set of waiting job ids by expiry ms), ``heads`` (hash tenant
-> its oldest waiting job), ``seq`` (the ticket counter), ``served`` (hash tenant -> ticket of
its last grant), ``events`` (a pub/sub channel, not a key), and the limits ``max_units`` (a
string) and ``tenant_max_units`` (hash tenant -> units; :mod:`ultron.limiter.limits`).
"""

from __future__ import annotations

__all__ = ["KEY_NAMES", "SCRIPT"]

KEY_NAMES = (
    "leases", "units", "tenant", "owners", "jobs", "granted",
    "waiting", "waiters", "waiter_expiry", "seq", "served", "heads", "events",
)  # fmt: skip

# One script for every operation, so that each one reaps expired leases and waiters first, by
# the server's clock.  KEYS: as KEY_NAMES, in order (the last, ``events``, is the channel that
# wakes waiting jobs when units or turns may have moved).  ARGV[1]: the operation.
SCRIPT = """
if redis.replicate_commands then redis.replicate_commands() end
-- Units may be fractions (a trial of 0.25 GPU): sums are compared with a tolerance, and counts
-- go back as strings (Redis would truncate a Lua number to an integer reply).
local EPS = 1e-9
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
-- What keeps ``units`` more for ``tenant`` from being taken now: '' (nothing), a waiting job
-- that comes first, '(max_units)' or '(tenant_max_units)'. ``ticket``: the asker's place in
-- the queue (math.huge: it arrives now, behind every waiter).
local function blocked(tenant, units, ticket, total, by, max_units, tenant_max)
  local mine = by[tenant] or 0
  if total + units > max_units + EPS then return '(max_units)' end
  if tenant_max > 0 and mine + units > tenant_max + EPS then return '(tenant_max_units)' end
  local me, room = {ticket = ticket, turn = served(tenant)}, max_units - total
  for _, h in ipairs(heads()) do
    if h.t == tenant then
      if h.ticket < me.ticket then return h.job end
    elseif first(h, me) and h.u <= max_units + EPS
        and (h.m == 0 or (by[h.t] or 0) + h.u <= h.m + EPS) then
      if h.u > room + EPS or room - h.u < units - EPS then return h.job end
      room = room - h.u
    end
  end
  return ''
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
    return {1, existing, redis.call('HGET', KEYS[2], existing),
            redis.call('HGET', KEYS[3], existing), tostring(total), tostring(mine), '', 1}
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
  local blocker = blocked(tenant, units, tonumber(ticket) or math.huge, total, by, max_units,
                          tenant_max)
  if blocker ~= '' then
    local head = redis.call('HGET', KEYS[12], tenant) == job or not ticket
    return {0, '', 0, '', tostring(total), tostring(mine), blocker, head and 1 or 0}
  end
  unqueue(job)
  redis.call('HSET', KEYS[11], tenant, redis.call('INCR', KEYS[10]))
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[6]), ARGV[2])
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[4])
  redis.call('HSET', KEYS[3], ARGV[2], tenant)
  redis.call('HSET', KEYS[4], ARGV[2], job)
  redis.call('HSET', KEYS[5], job, ARGV[2])
  redis.call('HSET', KEYS[6], ARGV[2], now)
  wake()
  return {1, ARGV[2], ARGV[4], tenant, tostring(total + units), tostring(mine + units), '', 1}
elseif op == 'resize' then
  -- ARGV: op, lease_id, units, max_units, tenant_max_units (0: none).  A live lease takes
  -- more units as a new request would (behind every waiter: growing never jumps the queue) or
  -- gives some back.  Returns {1, units held} when done, {0, what holds it back} when there is
  -- no room, {-1, ''} when the lease is not live.
  local id, units = ARGV[2], tonumber(ARGV[3])
  if not redis.call('ZSCORE', KEYS[1], id) then return {-1, ''} end
  local held = tonumber(redis.call('HGET', KEYS[2], id) or '0')
  if units > held + EPS then
    local total, by = usage()
    local tenant = redis.call('HGET', KEYS[3], id) or ''
    local blocker = blocked(tenant, units - held, math.huge, total, by, tonumber(ARGV[4]),
                            tonumber(ARGV[5]))
    if blocker ~= '' then return {0, blocker} end
  end
  redis.call('HSET', KEYS[2], id, ARGV[3])
  if units < held - EPS then wake() end
  return {1, ARGV[3]}
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
  return {tostring(total), tostring(by[ARGV[2]] or 0)}
elseif op == 'holders' then  -- flat: lease_id, job_id, units, tenant, ms to expiry, granted ms
  local out, rows = {}, redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  for i = 1, #rows, 2 do
    local id = rows[i]
    table.insert(out, id)
    table.insert(out, redis.call('HGET', KEYS[4], id) or '')
    table.insert(out, redis.call('HGET', KEYS[2], id) or '0')
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
      table.insert(out, tostring(w.u))
      table.insert(out, w.s)
      table.insert(out, tonumber(redis.call('ZSCORE', KEYS[9], job) or now) - now)
    end
  end
  return out
end
return redis.error_reply('unknown limiter operation ' .. tostring(op))
"""
