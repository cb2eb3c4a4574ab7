"""``ultron tenants``: the admin's commands that make, list, rotate and remove tenants, each a
Redis ACL user whose keys are its own (:mod:`ultron.redis.tenants`).

``add`` and ``rotate`` show the tenant's password once: the Redis keeps only its hash. With
``--save`` they also write the tenant's Redis URL into a 0600 file under
``ULTRON_HOME/tenants/`` (a 0700 folder, as :mod:`ultron.servers.private` keeps secrets), to
hand over or to point ``REDIS_URL`` at; otherwise put it in the secret store the team uses.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from ultron.cli.admin import RedisUrl, shared_redis
from ultron.cli.exits import fail
from ultron.errors import UltronError

__all__ = ["register", "tenants_app"]

tenants_app = typer.Typer(
    help="The tenants: Redis ACL users that see only their own jobs (admin only).",
    no_args_is_help=True,
)

Save = Annotated[
    bool,
    typer.Option(
        "--save", help="Also write the tenant's Redis URL to ULTRON_HOME/tenants/ (0600)."
    ),
]


def register(app: typer.Typer) -> None:
    """Adds ``ultron tenants`` to the ``ultron`` command."""
    app.add_typer(tenants_app, name="tenants")


def _admin(url: str) -> Any:
    """A client of the Redis at ``url``, whose credentials must be an admin's."""
    from ultron.redis.client import connect
    from ultron.redis.tenants import caller_tenant

    client = connect(url)
    if caller_tenant(client) is not None:
        fail(
            "`ultron tenants` is the admin's, and these Redis credentials are a tenant's. Fix: "
            "use the admin's credentials (--redis-url or REDIS_URL)"
        )
    return client


def _save(tenant: str, url: str) -> Path:
    from ultron.paths import ultron_home
    from ultron.servers.private import private_folder

    path = private_folder(ultron_home() / "tenants") / f"{tenant}.url"
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(url + "\n")
    tmp.replace(path)
    return path


def _show(tenant: str, url: str, password: str, save: bool, verb: str) -> None:
    from ultron.redis.tenants import tenant_url, user_name

    out = Console(soft_wrap=True)
    own = tenant_url(url, tenant, password)
    out.print(
        f"tenant {escape(tenant)} {verb}: Redis user {escape(user_name(tenant))}", highlight=False
    )
    out.print(f"password (shown once): {escape(password)}", highlight=False)
    out.print(f"its REDIS_URL: {escape(own)}", highlight=False)
    if save:
        out.print(f"saved to {escape(str(_save(tenant, own)))} (0600)", highlight=False)


@tenants_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="The tenant, e.g. team-a.")],
    save: Save = False,
    redis_url: RedisUrl = None,
) -> None:
    """Make a tenant: an ACL user that reaches only its own jobs, score cache and logs."""
    from ultron.redis.tenants import add_tenant

    _new_password(add_tenant, name, save, redis_url, "added")


@tenants_app.command("rotate")
def rotate(
    name: Annotated[str, typer.Argument(help="The tenant.")],
    save: Save = False,
    redis_url: RedisUrl = None,
) -> None:
    """Give a tenant a new password: the old one stops working, its clients are disconnected."""
    from ultron.redis.tenants import rotate_tenant

    _new_password(rotate_tenant, name, save, redis_url, "has a new password")


def _new_password(
    make: Callable[[Any, str], str], name: str, save: bool, redis_url: str | None, done: str
) -> None:
    """Give tenant ``name`` a password with ``make`` (add or rotate) and show it once."""
    with shared_redis(redis_url) as url:
        try:
            password = make(_admin(url), name)
        except UltronError as exc:
            fail(exc)
    _show(name, url, password, save, done)


@tenants_app.command("remove")
def remove(
    name: Annotated[str, typer.Argument(help="The tenant.")],
    redis_url: RedisUrl = None,
) -> None:
    """Remove a tenant's user (its clients are disconnected; its jobs' keys stay)."""
    from ultron.redis.tenants import remove_tenant

    with shared_redis(redis_url) as url:
        try:
            remove_tenant(_admin(url), name)
        except UltronError as exc:
            fail(exc)
    Console().print(f"tenant {escape(name)} removed", highlight=False)


@tenants_app.command("list")
def list_(redis_url: RedisUrl = None) -> None:
    """The tenants of this Redis."""
    from ultron.redis.tenants import list_tenants

    with shared_redis(redis_url) as url:
        names = list_tenants(_admin(url))
    out = Console(soft_wrap=True)
    if not names:
        out.print("no tenant: every client is the admin (one tenant, default)", highlight=False)
    for name in names:
        out.print(escape(name), highlight=False)
