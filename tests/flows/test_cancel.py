"""Ctrl-C as a user presses it: real SIGINTs to the process group of ``ultron run``.

The job trains ``toy_model:Epochs`` (a checkpoint after every epoch, and it listens to
``ultron.report``), so a test can count the epochs trained over a cancelled run and its resume.
"""

from __future__ import annotations

import collections
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
import yaml

from ultron.master.job_state import JobStatus, JobStore

REPO = Path(__file__).parents[2]
ULTRON = str(Path(sys.executable).with_name("ultron"))

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ultron_home")]


def _spec(tmp_path: Path, redis_url: str, **fields: object) -> Path:
    spec = {
        "name": "cancel-me",
        "code": str(REPO / "tests" / "data" / "toy"),
        "model": "toy_model:Epochs",
        "search_space": {"x": {"type": "uniform", "low": 0.0, "high": 1.0}, "epochs": [6]},
        "num_iterations": 5,
        "parallelism": 2,
        "redis_url": redis_url,
        "storage": str(tmp_path / "runs"),
        **fields,
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _epochs(calls: Path) -> list[dict[str, object]]:
    if not calls.exists():
        return []
    return [json.loads(line) for line in calls.read_text().splitlines() if line.strip()]


def _start(spec: Path, calls: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "TOY_CALLS_FILE": str(calls), "ULTRON_CANCEL_GRACE": "3"}
    # A session of its own: the test signals the whole group, as a terminal's Ctrl-C does.
    return subprocess.Popen(
        [ULTRON, "run", str(spec), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=spec.parent,
        start_new_session=True,
    )


def _wait_for_epochs(proc: subprocess.Popen[str], calls: Path, count: int) -> None:
    deadline = time.monotonic() + 240
    while len(_epochs(calls)) < count:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the job never started training"
        time.sleep(0.2)


def test_ctrl_c_cancels_and_the_printed_command_resumes(tmp_path: Path, redis_url: str) -> None:
    spec = _spec(tmp_path, redis_url)
    calls = tmp_path / "calls.jsonl"
    proc = _start(spec, calls, "--job-id", "cancel-me-1")
    _wait_for_epochs(proc, calls, 2)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=15)  # the acceptance bound: out within 15 s

    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in out + err
    resume = f"ultron run {shlex.quote(str(spec))} --job-id cancel-me-1"
    assert "cancel-me-1" in out and resume in out  # said when the job starts...
    assert "cancelled" in err and resume in err  # ...and when it stops
    client = redis.Redis.from_url(redis_url)
    store = JobStore(client, "cancel-me-1")
    state = store.load()
    assert state is not None and state.status is JobStatus.CANCELLED
    interrupted = {info["hyperparameters"]["x"] for info in store.running().values()}
    assert interrupted  # trials were running: they resume from their checkpoints
    before = collections.Counter((e["x"], e["epoch"]) for e in _epochs(calls))

    command = shlex.split(resume)
    done = subprocess.run(
        [ULTRON, *command[1:]],
        capture_output=True,
        text=True,
        env={**os.environ, "TOY_CALLS_FILE": str(calls)},
        cwd=spec.parent,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    # Piped: one line per finished trial, as it finishes.
    lines = [line for line in done.stdout.splitlines() if line.startswith("trial ")]
    assert len(lines) == 5 - len(state.trials)
    final = store.load()
    assert final is not None and final.status is JobStatus.COMPLETED
    assert len(final.trials) == 5 and {t.status for t in final.trials} == {"completed"}
    trained = collections.Counter((e["x"], e["epoch"]) for e in _epochs(calls))
    assert {x for x, _ in trained} == {t.hyperparameters["x"] for t in final.trials}
    repeated = {key for key, count in trained.items() if count > 1}
    # Only the trials that were running repeat anything: at most the epoch they were in.
    assert {x for x, _ in repeated} <= interrupted
    assert all(sum(1 for x2, _ in repeated if x2 == x) <= 1 for x in interrupted)
    assert all(trained[(x, epoch)] >= 1 for x, _ in before for epoch in range(6))


def test_second_ctrl_c_forces_the_exit(tmp_path: Path, redis_url: str) -> None:
    spec = _spec(tmp_path, redis_url, search_space={"x": [0.1, 0.2], "epochs": [200]})
    calls = tmp_path / "calls.jsonl"
    proc = _start(spec, calls, "--job-id", "cancel-me-2")
    _wait_for_epochs(proc, calls, 1)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 130, (out, err)
    assert "forced exit" in err and "--job-id cancel-me-2" in err
    assert "Traceback" not in out + err
    time.sleep(2.0)  # a trial process notices within 1 s that its worker is gone
    sessions = subprocess.run(["ps", "-eo", "sid="], capture_output=True, text=True).stdout
    assert str(proc.pid) not in sessions.split()  # no Dask worker or Prefect server is left
    workers = {int(e["worker_pid"]) for e in _epochs(calls)}
    trials = subprocess.run(["ps", "-eo", "ppid=,args="], capture_output=True, text=True).stdout
    assert not [
        line
        for line in trials.splitlines()
        if "ultron.worker.process" in line and int(line.split()[0]) in workers
    ]


def test_sigterm_cancels_like_ctrl_c(tmp_path: Path, redis_url: str) -> None:
    """SIGTERM to the job's process alone, as Kubernetes or a Prefect cancellation sends it."""
    spec = _spec(tmp_path, redis_url, search_space={"x": [0.3, 0.4], "epochs": [200]})
    calls = tmp_path / "calls.jsonl"
    proc = _start(spec, calls, "--job-id", "cancel-me-3")
    _wait_for_epochs(proc, calls, 1)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 143, (out, err)
    assert "Traceback" not in out + err and "--job-id cancel-me-3" in err
    state = JobStore(redis.Redis.from_url(redis_url), "cancel-me-3").load()
    assert state is not None and state.status is JobStatus.CANCELLED
