"""The Resource Limiter's stored limits: a global ``max_units`` and per-tenant ones.

The limits are ``max_units`` and, per tenant, ``tenant_max_units``. A platform team stores
them in Redis (``ultron limits set``, :func:`set_max_units`, :func:`set_tenant_max_units`) and
each job reads them when it starts waiting (:func:`read_max_units`,
:func:`read_tenant_max_units`); :mod:`ultron.limiter.resource_limiter` enforces them.
"""

from __future__ import annotations

from typing import Any

import redis

from ultron.errors import ConfigIssue, UltronError
from ultron.redis import keys

__all__ = [
    "read_max_units",
    "read_tenant_max_units",
    "set_max_units",
    "set_tenant_max_units",
    "tenant_limits",
]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _issue(field: str, value: object, rule: str, fix: str) -> str:
    return str(ConfigIssue(field, value, rule, fix))


def _check_count(field: str, value: object, *, fix: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UltronError(_issue(field, value, "it must be an integer of at least 1", fix))
    return value


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
