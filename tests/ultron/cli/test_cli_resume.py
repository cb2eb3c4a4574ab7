"""A master that comes back (issue 25 item 1): ``ultron run``'s supervision, ``lost``, ``ultron
resume JOB`` with no spec file from another folder, and one master per job.

Real ``ultron`` commands in sessions of their own, real SIGKILLs, a real Redis and Dask cluster;
the trials of ``toy_model:Sleepy`` log their start and end, so the tests count what ran.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import redis
import yaml
from typer.testing import CliRunner

from ultron.cli.exits import ExitCode
from ultron.cli.main import app
from ultron.redis import keys

REPO = Path(__file__).parents[3]
ULTRON = str(Path(sys.executable).with_name("ultron"))
BEAT_S = 1.5  # ULTRON_HEARTBEAT_S of these jobs: lost within 3 of them

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ultron_home")]


def _spec(folder: Path, redis_url: str, *, trials: int, gate: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    spec = {
        "name": "comes-back",
        "code": str(REPO / "tests" / "data" / "toy"),
        "model": "toy_model:Sleepy",
        "search_space": {
            "x": {"type": "uniform", "low": 0.0, "high": 1.0},
            "sleep": [1.0],
            **({"gate": [gate]} if gate else {}),
        },
        "num_iterations": trials,
        "parallelism": 2,
        "redis_url": redis_url,
        "storage": "runs",  # relative: where the first run started
    }
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _env(calls: Path) -> dict[str, str]:
    return {
        **os.environ,
        "TOY_CALLS_FILE": str(calls),
        "ULTRON_HEARTBEAT_S": str(BEAT_S),
        "COLUMNS": "200",
    }


def _calls(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _wait_for(what: str, condition: Callable[[], bool], timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.1)


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def _row(job_id: str, redis_url: str) -> str:
    _, shown = _cli("jobs", "--redis-url", redis_url)
    return next((line for line in shown.splitlines() if job_id in line), "")


def _stored(client: redis.Redis, trials: str) -> set[float]:
    return {json.loads(v)["hyperparameters"]["x"] for v in client.hvals(trials)}


def _job_processes(supervisor: int) -> list[int]:
    """The job's process (one, or none between a death and a restart): the supervising
    ``ultron run``'s child in a process group of its own."""
    found = []
    for child in psutil.Process(supervisor).children():
        with contextlib.suppress(ProcessLookupError, psutil.Error):
            if os.getpgid(child.pid) == child.pid and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child.pid)
    return found


def test_a_killed_job_comes_back_is_shown_lost_and_resumes_from_another_folder(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    calls, job_id = tmp_path / "calls.jsonl", f"comes-back-{os.getpid()}"
    first = tmp_path / "first"
    proc = subprocess.Popen(
        [ULTRON, "run", str(_spec(first, redis_url, trials=8)), "--job-id", job_id],
        *(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(calls),
        cwd=first,
        start_new_session=True,
    )
    trials = keys.job_trials(job_id)
    try:
        # 1. Supervision: the job's process is SIGKILLed (as the OOM killer does); `ultron run`
        # starts it again with the same job id, and it goes on.
        _wait_for("two trials done", lambda: redis_client.hlen(trials) >= 2)
        (victim,) = _job_processes(proc.pid)
        stored_first = _stored(redis_client, trials)
        os.kill(victim, signal.SIGKILL)
        _wait_for("the job restarted", lambda: _job_processes(proc.pid) not in ([], [victim]))
        _wait_for("a trial done after the restart", lambda: redis_client.hlen(trials) >= 4)
        assert "running" in _row(job_id, redis_url)

        # 2. The whole command killed: nothing restarts it; it shows lost within 3 beats.
        os.killpg(proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        # Issue 31 item 5: a cancel sent now goes to the dead run (its lease has not expired).
        code, said = _cli("cancel", job_id, "--wait", "0", "--redis-url", redis_url)
        assert code == 0 and f"asked job {job_id} to stop" in said, said
        _wait_for("lost", lambda: "lost (since" in _row(job_id, redis_url), timeout=60)
        assert time.monotonic() - killed <= 3 * BEAT_S
        code, said = _cli("status", job_id, "--redis-url", redis_url)
        assert code == 0 and "lost (since" in said and f"ultron resume {job_id}" in said
        code, said = _cli("cancel", job_id, "--redis-url", redis_url)  # nothing runs it
        assert code == ExitCode.BAD_INPUT and "is lost" in said
        proc.communicate(timeout=60)
        stored_second = _stored(redis_client, trials)

        # 3. `ultron resume` from another folder, no spec file: it completes the job.
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        resumed = subprocess.run(
            [ULTRON, "resume", job_id, "--redis-url", redis_url],
            capture_output=True,
            text=True,
            env=_env(calls),
            cwd=elsewhere,
            timeout=300,
        )
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"job {job_id} completed (budget: 8 trials): 8 trials" in resumed.stdout
    rows = [json.loads(v) for v in redis_client.hvals(trials)]
    assert len(rows) == 8 and {r["status"] for r in rows} == {"completed"}
    log = _calls(calls)
    ends = Counter(e["x"] for e in log if e["event"] == "end")
    assert set(ends) == {r["hyperparameters"]["x"] for r in rows}  # nothing scored is lost
    # A stored score is never run again; a trial running at a kill (or done, but not yet
    # stored) runs again once per kill at most.
    assert all(ends[x] == 1 for x in stored_first)
    assert all(ends[x] <= 2 for x in stored_second) and all(n <= 3 for n in ends.values())
    assert (first / "runs" / job_id / "best.json").exists()  # where its first run put it
    assert not (elsewhere / "runs").exists()
    assert json.loads((first / "runs" / job_id / "best.json").read_text())["status"] == "completed"


def test_a_second_master_for_a_running_job_is_refused(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    calls, job_id, gate = tmp_path / "calls.jsonl", f"twice-{os.getpid()}", tmp_path / "gate"
    spec = _spec(tmp_path, redis_url, trials=4, gate=str(gate))  # trials wait for the gate
    command = [ULTRON, "run", str(spec), "--job-id", job_id, "--restarts", "0"]

    def start() -> subprocess.Popen[str]:
        return subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(calls),
            cwd=tmp_path,
            start_new_session=True,
        )

    first = start()
    try:
        _wait_for("the first master's trials", lambda: bool(_calls(calls)))
        second = start()
        out, refused = second.communicate(timeout=300)  # it waits at most 2.5 beats + 1
        gate.touch()  # the first master's trials go on
        first_out, first_err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert second.returncode == ExitCode.BUSY, out + refused
    assert f"job {job_id} is running in another process" in refused
    assert "Traceback" not in refused and "failed" not in refused
    assert first.returncode == 0, first_out + first_err
    starts = Counter(e["x"] for e in _calls(calls) if e["event"] == "start")
    assert len(starts) == 4 and set(starts.values()) == {1}  # never two dispatching
    assert redis_client.hlen(keys.job_trials(job_id)) == 4
