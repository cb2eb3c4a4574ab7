"""The embedded Redis of ``ULTRON_HOME``: one redis-server per home, up until ``server stop``.

Started on demand by the first job or command that needs it, by its own tool (the
``redis-server`` binary, daemonized, with a pidfile), and stopped only by ``ultron server stop``
(:func:`stop_redis`). Everything lives in ``ULTRON_HOME/redis``, a folder only its owner may
enter (0700):

- ``redis.sock``: the only way in, a Unix socket (0700) in that folder; no TCP port unless
  ``ULTRON_REDIS_ADDRESS`` asks for one, then bound to that address, with the password;
- ``password`` (0600): generated once; the server requires it (``requirepass``);
- ``redis.conf`` (0600): protected mode on, ``CONFIG`` and ``MODULE`` renamed away, so a client
  cannot make the server write files or load code;
- ``redis.pid`` (the server's own pidfile), ``redis.log``, and the append-only file that keeps
  the score cache and unfinished jobs from one run to the next.

The server runs when its pidfile names a live process that answers ``PING`` on the socket with
the password, and is that process (``INFO``'s ``process_id``). ``redis-server`` replaces a
socket file it finds, so two starts at once take turns on a lock of the folder
(:func:`ultron.servers.private.starting`): the second finds the first's server running.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psutil
import redis

from ultron.errors import UltronError
from ultron.redis.client import connect_once
from ultron.servers.private import listening_address, private_folder, secret, server_pid, starting
from ultron.servers.redis_process import find_redis_server
from ultron.settings import settings

__all__ = ["RedisServer", "redis_folder", "running_redis", "start_redis", "stop_redis"]

logger = logging.getLogger(__name__)

SOCKET = "redis.sock"
PASSWORD = "password"
CONFIG = "redis.conf"
PID_FILE = "redis.pid"
LOG_FILE = "redis.log"
_SOCKET_MAX = 107  # bytes in sun_path, less the final NUL
_PIDFILE_S = 15.0


@dataclasses.dataclass(frozen=True)
class RedisServer:
    """A running embedded server.

    Attributes:
        url: ``unix://:PASSWORD@/ULTRON_HOME/redis/redis.sock?db=0``, or the TCP URL when
            ``ULTRON_REDIS_ADDRESS`` is set (workers on other machines need that one).
        pid: the server's pid.
        socket: the server's Unix socket.
        address: the TCP ``host:port`` it also listens on, or None.
    """

    url: str = dataclasses.field(repr=False)
    pid: int
    socket: Path
    address: str | None


def redis_folder(home: Path) -> Path:
    """``home/redis``, private to this user (0700)."""
    return private_folder(home / "redis")


def _socket_url(folder: Path, password: str) -> str:
    return f"unix://:{password}@{quote(str(folder / SOCKET))}?db=0"


def _tcp_url(address: str, password: str) -> str:
    host, _, port = address.rpartition(":")
    if host in ("", "0.0.0.0", "::", "[::]"):  # every interface: others reach it by name
        host = socket.getfqdn()
    return f"redis://:{password}@{host}:{port}/0"


def _quoted(value: str) -> str:
    """A value for ``redis.conf``, which reads C-style double-quoted strings."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _config(folder: Path, password: str, address: str | None) -> str:
    if address:
        host, _, port = address.rpartition(":")
        listen = [f"port {int(port)}", f"bind {host.strip('[]')}"]
    else:
        listen = ["port 0"]
    lines = [
        "daemonize yes",
        f"pidfile {_quoted(str(folder / PID_FILE))}",
        f"unixsocket {_quoted(str(folder / SOCKET))}",
        "unixsocketperm 700",
        *listen,
        "protected-mode yes",
        f"requirepass {_quoted(password)}",
        'rename-command CONFIG ""',
        'rename-command MODULE ""',
        f"dir {_quoted(str(folder))}",
        f"logfile {_quoted(str(folder / LOG_FILE))}",
        "appendonly yes",
        'save ""',
    ]
    return "\n".join(lines) + "\n"


def _pid(folder: Path) -> int | None:
    """The pid in the server's pidfile, if it names a live ``redis-server`` of this user."""
    return server_pid(folder / PID_FILE, lambda proc: "redis-server" in proc.name())


def _answering_pid(url: str, timeout_s: float = 1.0) -> int | None:
    """``INFO``'s ``process_id`` of the server at ``url``, or None while it does not serve."""
    client = connect_once(url, timeout_s=timeout_s)
    try:
        client.ping()  # before INFO: a server loading its append-only file is not ready
        info: dict[str, Any] = client.info("server")
        return int(info["process_id"])
    except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError, OSError):
        return None  # not listening yet, gone, or loading: the callers wait or report
    finally:
        client.close()


def running_redis(home: Path) -> RedisServer | None:
    """The embedded server of ``home``, if it runs and answers."""
    folder = redis_folder(home)
    pid = _pid(folder)
    if pid is None:
        return None
    password = secret(folder / PASSWORD)
    url = _socket_url(folder, password)
    if _answering_pid(url) != pid:
        return None
    listening = listening_address(pid)
    address = f"{listening[0]}:{listening[1]}" if listening else None
    return RedisServer(
        url=_tcp_url(address, password) if address else url,
        pid=pid,
        socket=folder / SOCKET,
        address=address,
    )


def start_redis(home: Path, *, timeout_s: float = 60.0) -> RedisServer:
    """The embedded server of ``home``, started if it does not run.

    Args:
        home: the ``ULTRON_HOME`` whose server to start.
        timeout_s: how long the server may take to answer (loading a large append-only file
            takes a while).

    Raises:
        UltronError: the server did not start or answer (the log's tail is in the message).
    """
    folder = redis_folder(home)
    with starting(folder):
        if _pid(folder) is None:
            _launch(folder)
        # A server that lives but does not answer (loading its append-only file, busy) is
        # waited for, never replaced: two servers over one append-only file would corrupt it.
        _wait_answer(folder, timeout_s)
        server = running_redis(home)
        if server is None:
            raise UltronError(
                f"the embedded Redis of {folder} answered, then stopped. Fix: read "
                f"{folder / LOG_FILE}, or run `ultron server stop` and try again"
            )
        return server


def _launch(folder: Path) -> None:
    sock = folder / SOCKET
    if len(os.fsencode(sock)) > _SOCKET_MAX:
        raise UltronError(
            f"the embedded Redis's socket would be {sock}, {len(os.fsencode(sock))} bytes; a "
            f"Unix socket path must be at most {_SOCKET_MAX}. Fix: set ULTRON_HOME to a shorter "
            "path, e.g. ~/.cache/ultron"
        )
    conf = folder / CONFIG
    fd = os.open(conf, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(_config(folder, secret(folder / PASSWORD), settings().redis_address))
    (folder / PID_FILE).unlink(missing_ok=True)  # stale: the lock is ours and no server runs
    done = subprocess.run(
        [find_redis_server(), str(conf)],
        cwd=folder,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        start_new_session=True,  # Ctrl-C in a terminal must not reach the server
    )
    if done.returncode != 0:
        raise UltronError(
            f"redis-server {conf} exited with {done.returncode}: "
            f"{(done.stderr or done.stdout).strip()[-500:]}. Fix: read {folder / LOG_FILE}"
        )
    # The daemon writes its pidfile once it listens, before it loads its append-only file.
    deadline = time.monotonic() + _PIDFILE_S
    while _pid(folder) is None:
        if time.monotonic() > deadline:
            raise UltronError(
                f"the embedded Redis of {folder} did not start: {_log_tail(folder)}. Fix: read "
                f"{folder / LOG_FILE}, or set REDIS_URL to a Redis you run"
            )
        time.sleep(0.05)
    logger.info("started the embedded Redis of %s (pid %s)", folder, _pid(folder))


def _wait_answer(folder: Path, timeout_s: float) -> None:
    url = _socket_url(folder, secret(folder / PASSWORD))
    deadline = time.monotonic() + timeout_s
    while (pid := _pid(folder)) is None or _answering_pid(url) != pid:
        if pid is None:
            raise UltronError(
                f"the embedded Redis of {folder} exited: {_log_tail(folder)}. Fix: read "
                f"{folder / LOG_FILE}"
            )
        if time.monotonic() > deadline:
            raise UltronError(
                f"the embedded Redis of {folder} (pid {pid}) runs but did not answer PING within "
                f"{timeout_s:g} s; it may be loading its append-only file ({_log_tail(folder)}). "
                f"It is not replaced while it runs. Fix: wait and run again, or stop it (ultron "
                f"server stop)"
            )
        time.sleep(0.05)


def _log_tail(folder: Path, lines: int = 5) -> str:
    try:
        text = (folder / LOG_FILE).read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return " | ".join(text.strip().splitlines()[-lines:])


def stop_redis(home: Path, *, timeout_s: float = 30.0) -> int | None:
    """Stop the embedded server of ``home``: ``SHUTDOWN`` over its socket with the password
    (the append-only file is flushed), then ``SIGTERM`` and ``SIGKILL`` by its pidfile if it
    is still there. Returns the pid stopped, or None when none ran.
    """
    folder = redis_folder(home)
    pid = _pid(folder)
    if pid is None:
        return None
    client = connect_once(_socket_url(folder, secret(folder / PASSWORD)), timeout_s=timeout_s)
    try:
        client.shutdown()
    except (redis.RedisError, OSError) as exc:  # e.g. LOADING: SIGTERM stops it at once
        logger.warning("SHUTDOWN of the embedded Redis pid %s failed (%s); terminating", pid, exc)
    finally:
        client.close()
    for signum, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        if _gone(pid, wait_s):
            break
        if _pid(folder) == pid:  # never signal a pid that was reused
            os.kill(pid, signum)
    if not _gone(pid, 5.0):
        raise UltronError(f"the embedded Redis pid {pid} outlived SIGKILL. Fix: kill -9 {pid}")
    (folder / SOCKET).unlink(missing_ok=True)
    logger.info("stopped the embedded Redis of %s (pid %s)", folder, pid)
    return pid


def _gone(pid: int, timeout_s: float) -> bool:
    try:
        psutil.Process(pid).wait(timeout=timeout_s)
    except psutil.NoSuchProcess:
        return True
    except psutil.TimeoutExpired:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True
    return True
