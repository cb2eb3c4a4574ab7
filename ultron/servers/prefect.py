"""The Prefect server of ``ULTRON_HOME`` for jobs with no Prefect API of their own.

Without a Prefect API every job would start Prefect's ephemeral server in its own process and
stop it at the end: about ten seconds of each job's start on a small machine. Instead the
first job starts one with Prefect's own tool, ``prefect server start --background``, with its
``PREFECT_HOME`` (pidfile, database) in ``ULTRON_HOME/prefect`` (0700; the database 0600, and
nothing in ``~/.prefect``), on loopback, and the
next jobs use it; it runs until ``ultron server stop`` (``prefect server stop``).

The server requires a generated string (``PREFECT_SERVER_API_AUTH_STRING``, kept in
``ULTRON_HOME/prefect/auth``, 0600) from its clients, which this module gives to the job's
Prefect client (``PREFECT_API_AUTH_STRING``). A user's own Prefect API (``PREFECT_API_URL``, a
profile) always wins; ``ULTRON_PREFECT_SERVER=ephemeral`` keeps Prefect's ephemeral server.

The server runs when Prefect's pidfile names a live server process that listens on a port and
answers ``/health`` there. Two starts at once take turns on a lock of the folder
(:func:`ultron.servers.private.starting`); a port taken between its choice and the server's
bind makes the server exit, and another port is tried.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

from ultron.errors import UltronError
from ultron.paths import ultron_home
from ultron.servers.private import listening_address, private_folder, secret, server_pid, starting
from ultron.settings import settings

__all__ = ["PrefectServer", "prefect_api", "running_prefect", "start_prefect", "stop_prefect"]

logger = logging.getLogger(__name__)

PID_FILE = "server.pid"  # prefect.cli._server_utils.SERVER_PID_FILE_NAME
AUTH = "auth"
_APP = "prefect.server.api.server:create_app"
_HOST = "127.0.0.1"
_PORT_ATTEMPTS = 3
_PREFECT = str(Path(sys.executable).with_name("prefect"))
_DATABASE_SETTINGS = ("PREFECT_SERVER_DATABASE_", "PREFECT_API_DATABASE_")


@dataclasses.dataclass(frozen=True)
class PrefectServer:
    """A running Prefect server: its API URL, its pid and the string its clients send."""

    api_url: str
    pid: int
    auth: str = dataclasses.field(repr=False)


def prefect_folder(home: Path) -> Path:
    """``home/prefect``, the server's ``PREFECT_HOME``, private to this user (0700)."""
    return private_folder(home / "prefect")


def _server_pid(folder: Path) -> int | None:
    """The pid in Prefect's pidfile, if it names a live Prefect server of this user."""
    return server_pid(folder / PID_FILE, lambda proc: _APP in proc.cmdline())


def _healthy(url: str, timeout_s: float = 2.0) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/health", timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


def running_prefect(home: Path) -> PrefectServer | None:
    """The Prefect server of ``home``, if it runs and answers."""
    folder = prefect_folder(home)
    pid = _server_pid(folder)
    address = listening_address(pid) if pid is not None else None
    if pid is None or address is None:
        return None
    url = f"http://{_HOST}:{address[1]}/api"
    return PrefectServer(url, pid, secret(folder / AUTH)) if _healthy(url) else None


def _server_env(folder: Path) -> dict[str, str]:
    """The environment of ``prefect server start`` and ``stop``: the user's Prefect settings,
    this ``PREFECT_HOME`` and its database, the auth string, and no API URL (it is no client of
    itself)."""
    from prefect.settings import get_current_settings

    env = {**os.environ, **get_current_settings().to_environment_variables(exclude_unset=True)}
    env.pop("PREFECT_API_URL", None)
    env.pop("PREFECT_API_AUTH_STRING", None)
    # Its database is its own, under this PREFECT_HOME: a database set for another server (a
    # profile's, or prefect_test_harness's in this process) would show that server's runs here.
    for name in [n for n in env if n.startswith(_DATABASE_SETTINGS)]:
        del env[name]
    env.update(
        PREFECT_HOME=str(folder),
        PREFECT_SERVER_API_AUTH_STRING=secret(folder / AUTH),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
    )
    return env


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((_HOST, 0))
        return int(probe.getsockname()[1])


def start_prefect(home: Path, *, timeout_s: float = 120.0) -> PrefectServer:
    """The Prefect server of ``home``, started if it does not run.

    Raises:
        UltronError: ``prefect server start`` failed, or the server did not answer in time.
    """
    folder = prefect_folder(home)
    with starting(folder):
        reason = ""
        for _ in range(_PORT_ATTEMPTS):
            server = running_prefect(home)
            if server is not None:
                return server
            (folder / PID_FILE).unlink(missing_ok=True)  # stale: the lock is ours, none runs
            reason = _launch(folder, _free_port(), timeout_s)
            if not reason:
                server = running_prefect(home)
                if server is not None:
                    logger.info("started the Prefect server at %s", server.api_url)
                    return server
                reason = "it answered, then stopped"
    raise UltronError(
        f"the Prefect server of {folder} did not start: {reason}. Fix: set "
        "ULTRON_PREFECT_SERVER=ephemeral, or point PREFECT_API_URL at a Prefect server you run"
    )


def _launch(folder: Path, port: int, timeout_s: float) -> str:
    """Why ``prefect server start --background`` on ``port`` gave no server, or ``""``."""
    done = subprocess.run(
        [_PREFECT, "--no-prompt", "server", "start", "--background", "--host", _HOST,
         "--port", str(port), "--no-ui", "--log-level", "WARNING"],
        env=_server_env(folder),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        start_new_session=True,  # the server it leaves is out of reach of the terminal's Ctrl-C
        umask=0o077,  # its database and logs are this user's alone (0600), like the folder
        timeout=timeout_s,
    )  # fmt: skip
    if done.returncode != 0:
        return f"prefect server start exited with {done.returncode}: {done.stdout}{done.stderr}"
    url = f"http://{_HOST}:{port}/api"
    deadline = time.monotonic() + timeout_s
    while not _healthy(url, timeout_s=1.0):
        if _server_pid(folder) is None:  # it exited: the port was taken meanwhile
            return f"the server exited before it answered at {url}"
        if time.monotonic() > deadline:
            stop_prefect(folder.parent)
            return f"no answer at {url} within {timeout_s:g} s"
        time.sleep(0.2)
    return ""


def stop_prefect(home: Path, *, timeout_s: float = 30.0) -> int | None:
    """Stop the Prefect server of ``home`` with ``prefect server stop``; the pid stopped, or
    None when none ran. Waits until its process has exited.

    Raises:
        UltronError: ``prefect server stop`` failed, or the server outlived it.
    """
    folder = prefect_folder(home)
    pid = _server_pid(folder)
    if pid is None:  # `prefect server stop` would signal whatever pid a stale pidfile names
        (folder / PID_FILE).unlink(missing_ok=True)
        return None
    done = subprocess.run(
        [_PREFECT, "--no-prompt", "server", "stop"],
        env=_server_env(folder),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if done.returncode != 0:
        raise UltronError(
            f"prefect server stop (PREFECT_HOME={folder}) exited with {done.returncode}: "
            f"{done.stdout}{done.stderr}. Fix: stop the server yourself (kill {pid})"
        )
    try:
        psutil.Process(pid).wait(timeout=timeout_s)
    except psutil.NoSuchProcess:
        pass  # it exited before the wait began
    except psutil.TimeoutExpired as exc:
        raise UltronError(
            f"the Prefect server pid {pid} still runs {timeout_s:g} s after `prefect server "
            f"stop`. Fix: kill {pid}"
        ) from exc
    logger.info("stopped the Prefect server of %s (pid %s)", folder, pid)
    return pid


def _wants_shared() -> bool:
    """No Prefect API is set and the settings do not ask for the ephemeral server."""
    from prefect.settings import get_current_settings

    return settings().prefect_server == "shared" and not get_current_settings().api.url


@contextlib.contextmanager
def prefect_api() -> Iterator[str | None]:
    """Inside the block Prefect talks to the server of ``ULTRON_HOME`` (started if it does not
    run); yields its URL (``None``: the user's own API, or the ephemeral server, is used)."""
    if not _wants_shared():
        yield None
        return
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    from ultron.secrets import add_secrets

    server = start_prefect(ultron_home(), timeout_s=settings().prefect_start_timeout_s)
    add_secrets([server.auth])
    updates = {PREFECT_API_URL: server.api_url, PREFECT_API_AUTH_STRING: server.auth}
    with temporary_settings(updates=updates):
        yield server.api_url
