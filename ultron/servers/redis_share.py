"""One embedded Redis per data folder, shared by every job on a machine, stopped by its last user.

The server process itself is :class:`~ultron.servers.redis.EmbeddedRedis`; this module
decides which server a job uses and when it stops (:func:`ensure_embedded_redis`):

- ``redis.lock``, a file lock, guards the rest: only its holder starts or stops the server,
  writes or removes ``redis.json``, and adds or counts uses.
- ``redis.json`` names the server (URL and pid). It is written once the server answers and
  removed only after its process has exited.
- ``users/`` holds one lock file per use, locked (``flock``) by the using process for as long as
  it uses the server. The kernel drops the lock of a process that dies, so a use whose process
  was killed stops counting by itself.
- The last use released stops the server, whichever process started it: servers are stopped by
  URL and pid. A server runs in a session of its own, so it outlives the process that started
  it, and the next job reuses it.

A server whose process lives is never replaced: two servers over one append-only file would
corrupt it. One that is loading its append-only file, or busy, is waited for. A record is stale
only when its pid is gone, or is not a ``redis-server`` working in the folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import psutil
from filelock import FileLock, Timeout

from ultron.errors import UltronError
from ultron.servers.redis import (
    LOG_FILE,
    EmbeddedRedis,
    loopback_url,
    port_free,
    reap_exited,
    server_pid,
    servers_in,
    serves,
)

__all__ = ["EmbeddedRedisUse", "Ticket", "ensure_embedded_redis", "live_uses", "locked"]

logger = logging.getLogger(__name__)

_STATE_FILE = "redis.json"
_LOCK_FILE = "redis.lock"
_USERS_DIR = "users"
_LOCK_TIMEOUT_S = 600.0  # a holder may wait out a server loading a large append-only file


def _read_state(data_dir: Path) -> dict[str, Any] | None:
    try:
        state = json.loads((data_dir / _STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def _write_state(data_dir: Path, *, url: str, pid: int) -> None:
    # Written beside and renamed, so a reader never sees half a file.
    tmp = data_dir / f".{_STATE_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps({"url": url, "pid": pid}))
    os.replace(tmp, data_dir / _STATE_FILE)


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold ``folder``'s ``redis.lock`` (the Prefect server's folder has its own)."""
    lock = FileLock(folder / _LOCK_FILE, timeout=_LOCK_TIMEOUT_S)
    try:
        lock.acquire()
    except Timeout as exc:
        raise UltronError(
            f"{lock.lock_file} stayed locked for {_LOCK_TIMEOUT_S:g} s: another process is "
            "starting or stopping the embedded Redis there. Fix: wait for it, or find it with "
            f"`fuser {lock.lock_file}`"
        ) from exc
    try:
        yield
    finally:
        lock.release()


class Ticket:
    """A lock file in ``users/``, held locked by this process while it uses the server.

    :mod:`ultron.servers.prefect` counts the uses of its server the same way.
    """

    def __init__(self, folder: Path) -> None:
        users = folder / _USERS_DIR
        users.mkdir(exist_ok=True)
        self.path = users / f"{os.getpid()}-{uuid.uuid4().hex[:12]}.lock"
        self._fd: int | None = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def drop(self) -> None:
        # Unlinked first: a child forked meanwhile may keep the lock, but not the name.
        self.path.unlink(missing_ok=True)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def live_uses(folder: Path) -> int:
    """Counts the uses whose process still holds its lock file; drops those of dead ones."""
    live = 0
    for path in sorted((folder / _USERS_DIR).glob("*.lock")):
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            live += 1
        else:
            path.unlink(missing_ok=True)  # its process died without releasing
        finally:
            os.close(fd)
    return live


class EmbeddedRedisUse:
    """One use of the shared embedded server of a folder; the last use released stops it.

    Made by :func:`ensure_embedded_redis`. Release it once (``release()``, or leave the
    ``with`` block); a use whose process dies stops counting by itself.

    Attributes:
        data_dir: the server's data folder.
        url: the server's ``redis://127.0.0.1:PORT/0``.
        pid: the server's pid.
        started: whether the call that made this use started the server.
    """

    def __init__(
        self, data_dir: Path, *, url: str, pid: int, started: bool, ticket: Ticket
    ) -> None:
        self.data_dir = data_dir
        self.url = url
        self.pid = pid
        self.started = started
        self._ticket: Ticket | None = ticket

    def release(self, *, timeout_s: float = 10.0) -> bool:
        """Ends this use; stops the server if no live use remains. Idempotent.

        Args:
            timeout_s: how long the server may take to shut down before it is terminated.

        Returns:
            Whether this call stopped the server.
        """
        if self._ticket is None:
            return False
        with locked(self.data_dir):
            self._ticket.drop()
            self._ticket = None
            if live_uses(self.data_dir):
                return False
            state = _read_state(self.data_dir) or {}
            url, pid = state.get("url"), state.get("pid")
            if isinstance(url, str) and isinstance(pid, int):
                EmbeddedRedis.running_at(self.data_dir, url=url, pid=pid).stop(timeout_s=timeout_s)
                if serves(pid, self.data_dir):  # kept: nobody may start a second server
                    logger.error(
                        "embedded redis pid %s outlived SIGKILL; %s kept", pid, _STATE_FILE
                    )
                    return False
            # Only now, with its process gone: nobody may start a second server while it runs.
            (self.data_dir / _STATE_FILE).unlink(missing_ok=True)
            logger.info("stopped the embedded redis of %s: its last use ended", self.data_dir)
            return True

    def __enter__(self) -> EmbeddedRedisUse:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"EmbeddedRedisUse(url={self.url!r}, pid={self.pid}, started={self.started})"


def ensure_embedded_redis(
    data_dir: str | Path, *, appendonly: bool = True, start_timeout_s: float = 60.0
) -> EmbeddedRedisUse:
    """Adds a use of the embedded server of ``data_dir``, starting the server if none runs.

    The server that ``data_dir/redis.json`` names is reused while its process lives, waiting
    for it if it is loading its append-only file. Otherwise a server is started (on the port
    of the last one when it is free, so clients of a job still running find it again). The
    module docstring says how uses are counted.

    Args:
        data_dir: folder of the server's data, state file and locks; created if missing.
        appendonly: keep an append-only file (only used when a server is started).
        start_timeout_s: how long to wait for a server to answer, a new one or a loading one.

    Returns:
        The use; release it when done (the last release stops the server).

    Raises:
        UltronError: no server could be started, or the server of ``data_dir`` runs but did
            not answer in time (it is never replaced while it runs).

    Example:
        >>> import tempfile
        >>> import redis
        >>> with ensure_embedded_redis(tempfile.mkdtemp(), appendonly=False) as use:
        ...     redis.Redis.from_url(use.url).ping()
        True
    """
    folder = Path(data_dir).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    reap_exited()
    with locked(folder):
        ticket = Ticket(folder)
        try:
            url, pid, started = _serve(folder, appendonly=appendonly, timeout_s=start_timeout_s)
        except BaseException:
            ticket.drop()
            raise
    return EmbeddedRedisUse(folder, url=url, pid=pid, started=started, ticket=ticket)


def _serve(folder: Path, *, appendonly: bool, timeout_s: float) -> tuple[str, int, bool]:
    """``(url, pid, started)`` of the folder's server, started if none lives; under the lock."""
    state = _read_state(folder) or {}
    url, pid = state.get("url"), state.get("pid")
    port_hint: int | None = None
    if isinstance(url, str) and isinstance(pid, int):
        if _answers(url, pid, folder, timeout_s):
            logger.debug("reusing embedded redis pid %s at %s", pid, url)
            return url, pid, False
        logger.info("stale %s in %s (%s); starting a new server", _STATE_FILE, folder, state)
        port_hint = urlsplit(url).port
    for orphan in servers_in(folder):  # alive over our data, but redis.json does not say so
        url = _adopt(orphan, folder, timeout_s)
        _write_state(folder, url=url, pid=orphan)
        return url, orphan, False
    server = _start(folder, appendonly=appendonly, timeout_s=timeout_s, port=port_hint)
    try:
        _write_state(folder, url=server.url, pid=server.pid or 0)
    except BaseException:
        server.stop()
        raise
    return server.url, server.pid or 0, True


def _answers(url: str, pid: int, folder: Path, timeout_s: float) -> bool:
    """Whether the server ``pid`` lives and answers at ``url``; waits while it lives but is mute.

    Raises:
        UltronError: it lives but did not answer within ``timeout_s``, or ``url`` is served by
            another server.
    """
    deadline = time.monotonic() + timeout_s
    while serves(pid, folder):
        answered = server_pid(url, timeout_s=1.0)
        if answered == pid:
            return True
        if answered is not None:
            raise UltronError(
                f"{url} is served by redis pid {answered}, but the embedded Redis of {folder} "
                f"is pid {pid}, which still runs. Fix: stop pid {pid} (kill {pid}), then run again"
            )
        if time.monotonic() > deadline:
            raise UltronError(
                f"the embedded Redis of {folder} (pid {pid}, {url}) runs but did not answer PING "
                f"within {timeout_s:g} s; it may be loading its append-only file (see "
                f"{folder / LOG_FILE}). It is not replaced while it runs: two servers over one "
                f"append-only file would corrupt it. Fix: wait and run again, or stop it "
                f"(kill {pid})"
            )
        time.sleep(0.1)
    return False


def _adopt(pid: int, folder: Path, timeout_s: float) -> str:
    """The URL of a live server of ``folder`` that lost its ``redis.json``, found by its port."""
    try:
        listening = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:
        listening = []
    for conn in listening:
        if conn.status == psutil.CONN_LISTEN:
            url = loopback_url(conn.laddr.port)
            if _answers(url, pid, folder, timeout_s):
                logger.warning(
                    "adopting embedded redis pid %s at %s: %s was missing", pid, url, _STATE_FILE
                )
                return url
    raise UltronError(
        f"a redis-server (pid {pid}) runs over {folder}, but {_STATE_FILE} does not name it and "
        f"it answers on no loopback port; a second server over the same append-only file would "
        f"corrupt it. Fix: stop it (kill {pid}) and run again"
    )


def _start(folder: Path, *, appendonly: bool, timeout_s: float, port: int | None) -> EmbeddedRedis:
    """Starts the folder's server, on ``port`` (the last server's) when that is free."""
    if port is not None and not port_free(port):
        port = None
    server = EmbeddedRedis(folder, port=port, appendonly=appendonly, start_timeout_s=timeout_s)
    server.start()
    return server
