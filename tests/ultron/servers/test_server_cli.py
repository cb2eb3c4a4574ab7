"""``ultron server start | status | stop``, as a user runs them: both servers, their addresses,
and no process of ours left after ``stop``."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

ULTRON = str(Path(sys.executable).with_name("ultron"))

pytestmark = pytest.mark.slow


def _ultron(home: Path, *args: str) -> str:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PREFECT_API")}
    env.update(ULTRON_HOME=str(home), COLUMNS="300")
    done = subprocess.run(
        [ULTRON, "server", *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done.stdout


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_start_status_stop(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert _ultron(home, "status").splitlines() == ["prefect: not running", "redis: not running"]

    started = _ultron(home, "start")
    prefect_pid = int((home / "prefect" / "server.pid").read_text())
    redis_pid = int((home / "redis" / "redis.pid").read_text())
    sock = home / "redis" / "redis.sock"
    status = _ultron(home, "status")
    assert status == started
    api = re.search(r"prefect: (http://127\.0\.0\.1:(\d+)/api) \(pid (\d+)\)", status)
    assert api is not None and int(api[3]) == prefect_pid, status
    assert f"redis: unix socket {sock} (pid {redis_pid}, " in status
    assert _ultron(home, "start") == started  # both run already: nothing new

    stopped = _ultron(home, "stop")
    assert stopped.splitlines() == [
        f"prefect: stopped (pid {prefect_pid})",
        f"redis: stopped (pid {redis_pid})",
    ]
    assert _gone(prefect_pid) and _gone(redis_pid)
    assert not sock.exists()
    with socket.socket() as probe:  # nothing listens on the Prefect server's port
        assert probe.connect_ex(("127.0.0.1", int(api[2]))) != 0
    assert _ultron(home, "status").splitlines() == ["prefect: not running", "redis: not running"]
    assert _ultron(home, "stop").splitlines() == [
        "prefect: was not running",
        "redis: was not running",
    ]
