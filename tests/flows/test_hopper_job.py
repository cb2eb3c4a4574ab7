"""A job with ``execution: hopper`` (model hopper parallelism) run by ``ultron.run`` on a real
cluster (``cluster: {type: address}``): ``dask scheduler`` and three ``dask worker`` processes
on loopback, each holding one partition, the data set and the job's storage in the S3 server on
loopback, and one worker killed in the middle of a sub-epoch."""

from __future__ import annotations

import io
import json
import os
import signal
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ultron
from tests.flows.dask_processes import DaskProcesses, wait_for
from tests.flows.hopper_checks import partition_orders, partitions_by_process
from ultron.datamanager.partitions import fetch_partition, list_shards, plan_partitions
from ultron.master.hopper_search import READ_LOG_ENV
from ultron.trial_records import trial_seed
from ultron.worker.hopper import checkpoint_url, train_sequentially

CODE = Path(__file__).parents[1] / "data" / "hopper"
WORKERS, CONFIGS, EPOCHS, SHARDS = 3, 6, 3, 6

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


@pytest.fixture
def partition_cluster(tmp_path: Path, s3_endpoint: str, dask_processes: DaskProcesses) -> str:
    """``dask scheduler`` and three ``dask worker`` processes (with their nannies), worker k
    holding ``partition-k``; the workers see the S3 server (``s3_endpoint`` set the env)."""
    hold = tmp_path / "hold"
    hold.mkdir()
    address = dask_processes.scheduler()
    for k in range(WORKERS):
        dask_processes.worker(
            "--name", f"w{k}", "--resources", f"partition-{k}=1",
            env={"HOPPER_HOLD_DIR": str(hold)},
        )  # fmt: skip
    # The job checks at its start that a worker holds each partition.
    dask_processes.wait_for_workers(WORKERS)
    return address


def _write_data(url: str, options: dict[str, Any]) -> None:
    import fsspec

    fs, root = fsspec.core.url_to_fs(url, **options)
    rng = np.random.default_rng(7)
    for i in range(SHARDS):
        x = rng.normal(size=(30, 3))
        out = io.BytesIO()
        np.savez(out, x=x, y=x @ np.array([1.0, -2.0, 0.5]) + 0.3 + rng.normal(0, 0.1, 30))
        fs.pipe_file(f"{root}/shard-{i}.npz", out.getvalue())


def test_hopper_job_visits_each_partition_once_per_epoch_and_survives_a_killed_worker(
    tmp_path: Path,
    s3_url: str,
    s3_storage_options: dict[str, Any],
    partition_cluster: str,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = f"{s3_url}/{tmp_path.name}"
    data_url = f"{base}/data"
    _write_data(data_url, s3_storage_options)
    reads = tmp_path / "reads.jsonl"
    monkeypatch.setenv(READ_LOG_ENV, str(reads))
    lrs = [0.02 * (i + 1) for i in range(CONFIGS)]
    spec = {
        "name": "hopper",
        "code": str(CODE),
        "model": "hopper_linear:Linear",
        "search_space": {"lr": lrs},
        "strategy": "grid",
        "num_iterations": CONFIGS,
        "parallelism": WORKERS,
        "seed": 3,
        "objective": {"metric": "loss", "mode": "minimize"},
        "data": {"url": data_url, "format": "numpy", "batch_size": 8},
        "execution": {"mode": "hopper", "epochs": EPOCHS},
        "cluster": {"type": "address", "address": partition_cluster},
        "storage": f"{base}/runs",
        "redis_url": redis_url,
    }
    hold = tmp_path / "hold" / "hold"
    killed: dict[str, Any] = {}

    def kill_the_held_worker() -> None:  # a resumed sub-epoch waits there to be killed
        wait_for(lambda: hold.exists() and len(hold.read_text().split()) == 2, "a held worker")
        pid, lr = hold.read_text().split()
        killed.update(pid=int(pid), lr=float(lr))
        os.kill(int(pid), signal.SIGKILL)

    killer = threading.Thread(target=kill_the_held_worker, daemon=True)
    killer.start()
    result = ultron.run(spec, job_id=f"hopper-{tmp_path.name[-12:]}")
    killer.join(timeout=5)
    assert killed, "no worker was killed"

    import fsspec

    fs, root = fsspec.core.url_to_fs(result.results_url, **s3_storage_options)
    records = json.loads(fs.cat_file(f"{root}/hopper-state.json"))["records"]
    configs = {t.trial_id: t.hyperparameters for t in result.trials}
    assert sorted(c["lr"] for c in configs.values()) == lrs

    # Every configuration trained exactly 3 epochs, each visiting every partition exactly once.
    orders = partition_orders(records, list(configs), WORKERS, EPOCHS)
    # The trial table: a completed row per configuration, scored by its last epoch.
    for trial in result.trials:
        last = [r for r in records if r["model_id"] == trial.trial_id and r["epoch"] == 2]
        total = sum(r["records"] for r in last)
        loss = sum(r["metrics"]["loss"] * r["records"] for r in last) / total
        assert trial.status == "completed" and trial.score == pytest.approx(loss)
    assert result.best_score == min(t.score for t in result.trials if t.score is not None)

    # The killed worker was replaced, and the replacement fetched the partition again.
    plan = plan_partitions(
        list_shards(data_url, s3_storage_options), partitions=WORKERS, seed=3, url=data_url
    )
    log = [json.loads(line) for line in reads.read_text().splitlines()]
    for entry in log:
        assert entry["file"] in plan.shards[entry["partition"]], entry
        assert entry["reader"] == f"w{entry['partition']}", entry  # the worker holding it
    by_process = partitions_by_process(log)
    assert killed["pid"] in by_process
    lost = by_process[killed["pid"]].pop()
    assert sum(lost in parts for parts in by_process.values()) >= 1  # the replacement
    for pid in {e["pid"] for e in log}:  # each process read its own shards once
        files = Counter(e["file"] for e in log if e["pid"] == pid)
        assert set(files.values()) == {1}
        assert len(files) < SHARDS  # never the whole data set
    assert len({r["pid"] for r in records}) == WORKERS + 1  # three, then the replacement

    # The configuration whose sub-epoch was killed ends with the weights of a sequential run.
    model = next(m for m, c in configs.items() if c["lr"] == killed["lr"])
    paths = {
        k: fetch_partition(plan, k, tmp_path / f"p{k}", storage_options=s3_storage_options)
        for k in range(WORKERS)
    }
    request = {
        "model": spec["model"], "code_paths": [str(CODE)], "batch_size": 8,
        "hyperparameters": configs[model], "seed": trial_seed(3, configs[model]),
    }  # fmt: skip
    folder = train_sequentially(request, paths, orders[model])
    final = checkpoint_url(f"{root}/checkpoints/{model}", WORKERS * EPOCHS)
    hopped = np.load(io.BytesIO(fs.cat_file(f"{final}/weights.npy")))
    assert np.array_equal(hopped, np.load(Path(folder) / "weights.npy"))
