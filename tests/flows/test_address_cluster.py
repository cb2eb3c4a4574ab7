"""A job on a Dask cluster that runs already (``cluster: {type: address}``): a scheduler and
three workers started by hand, as ``dask scheduler`` and ``dask worker`` on loopback, one
worker killed mid-trial."""

from __future__ import annotations

import json
import os
import signal
import threading
import uuid
from collections import Counter
from pathlib import Path

import pytest

import ultron
from tests.flows.dask_processes import DaskProcesses, wait_for
from ultron.trial_records import TrialStatus

TOY = Path(__file__).parents[1] / "data" / "toy"
WORKERS = 3
EPOCHS = 8  # 0.4 s each: the kill at epoch 2 comes with seconds of the trial left

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


def _log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def dask_cluster(tmp_path: Path, dask_processes: DaskProcesses) -> tuple[str, Path]:
    """``dask scheduler`` and three ``dask worker`` processes (one thread each, with their
    nannies) on loopback: the scheduler's address and the file the toy model logs to."""
    calls = tmp_path / "calls.jsonl"
    env = {"TOY_CALLS_FILE": str(calls)}  # the workers' trials log here
    address = dask_processes.scheduler(env=env)
    for _ in range(WORKERS):
        dask_processes.worker(env=env)
    dask_processes.wait_for_workers(WORKERS)
    return address, calls


def test_a_job_on_a_running_cluster_survives_a_killed_worker(
    tmp_path: Path, redis_url: str, dask_cluster: tuple[str, Path]
) -> None:
    address, calls = dask_cluster
    killed: dict[str, object] = {}

    def kill_a_worker() -> None:
        # The chosen point: some trial has checkpointed epoch 2; kill -9 its Dask worker.
        wait_for(lambda: any(e["epoch"] >= 2 for e in _log(calls)), "a checkpoint of epoch 2")
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
