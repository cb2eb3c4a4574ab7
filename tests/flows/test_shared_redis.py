"""Two real ``ultron run`` jobs share the embedded Redis of one ``ULTRON_HOME``.

Neither spec names a ``redis_url`` and ``REDIS_URL`` is unset, so both jobs use the embedded
server of ``ULTRON_HOME/redis``. Job A (three trials) starts first and starts the server;
job B (six slow trials, one at a time) starts once A uses it, joins it, and still uses it
when A leaves. The starter leaving first must not stop the server; B, its last user, stops it.

Each use of the server is a lock file ``users/<pid>-<id>.lock`` held by the job's process, so the
test sees who uses the server and when. ``redis.log`` records every server start.

B starts once A holds its use of the server, never a fixed time after A: how long a job takes to
reach Redis varies with the machine's load (a fixed delay let B reach it first under CI). A's
trials are long enough (3 x 6 s, one at a time) for B to start and join while A still holds its
use; B's trials (6 x 5 s) outlast A's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).parents[2]
ULTRON = str(Path(sys.executable).with_name("ultron"))
# B starts once A holds its use: A holds the server 18 s or more (its trials alone), B's trials
# alone take 30 s, so B joins while A holds it and leaves after A.
A_START_S = 240.0

pytestmark = pytest.mark.slow


def _spec(tmp_path: Path, name: str, *, trials: int, sleep: float, parallelism: int) -> Path:
    spec = {
        "name": name,
        "code": str(REPO / "tests" / "data" / "toy"),
        "model": "toy_model:Sleepy",
        "search_space": {"x": {"type": "uniform", "low": 0.0, "high": 1.0}, "sleep": [sleep]},
        "num_iterations": trials,
        "parallelism": parallelism,
        "storage": str(tmp_path / "runs"),
    }  # no redis_url: the embedded server
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _start(spec: Path, job_id: str, home: Path) -> subprocess.Popen[str]:
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    env["ULTRON_HOME"] = str(home)
    # Each job runs in its command's process, whose pid the test finds in users/.
    out = spec.with_suffix(".out").open("w")
    err = spec.with_suffix(".err").open("w")
    # Files, not pipes: the test polls while the jobs run and never reads a pipe meanwhile.
    # A session of its own, so a failed test can end each job with its whole process group.
    return subprocess.Popen(
        [ULTRON, "run", str(spec), "--job-id", job_id],
        stdout=out,
        stderr=err,
        text=True,
        env=env,
        cwd=spec.parent,
        start_new_session=True,
    )


def _users(folder: Path) -> set[int]:
    """Pids of the processes holding a use of the server (``users/<pid>-<id>.lock``)."""
    return {int(path.name.split("-")[0]) for path in (folder / "users").glob("*.lock")}


def _wait_for_use(folder: Path, job: subprocess.Popen[str], seconds: float) -> None:
    """Waits until ``job`` holds a use of the server (its lock file in ``users/``)."""
    deadline = time.monotonic() + seconds
    while not (folder.exists() and job.pid in _users(folder)):
        assert job.poll() is None, f"job A ended ({job.returncode}) before it used the server"
        assert time.monotonic() < deadline, f"job A held no use of the server in {seconds:g} s"
        time.sleep(0.05)


def _no_server_within(
    folder: Path, seconds: float, redis_servers: Callable[[Path], list[int]]
) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := redis_servers(folder)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _output(spec: Path) -> tuple[str, str]:
    return spec.with_suffix(".out").read_text(), spec.with_suffix(".err").read_text()


def _trials(tmp_path: Path, job_id: str) -> list[dict[str, object]]:
    trials: list[dict[str, object]] = json.loads(
        (tmp_path / "runs" / job_id / "trials.json").read_text()
    )
    return trials


@dataclasses.dataclass
class _Seen:
    """What ``users/`` and the server looked like at the moments that matter."""

    first_users: set[int] = dataclasses.field(default_factory=set)  # when first in use
    together: bool = False  # both jobs held a use at once
    users_when_a_left: set[int] | None = None  # the first look without A's use, after it
    servers_when_a_left: list[int] = dataclasses.field(default_factory=list)


def _watch(
    folder: Path,
    a: subprocess.Popen[str],
    b_pid: int,
    *,
    timeout_s: float,
    redis_servers: Callable[[Path], list[int]],
) -> _Seen:
    """Looks at ``users/`` every 50 ms until job A's process has ended.

    A's use ends when its flow leaves ``job_redis``, seconds before its process exits (Prefect
    and Dask shut down after it), so the moment A leaves is read from ``users/``.
    """
    seen = _Seen()
    a_used = False
    deadline = time.monotonic() + timeout_s
    while True:
        ended = a.poll() is not None  # before the look: a last look follows the exit
        users = _users(folder) if folder.exists() else set()
        seen.first_users = seen.first_users or users
        seen.together = seen.together or {a.pid, b_pid} <= users
        if a.pid in users:
            a_used = True
        elif a_used and seen.users_when_a_left is None:
            seen.users_when_a_left, seen.servers_when_a_left = users, redis_servers(folder)
        if ended:
            return seen
        assert time.monotonic() < deadline, f"job A did not end within {timeout_s:g} s"
        time.sleep(0.05)


def test_two_jobs_share_the_embedded_redis_and_the_last_stops_it(
    tmp_path: Path,
    redis_servers: Callable[[Path], list[int]],
    reap_redis_servers: Callable[[Path], list[int]],
) -> None:
    home = tmp_path / "home"
    folder = home / "redis"
    spec_a = _spec(tmp_path, "share-a", trials=3, sleep=6.0, parallelism=1)
    spec_b = _spec(tmp_path, "share-b", trials=6, sleep=5.0, parallelism=1)
    jobs: list[subprocess.Popen[str]] = []
    try:
        jobs.append(a := _start(spec_a, "share-a-1", home))
        _wait_for_use(folder, a, A_START_S)
        jobs.append(b := _start(spec_b, "share-b-1", home))
        seen = _watch(folder, a, b.pid, timeout_s=480, redis_servers=redis_servers)
        b.wait(timeout=480)
        left = _no_server_within(folder, 10.0, redis_servers)
    finally:
        for job in jobs:
            if job.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(job.pid, signal.SIGKILL)
                job.wait()
        if folder.exists():
            reap_redis_servers(folder)

    out_a, err_a = _output(spec_a)
    out_b, err_b = _output(spec_b)
    assert a.returncode == 0, (out_a, err_a)
    assert b.returncode == 0, (out_b, err_b)
    assert "Traceback" not in out_a + err_a + out_b + err_b
    for job_id, count in (("share-a-1", 3), ("share-b-1", 6)):
        trials = _trials(tmp_path, job_id)
        assert len(trials) == count and {t["status"] for t in trials} == {"completed"}, trials
    assert "job share-a-1 completed: 3 trials" in out_a
    assert "job share-b-1 completed: 6 trials" in out_b

    assert seen.first_users == {a.pid}, f"job A (pid {a.pid}) did not start the server alone"
    assert seen.together, f"job B (pid {b.pid}) never used the server while job A did"
    # The starter left first, while B used the server: it kept running, and no second came.
    assert seen.users_when_a_left == {b.pid}, seen
    assert len(seen.servers_when_a_left) == 1, seen
    log = (folder / "redis.log").read_text()
    assert log.count("Ready to accept connections") == 1, log
    # B, the last user, stopped it and removed its record.
    assert left == [], f"redis-server(s) {left} still run in {folder}"
    assert not (folder / "redis.json").exists()
    assert _users(folder) == set()
