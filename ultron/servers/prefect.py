"""A Prefect server shared by the jobs of a machine: started by the first, stopped when idle.

Without a Prefect API to talk to, every job would start Prefect's ephemeral server in its own
process and stop it at the end: about ten seconds of each job's start on a small machine,
before any trial can run. Instead the first job starts one server (the same app, settings and
database as the ephemeral one) in a session of its own under ``ULTRON_HOME/prefect``, the next
jobs use it, and the server stops itself once no job has used it for
``ULTRON_PREFECT_IDLE_S`` seconds. A user's own Prefect API (``PREFECT_API_URL``, a profile)
always wins; ``ULTRON_PREFECT_SERVER=ephemeral`` keeps Prefect's ephemeral server per job.

As with the shared Redis (:mod:`ultron.servers.redis_share`): ``server.lock`` guards starting
and stopping, ``server.json`` names the server once it answers, and a job holds a lock file
in ``users/`` while it runs, so the server never stops under a job (a job that died stops
counting by itself). A job that finds another one starting the server does not wait for it:
it runs on Prefect's ephemeral server, as it would have without a shared one. Stop the server
at once with ``python -m ultron.servers.prefect stop``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
from filelock import FileLock, Timeout

from ultron.errors import UltronError
from ultron.paths import ultron_home
from ultron.servers.redis_share import Ticket, live_uses
from ultron.settings import settings

__all__ = ["prefect_api", "shared_server_url", "stop_shared_server"]

logger = logging.getLogger(__name__)

_STATE_FILE = "server.json"
_LOCK_FILE = "server.lock"
_LOCK_TIMEOUT_S = 60.0  # the watch and `stop` wait this long for a job's start or check
_BUSY_S = 2.0  # longer than a check of a running server: someone is starting one
_LOG_FILE = "server.log"
_MODULE = "ultron.servers.prefect"
_WATCH_EVERY_S = 2.0
# The ephemeral server's own environment (prefect.server.api.server.SubprocessASGIServer).
_SERVER_ENV = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1"}


def _folder() -> Path:
    folder = ultron_home() / "prefect"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _read_state(folder: Path) -> dict[str, Any] | None:
    try:
        state = json.loads((folder / _STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def _is_ours(pid: int) -> bool:
    """Whether ``pid`` lives and is a shared server of this module."""
    try:
        return _MODULE in " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return False


def _healthy(url: str, timeout_s: float = 2.0) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/health", timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


def _running(folder: Path) -> str | None:
    """The API URL of the folder's server, if one lives and answers; under the lock."""
    state = _read_state(folder) or {}
    url, pid = state.get("url"), state.get("pid")
    if isinstance(url, str) and isinstance(pid, int) and _is_ours(pid) and _healthy(url):
        return url
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start(folder: Path, timeout_s: float) -> str:
    """Start the folder's server and wait until it answers; its API URL. Under the lock."""
    from prefect.settings import get_current_settings

    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {
        **os.environ,
        **get_current_settings().to_environment_variables(exclude_unset=True),
        **_SERVER_ENV,
    }
    env.pop("PREFECT_API_URL", None)  # the server must not think it is a client of itself
    idle = str(settings().prefect_idle_s)
    with open(folder / _LOG_FILE, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", _MODULE, "serve", str(folder), str(port), idle],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # it outlives this job, for the next ones
        )
    deadline = time.monotonic() + timeout_s
    while not _healthy(url, timeout_s=1.0):
        if proc.poll() is not None or time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            raise UltronError(
                f"the shared Prefect server did not answer at {url} within {timeout_s:g} s "
                f"(see {folder / _LOG_FILE}). Fix: set ULTRON_PREFECT_SERVER=ephemeral, or "
                "point PREFECT_API_URL at a Prefect server you run"
            )
        time.sleep(0.1)
    tmp = folder / f".{_STATE_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps({"url": url, "pid": proc.pid}))
    os.replace(tmp, folder / _STATE_FILE)
    logger.info("started the shared Prefect server at %s (pid %s)", url, proc.pid)
    return url


@contextlib.contextmanager
def _locked(folder: Path, timeout_s: float = _LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold ``server.lock``; ``filelock.Timeout`` after ``timeout_s`` seconds."""
    with FileLock(folder / _LOCK_FILE, timeout=timeout_s):
        yield


def shared_server_url(*, timeout_s: float = 120.0) -> tuple[str, Ticket] | None:
    """The shared server's API URL, started if none answers, and this process's use of it;
    ``None`` while another job is starting it (this job then starts Prefect's ephemeral
    server, as fast as waiting for that one, and the next jobs share it).

    Drop the ticket when the job ends (the server stops itself once idle).
    """
    folder = _folder()
    lock = FileLock(folder / _LOCK_FILE, timeout=_BUSY_S)
    try:
        lock.acquire()
    except Timeout:
        return None
    try:
        ticket = Ticket(folder)
        try:
            url = _running(folder) or _start(folder, timeout_s)
        except BaseException:
            ticket.drop()
            raise
    finally:
        lock.release()
    return url, ticket


def _wants_shared() -> bool:
    """No Prefect API is set and the settings do not ask for the ephemeral server."""
    from prefect.settings import get_current_settings

    return settings().prefect_server == "shared" and not get_current_settings().api.url


@contextlib.contextmanager
def prefect_api() -> Iterator[str | None]:
    """Inside the block Prefect talks to the shared server; yields its URL (``None``: the
    user's own API, or the ephemeral server, is used as Prefect would)."""
    if not _wants_shared():
        yield None
        return
    from prefect.settings import PREFECT_API_URL, temporary_settings

    shared = shared_server_url(timeout_s=settings().prefect_start_timeout_s)
    if shared is None:
        yield None
        return
    url, ticket = shared
    try:
        with temporary_settings(updates={PREFECT_API_URL: url}):
            yield url
    finally:
        ticket.drop()


def stop_shared_server() -> bool:
    """Stop the shared server of ``ULTRON_HOME`` now; whether one was running."""
    folder = _folder()
    with _locked(folder):
        state = _read_state(folder) or {}
        pid = state.get("pid")
        (folder / _STATE_FILE).unlink(missing_ok=True)
    if isinstance(pid, int) and _is_ours(pid):
        os.kill(pid, signal.SIGTERM)
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).wait(timeout=10)
        return True
    return False


def _watch(server: Any, folder: Path, idle_s: float) -> None:
    """Stop ``server`` once no job has used it for ``idle_s`` seconds (run in the server)."""
    last_used = time.monotonic()
    while not server.should_exit:
        time.sleep(_WATCH_EVERY_S)
        if not folder.is_dir():  # its ULTRON_HOME was removed: no job can find it any more
            server.should_exit = True
            return
        try:
            with _locked(folder):
                if live_uses(folder):
                    last_used = time.monotonic()
                    continue
                if time.monotonic() - last_used < idle_s:
                    continue
                # Under the lock: a job either finds server.json and takes a use first, or not.
                if (_read_state(folder) or {}).get("pid") == os.getpid():
                    (folder / _STATE_FILE).unlink(missing_ok=True)
                server.should_exit = True
        except Exception:  # the folder went away under us: stop rather than run unwatched
            logger.exception("the shared Prefect server's idle watch failed; stopping")
            server.should_exit = True


def _serve(folder: Path, port: int, idle_s: float) -> None:
    """The server process: Prefect's API app under uvicorn, with the idle watch."""
    import uvicorn

    config = uvicorn.Config(
        "prefect.server.api.server:create_app",
        factory=True,
        host="127.0.0.1",
        port=port,
        log_level="error",
        lifespan="on",
    )
    server = uvicorn.Server(config)
    threading.Thread(target=_watch, args=(server, folder, idle_s), daemon=True).start()
    server.run()


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        _serve(Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    elif sys.argv[1:2] == ["stop"]:
        print("stopped" if stop_shared_server() else "no shared Prefect server was running")
    else:
        sys.exit(f"usage: python -m {_MODULE} stop")
