"""Redis with Sentinel: a StatefulSet of Redis servers (append-only files on volumes) and a
StatefulSet of sentinels, each behind a headless Service that gives every pod a stable name.

A Redis server starts as a replica of the master the sentinels name; when no sentinel answers
(the first start), ``ultron-redis-0`` starts as master and the others replicate it. So a
restarted old master comes back as a replica of the one the sentinels promoted. Jobs reach
Redis through the sentinels (``redis+sentinel://``, :func:`sentinel_url`).

Example:
    >>> from ultron.deploy.values import InfraValues
    >>> sentinel_url(InfraValues()).split("@")[1].split(",")[0]
    'ultron-redis-sentinel-0.ultron-redis-sentinel.ultron.svc.cluster.local:26379'
"""

from __future__ import annotations

from ultron.deploy.objects import (
    Obj,
    container,
    meta,
    secret_env,
    service,
    statefulset,
    volume_claim,
)
from ultron.deploy.values import InfraValues

__all__ = ["redis", "redis_env", "sentinel_url"]

SENTINEL_PORT = 26379
_SERVER = "ultron-redis"
_SENTINEL = "ultron-redis-sentinel"

# Both scripts read NAMESPACE, MASTER_NAME, SENTINELS and REDIS_PASSWORD from the environment.
_FIND_MASTER = """\
fqdn() { echo "$1.$2.$NAMESPACE.svc.cluster.local"; }
master=""
i=0
while [ -z "$master" ] && [ "$i" -lt "$SENTINELS" ]; do
  peer=$(fqdn ultron-redis-sentinel-$i ultron-redis-sentinel)
  master=$(redis-cli -h "$peer" -p 26379 -a "$REDIS_PASSWORD" --no-auth-warning \\
    sentinel get-master-addr-by-name "$MASTER_NAME" 2>/dev/null | head -n 1) || master=""
  i=$((i + 1))
done
"""

_SERVER_SCRIPT = f"""\
#!/bin/sh
# The master the sentinels name, else ultron-redis-0 (the first start).
{_FIND_MASTER}me=$(fqdn "$(hostname)" ultron-redis)
[ -z "$master" ] && master=$(fqdn ultron-redis-0 ultron-redis)
cat > /tmp/redis.conf <<EOF
dir /data
appendonly yes
appendfsync everysec
requirepass $REDIS_PASSWORD
masterauth $REDIS_PASSWORD
replica-announce-ip $me
EOF
[ "$master" != "$me" ] && echo "replicaof $master 6379" >> /tmp/redis.conf
exec redis-server /tmp/redis.conf
"""

_SENTINEL_SCRIPT = f"""\
#!/bin/sh
# Monitor the master the other sentinels name, else ultron-redis-0 (the first start).
{_FIND_MASTER}[ -z "$master" ] && master=$(fqdn ultron-redis-0 ultron-redis)
n=0  # sentinel resolves the master's name once, at start: wait for it to answer
until redis-cli -h "$master" -a "$REDIS_PASSWORD" --no-auth-warning ping 2>/dev/null | grep -q PONG
do n=$((n + 1)); [ "$n" -gt 60 ] && break; sleep 2; done
cat > /tmp/sentinel.conf <<EOF
port 26379
sentinel resolve-hostnames yes
sentinel announce-hostnames yes
sentinel announce-ip $(fqdn "$(hostname)" ultron-redis-sentinel)
requirepass $REDIS_PASSWORD
sentinel sentinel-pass $REDIS_PASSWORD
sentinel monitor $MASTER_NAME $master 6379 $((SENTINELS / 2 + 1))
sentinel auth-pass $MASTER_NAME $REDIS_PASSWORD
sentinel down-after-milliseconds $MASTER_NAME 5000
sentinel failover-timeout $MASTER_NAME 60000
EOF
exec redis-sentinel /tmp/sentinel.conf
"""


def _host(pod: str, service_name: str, namespace: str) -> str:
    return f"{pod}.{service_name}.{namespace}.svc.cluster.local"


def sentinel_url(values: InfraValues, password: str = "$(REDIS_PASSWORD)") -> str:
    """The ``REDIS_URL`` of the jobs: every sentinel, the master's name, database 0. The
    default password is Kubernetes' reference to the ``REDIS_PASSWORD`` variable."""
    r, ns = values.redis, values.namespace
    hosts = ",".join(
        f"{_host(f'{_SENTINEL}-{i}', _SENTINEL, ns)}:{SENTINEL_PORT}" for i in range(r.sentinels)
    )
    return f"redis+sentinel://:{password}@{hosts}/{r.master_name}/0?sentinel_password={password}"


def redis_env(values: InfraValues) -> list[Obj]:
    """``REDIS_PASSWORD`` from its Secret, then ``REDIS_URL`` built from it."""
    return [
        secret_env("REDIS_PASSWORD", values.redis.password_secret),
        {"name": "REDIS_URL", "value": sentinel_url(values)},
    ]


def _ping(port: int) -> Obj:
    check = f'redis-cli -p {port} -a "$REDIS_PASSWORD" --no-auth-warning ping | grep -q PONG'
    return {"exec": {"command": ["sh", "-c", check]}, "periodSeconds": 5}


def redis(values: InfraValues) -> list[Obj]:
    """The scripts, the Redis servers and the sentinels, with their Services."""
    r, ns = values.redis, values.namespace
    env = [
        {"name": "NAMESPACE", "value": ns},
        {"name": "MASTER_NAME", "value": r.master_name},
        {"name": "SENTINELS", "value": str(r.sentinels)},
        secret_env("REDIS_PASSWORD", r.password_secret),
    ]
    scripts = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta("ultron-redis-scripts", ns, _SERVER),
        "data": {"redis.sh": _SERVER_SCRIPT, "sentinel.sh": _SENTINEL_SCRIPT},
    }
    pull = values.image_pull_policy
    server_box = container(
        "redis", r.image, pull, command=["sh", "/scripts/redis.sh"], ports={"redis": 6379},
        env=env, mounts={"data": "/data", "scripts": "/scripts"}, probe=_ping(6379),
    )  # fmt: skip
    sentinel_box = container(
        "sentinel", r.image, pull, command=["sh", "/scripts/sentinel.sh"],
        ports={"sentinel": SENTINEL_PORT}, env=env, mounts={"scripts": "/scripts"},
        probe=_ping(SENTINEL_PORT),
    )  # fmt: skip
    claims = [volume_claim("data", r.storage, values.storage_class)]
    scripts_volume = [{"name": "scripts", "configMap": {"name": "ultron-redis-scripts"}}]
    return [
        scripts,
        service(_SERVER, ns, _SERVER, {"redis": 6379}, headless=True),
        statefulset(_SERVER, ns, [server_box], r.replicas, claims=claims, volumes=scripts_volume),
        service(_SENTINEL, ns, _SENTINEL, {"sentinel": SENTINEL_PORT}, headless=True),
        statefulset(
            _SENTINEL, ns, [sentinel_box], r.sentinels, parallel=True, volumes=scripts_volume
        ),
    ]
