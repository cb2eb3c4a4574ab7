"""A job on a Dask cluster that runs already (``cluster: {type: address}``): a scheduler and
three workers started by hand, as ``dask scheduler`` and ``dask worker`` on loopback, one
worker killed mid-trial."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import ultron
from ultron.trial_records import TrialStatus

TOY = Path(__file__).parents[1] / "data" / "toy"
DASK = str(Path(sys.executable).with_name("dask"))
WORKERS = 3
EPOCHS = 8  # 0.4 s each: the kill at epoch 2 comes with seconds of the trial left

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


def _log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _wait_for(condition: Callable[[], bool], timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the awaited moment never came")
        time.sleep(0.05)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a process started in a session of its own, and everything it started."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


@pytest.fixture
def dask_cluster(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``dask scheduler`` and three ``dask worker`` processes (one thread each, with their
    nannies) on loopback: the scheduler's address and the file the toy model logs to."""
    calls = tmp_path / "calls.jsonl"
    env = {**os.environ, "TOY_CALLS_FILE": str(calls)}  # the workers' trials log here
    scheduler_file = tmp_path / "scheduler.json"
    logs = (tmp_path / "dask.log").open("wb")
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> None:
        started.append(
            subprocess.Popen(
                [DASK, *args],
                env=env,
                stdout=logs,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    try:
        start(
            "scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", ":0",
            "--scheduler-file", str(scheduler_file),
        )  # fmt: skip
        _wait_for(lambda: scheduler_file.exists() and bool(scheduler_file.read_text()), 60)
        address = json.loads(scheduler_file.read_text())["address"]
        for _ in range(WORKERS):
            start(
                "worker", address, "--nthreads", "1", "--memory-limit", "0",
                "--no-dashboard", "--host", "127.0.0.1",
            )  # fmt: skip
        from distributed import Client

        with Client(address, timeout=30) as client:
            client.wait_for_workers(WORKERS, timeout=120)
        yield address, calls
    finally:
        for proc in reversed(started):
            _stop(proc)
        logs.close()


def test_a_job_on_a_running_cluster_survives_a_killed_worker(
    tmp_path: Path, redis_url: str, dask_cluster: tuple[str, Path]
) -> None:
    address, calls = dask_cluster
    killed: dict[str, object] = {}

    def kill_a_worker() -> None:
        # The chosen point: some trial has checkpointed epoch 2; kill -9 its Dask worker.
        _wait_for(lambda: any(e["epoch"] >= 2 for e in _log(calls)))
        victim = next(e for e in _log(calls) if e["epoch"] >= 2)
        killed.update(victim)
        os.kill(victim["worker_pid"], signal.SIGKILL)

    killer = threading.Thread(target=kill_a_worker, daemon=True)
    killer.start()
    xs = [1.0, 2.0, 3.0, 4.0]
    result = ultron.run(
        {
            "name": "address-cluster",
            "code": str(TOY),
            "model": "toy_model:Epochs",
            "search_space": {"x": xs, "epochs": [EPOCHS], "tag": [uuid.uuid4().hex]},
            "strategy": "grid",
            "num_iterations": len(xs),
            "parallelism": WORKERS,
            "retries": 2,
            "objective": {"metric": "loss"},
            "storage": str(tmp_path / "runs"),
            "redis_url": redis_url,
            "cluster": {"type": "address", "address": address},
        }
    )
    killer.join(timeout=5)

    assert killed, "no worker was killed"
    assert result.status == "completed"
    # Every configuration scored once: one completed row each, with its own score.
    assert sorted(t.hyperparameters["x"] for t in result.trials) == xs
    assert all(t.status is TrialStatus.COMPLETED for t in result.trials)
    assert {t.hyperparameters["x"]: t.score for t in result.trials} == {x: x for x in xs}
    log = _log(calls)
    pids = {e["worker_pid"] for e in log}
    assert killed["worker_pid"] in pids and len(pids) >= 2  # trials ran on the outside workers
    victim = killed["x"]
    by_x = {t.hyperparameters["x"]: t for t in result.trials}
    assert by_x[victim].attempts == 2  # the killed attempt, then one retry
    resumed = [e for e in log if e["x"] == victim and e["resume"]]
    # The retry started from the checkpoint: after the epoch it had saved, not from epoch 0.
    assert resumed and resumed[0]["epoch"] >= killed["epoch"]
    assert all(e["worker_pid"] != killed["worker_pid"] for e in resumed)
    epochs = Counter(e["x"] for e in log)
    assert epochs[victim] <= EPOCHS + 1  # at most the epoch in progress was trained twice
    assert all(epochs[x] == EPOCHS and by_x[x].attempts == 1 for x in xs if x != victim)
