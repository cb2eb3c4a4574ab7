"""Tenants as Redis ACL users: who a client is decides which keys it can reach.

A tenant is a Redis ACL user named ``tenant:<name>`` (:func:`add_tenant`, ``ultron tenants
add``) whose key patterns (:func:`acl_rules`) cover only its own namespace
(:func:`ultron.redis.keys.tenant_namespace`: its jobs, score cache and logs) and the resource
limiter's shared keys, which the limiter's Lua script touches on behalf of every tenant's job
(a script may only use keys in its caller's patterns). It may not run administrative or
dangerous commands (``ACL``, ``CONFIG``, ``KEYS``, ``FLUSHALL``...), only ``ACL WHOAMI``.

Any other user (the ``default`` user of a Redis with a password or none, or an operator's own
ACL user) is an admin: it sees every tenant's jobs and sets limits (:func:`caller_tenant` is
None). A Redis without ACL users, the embedded one of a laptop, is used by the ``default`` user
only: everything works as it did before tenants, as one tenant (``default``).

A tenant's credentials are the user name and a password made here and shown once; the Redis
keeps only its hash. :func:`rotate_tenant` gives the user a new password and disconnects the
clients that logged in with the old one; :func:`remove_tenant` deletes the user (its keys stay
until an admin deletes them).

Example:
    >>> import redis
    >>> admin = redis.Redis.from_url(redis_url)
    >>> password = add_tenant(admin, "doc-team")
    >>> tenant = redis.Redis.from_url(tenant_url(redis_url, "doc-team", password))
    >>> caller_tenant(tenant), caller_tenant(admin)
    ('doc-team', None)
    >>> _ = tenant.hset("ultron:t:doc-team:job:j-1", "status", "running")   # its own: fine
    >>> try:
    ...     tenant.exists("ultron:job:j-1")  # another tenant's, or a job of the admin's
    ... except redis.exceptions.NoPermissionError:
    ...     print("NOPERM")
    NOPERM
    >>> remove_tenant(admin, "doc-team"); _ = admin.delete("ultron:t:doc-team:job:j-1")
"""

from __future__ import annotations

import secrets
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from redis.exceptions import NoPermissionError, ResponseError

from ultron.errors import ConfigIssue, SpecError
from ultron.redis import keys

__all__ = [
    "USER_PREFIX",
    "acl_rules",
    "add_tenant",
    "caller_tenant",
    "check_tenant",
    "is_no_permission",
    "list_tenants",
    "remove_tenant",
    "rotate_tenant",
    "tenant_url",
    "user_name",
]

USER_PREFIX = "tenant:"
"""The ACL user of tenant ``T`` is ``tenant:T``; any other user is an admin."""

# Commands a tenant may run: all but the administrative and dangerous ones (ACL, CONFIG,
# KEYS, FLUSHALL, DEBUG, MONITOR, INFO...), plus asking who it is and naming its connection.
_COMMANDS = ("+@all", "-@admin", "-@dangerous", "+acl|whoami", "+client|setname", "+client|id")
# The limiter's keys a tenant only reads where the server can say so (Redis 7: ``%R~``).
_LIMITS = ("max_units", "tenant_max_units")


def user_name(tenant: str) -> str:
    """The ACL user of ``tenant``."""
    return f"{USER_PREFIX}{tenant}"


def _check_name(tenant: str) -> str:
    from ultron.paths import check_job_id

    try:
        check_job_id(tenant)
    except SpecError as exc:
        rule = exc.issues[0].rule.replace("a job id", "a tenant name", 1)
        raise SpecError(
            [ConfigIssue("tenant", tenant, rule, "use a name such as team-a")]
        ) from None
    if tenant == keys.DEFAULT_TENANT:
        raise SpecError(
            [
                ConfigIssue(
                    "tenant",
                    tenant,
                    "'default' is the tenant of the admin and of a Redis without tenants; a "
                    "tenant of its own needs another name",
                    "use a name such as team-a",
                )
            ]
        )
    return tenant


def _server_major(client: Any) -> int:
    try:
        version = str(client.info("server").get("redis_version", "6"))
    except (ResponseError, NoPermissionError):
        return 6
    return int(version.split(".")[0])


def acl_rules(tenant: str, *, server_major: int = 7) -> list[str]:
    """The ``ACL SETUSER`` rules (without the password) of ``tenant``'s user.

    Example:
        >>> acl_rules("team-a")[:3]
        ['on', '~ultron:t:team-a:*', '%R~ultron:limiter:max_units']
    """
    own = [f"~{pattern}" for pattern in keys.tenant_key_patterns(tenant)]
    # Redis 6 has no read-only key patterns: a tenant there can also write the limits.
    read = "%R~" if server_major >= 7 else "~"
    limits = [f"{read}{keys.limiter(name)}" for name in _LIMITS]
    # ``events`` too: the script names its channel among its keys.
    shared = [f"~{keys.limiter(name)}" for name in keys.LIMITER_KEYS if name not in _LIMITS]
    channels = ["resetchannels", f"&{keys.limiter('events')}"]
    return ["on", *own, *limits, *shared, *channels, *_COMMANDS]


def add_tenant(client: Any, tenant: str) -> str:
    """Create ``tenant``'s ACL user and return its password (the Redis keeps only its hash).

    Raises:
        SpecError: the name is not a tenant name, or the tenant exists already.
    """
    _check_name(tenant)
    if client.acl_getuser(user_name(tenant)) is not None:
        raise SpecError(
            [
                ConfigIssue(
                    "tenant",
                    tenant,
                    "the tenant exists already (its password is shown only when it is made)",
                    f"`ultron tenants rotate {tenant}` gives it a new password",
                )
            ]
        )
    password = secrets.token_urlsafe(24)
    rules = acl_rules(tenant, server_major=_server_major(client))
    client.execute_command("ACL", "SETUSER", user_name(tenant), "reset", f">{password}", *rules)
    return password


def _known(client: Any, tenant: str) -> str:
    _check_name(tenant)
    if client.acl_getuser(user_name(tenant)) is None:
        raise SpecError(
            [
                ConfigIssue(
                    "tenant",
                    tenant,
                    "no such tenant in this Redis",
                    "`ultron tenants list` lists them",
                )
            ]
        )
    return user_name(tenant)


def rotate_tenant(client: Any, tenant: str) -> str:
    """Give ``tenant`` a new password (returned) and disconnect the clients that logged in
    with the old one, which no longer works."""
    user = _known(client, tenant)
    password = secrets.token_urlsafe(24)
    client.execute_command("ACL", "SETUSER", user, "resetpass", f">{password}")
    client.execute_command("CLIENT", "KILL", "USER", user)
    return password


def remove_tenant(client: Any, tenant: str) -> None:
    """Delete ``tenant``'s user and disconnect its clients; its keys stay (an admin deletes
    them: ``SCAN`` with the pattern of :func:`ultron.redis.keys.tenant_key_patterns`)."""
    user = _known(client, tenant)
    client.execute_command("ACL", "DELUSER", user)  # disconnects its clients too


def list_tenants(client: Any) -> list[str]:
    """The tenants of this Redis, sorted."""
    users = [u.decode() if isinstance(u, bytes) else str(u) for u in client.acl_users()]
    return sorted(u[len(USER_PREFIX) :] for u in users if u.startswith(USER_PREFIX))


def caller_tenant(client: Any) -> str | None:
    """The tenant whose credentials ``client`` uses, or None for an admin (any other user)."""
    try:
        who = client.acl_whoami()
    except ResponseError:  # a server without ACLs (before Redis 6): no tenants
        return None
    name = who.decode() if isinstance(who, bytes) else str(who)
    return name[len(USER_PREFIX) :] if name.startswith(USER_PREFIX) else None


def check_tenant(client: Any, tenant: str) -> None:
    """Refuse a job spec's ``tenant`` that is not the one the credentials say.

    An admin (:func:`caller_tenant` None) runs jobs for any tenant; a tenant's credentials
    run its own jobs only.

    Raises:
        SpecError: on the field ``tenant``.
    """
    mine = caller_tenant(client)
    if mine is None or mine == tenant:
        return
    raise SpecError(
        [
            ConfigIssue(
                "tenant",
                tenant,
                "the tenant of a job is the one its Redis credentials say, and these "
                f"credentials are those of tenant {mine!r}",
                f"set tenant: {mine} in the spec, or use that tenant's credentials",
            )
        ]
    )


def is_no_permission(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis refusing a key (or command) to these credentials (NOPERM)."""
    return isinstance(exc, NoPermissionError) or (
        isinstance(exc, ResponseError) and str(exc).startswith("NOPERM")
    )


def tenant_url(url: str, tenant: str, password: str) -> str:
    """``url`` with ``tenant``'s user and password in place of any it had.

    Example:
        >>> tenant_url("redis://:old@localhost:6379/0", "team-a", "s3cret")
        'redis://tenant%3Ateam-a:s3cret@localhost:6379/0'
        >>> tenant_url("unix:///run/redis.sock?db=0", "team-a", "s3cret")
        'unix://tenant%3Ateam-a:s3cret@/run/redis.sock?db=0'
    """
    parts = urlsplit(url)  # redis://, rediss://, unix:// (then the host is empty), sentinel
    host = parts.netloc.rsplit("@", 1)[-1]
    netloc = f"{quote(user_name(tenant), safe='')}:{quote(password, safe='')}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
