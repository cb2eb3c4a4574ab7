"""``ultron server start | stop | status``: the Prefect server and the embedded Redis of
``ULTRON_HOME``, each started and stopped by its own tool (:mod:`ultron.servers`).

Jobs start them on demand; they stay up, for the next jobs, until ``ultron server stop``.
"""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

from ultron.cli.exits import fail
from ultron.errors import UltronError

__all__ = ["register", "server_app"]

console = Console(soft_wrap=True, highlight=False)
server_app = typer.Typer(
    help="The Prefect server and the embedded Redis that jobs on this machine share."
)


def register(app: typer.Typer) -> None:
    """Adds ``ultron server`` to the ``ultron`` command."""
    app.add_typer(server_app, name="server")


def _show_prefect(server: object | None) -> None:
    from ultron.servers.prefect import PrefectServer

    if isinstance(server, PrefectServer):
        console.print(f"prefect: {escape(server.api_url)} (pid {server.pid})")
    else:
        console.print("prefect: not running")


def _show_redis(server: object | None) -> None:
    from ultron.servers.home_redis import PASSWORD, RedisServer

    if isinstance(server, RedisServer):
        tcp = f", tcp {server.address}" if server.address else ""
        password = server.socket.with_name(PASSWORD)
        console.print(
            f"redis: unix socket {escape(str(server.socket))}{escape(tcp)} (pid {server.pid}, "
            f"password in {escape(str(password))})"
        )
    else:
        console.print("redis: not running")


@server_app.command()
def status() -> None:
    """List the Prefect server and the embedded Redis of ULTRON_HOME with their addresses."""
    from ultron.paths import ultron_home
    from ultron.servers.home_redis import running_redis
    from ultron.servers.prefect import running_prefect

    try:
        home = ultron_home()
        _show_prefect(running_prefect(home))
        _show_redis(running_redis(home))
    except UltronError as exc:
        fail(exc)


@server_app.command()
def start() -> None:
    """Start both (each only if it does not run yet) and list them."""
    from ultron.paths import ultron_home
    from ultron.servers.home_redis import start_redis
    from ultron.servers.prefect import start_prefect
    from ultron.settings import settings

    try:
        home = ultron_home()
        _show_prefect(start_prefect(home, timeout_s=settings().prefect_start_timeout_s))
        _show_redis(start_redis(home))
    except UltronError as exc:
        fail(exc)


@server_app.command()
def stop() -> None:
    """Stop both: `prefect server stop`, and SHUTDOWN of the Redis over its socket."""
    from ultron.paths import ultron_home
    from ultron.servers.home_redis import stop_redis
    from ultron.servers.prefect import stop_prefect

    try:
        home = ultron_home()
        prefect_pid = stop_prefect(home)
        redis_pid = stop_redis(home)
    except UltronError as exc:
        fail(exc)
    console.print(
        f"prefect: stopped (pid {prefect_pid})" if prefect_pid else "prefect: was not running"
    )
    console.print(f"redis: stopped (pid {redis_pid})" if redis_pid else "redis: was not running")
