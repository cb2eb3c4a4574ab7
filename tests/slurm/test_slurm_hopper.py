"""A hopper job (``execution: hopper``) through ``cluster: {type: slurm}`` on the real one-node
SLURM cluster: one worker job per partition, each holding its own; the job of a worker in the
middle of a sub-epoch is cancelled with ``scancel``, and a new job takes its partition.

Mid-sub-epoch by state: the model (``tests/data/hopper``) holds its first resumed sub-epoch
until it is killed, having written its process id, from which the test reads the SLURM job.
"""

from __future__ import annotations

import json
import subprocess
import threading
import uuid
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest

import ultron
from tests.flows.dask_processes import wait_for
from tests.flows.hopper_checks import partition_orders, partitions_by_process
from ultron.cluster import slurm as slurm_backend
from ultron.datamanager.partitions import fetch_partition, list_shards, plan_partitions
from ultron.master.hopper_search import READ_LOG_ENV
from ultron.trial_records import trial_seed
from ultron.worker.hopper import checkpoint_url, train_sequentially

CODE = Path(__file__).parents[1] / "data" / "hopper"
PARTITIONS, CONFIGS, EPOCHS, SHARDS = 2, 2, 2, 4

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


def _write_data(folder: Path) -> None:
    folder.mkdir()
    rng = np.random.default_rng(5)
    for i in range(SHARDS):
        x = rng.normal(size=(20, 3))
        y = x @ np.array([1.0, -2.0, 0.5]) + 0.3 + rng.normal(0, 0.1, 20)
        np.savez(folder / f"shard-{i}.npz", x=x, y=y)


def _slurm_job_of(pid: int) -> str:
    """The SLURM job a process runs in (its environment, as slurmd set it)."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    (job,) = [e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"SLURM_JOB_ID=")]
    return job


def test_a_hopper_job_on_slurm_gives_each_worker_job_a_partition_and_replaces_a_lost_one(
    tmp_path: Path,
    redis_url: str,
    ultron_home: Path,
    slurm: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = f"hopper-slurm-{uuid.uuid4().hex[:6]}"
    data = tmp_path / "data"
    _write_data(data)
    reads, hold = tmp_path / "reads.jsonl", tmp_path / "hold"
    hold.mkdir()
    # sbatch hands this environment on to the worker jobs (--export=ALL).
    monkeypatch.setenv(READ_LOG_ENV, str(reads))
    monkeypatch.setenv("HOPPER_HOLD_DIR", str(hold))
    # Sooner than a real site's 15 s + 10 s: Dask forgets the lost worker after 1 s, and the
    # cluster resubmits its job at its next check, every second here.
    monkeypatch.setattr(slurm_backend, "_REPLACE_EVERY_S", 1)
    cancelled: dict[str, Any] = {}
    errors: list[BaseException] = []

    def cancel_the_held_worker_job() -> None:
        try:
            held = hold / "hold"
            wait_for(lambda: held.exists() and len(held.read_text().split()) == 2, "a hold")
            pid, lr = held.read_text().split()
            job = _slurm_job_of(int(pid))
            subprocess.run(["scancel", job], check=True, timeout=30)
            cancelled.update(job=job, pid=int(pid), lr=float(lr))
        except BaseException as exc:  # handed to the test
            errors.append(exc)

    canceller = threading.Thread(target=cancel_the_held_worker_job, daemon=True)
    canceller.start()
    lrs = [0.05, 0.1]
    spec = {
        "name": name,
        "code": str(CODE),
        "model": "hopper_linear:Linear",
        "search_space": {"lr": lrs},
        "strategy": "grid",
        "num_iterations": CONFIGS,
        "parallelism": PARTITIONS,
        "seed": 4,
        "objective": {"metric": "loss", "mode": "minimize"},
        "data": {"url": str(data), "format": "numpy", "batch_size": 5},
        "execution": {"mode": "hopper", "epochs": EPOCHS},
        "cluster": {"type": "slurm", "walltime": "00:15:00"},
        "storage": str(tmp_path / "runs"),
        "cache": False,
        "redis_url": redis_url,
    }
    with dask.config.set({"distributed.deploy.lost-worker-timeout": "1s"}):
        result = ultron.run(spec, job_id=f"{name}-job")
    canceller.join(timeout=5)
    assert not errors, errors
    assert cancelled, "no worker job was cancelled"
    assert result.status == "completed"
    assert sorted(t.hyperparameters["lr"] for t in result.trials) == lrs

    state = json.loads((Path(result.results_url) / "hopper-state.json").read_text())
    records = state["records"]
    configs = {t.trial_id: t.hyperparameters for t in result.trials}
    # Every model trained its epochs, visiting each partition once per epoch, each sub-epoch
    # on the worker job that holds the partition.
    orders = partition_orders(records, list(configs), PARTITIONS, EPOCHS)
    assert all(r["worker"].endswith(f"-partition-{r['partition']}") for r in records)

    # Each worker process read its own partition only; the cancelled job's partition was
    # read again by its replacement, a new SLURM job (three jobs' output files in all).
    log = [json.loads(line) for line in reads.read_text().splitlines()]
    assert all(e["reader"].endswith(f"-partition-{e['partition']}") for e in log)
    by_process = partitions_by_process(log)
    (lost,) = by_process.pop(cancelled["pid"])
    assert any(lost in parts for parts in by_process.values())
    outputs = list((ultron_home / "slurm").glob(f"ultron-{name}*/*.out"))
    assert len(outputs) == PARTITIONS + 1, outputs
    assert cancelled["job"] in {p.name.rsplit("-", 1)[1].removesuffix(".out") for p in outputs}

    # The model whose sub-epoch was cut short resumed from its last checkpoint: it ends with
    # the weights of one process training it over the same partitions in the same order.
    model = next(m for m, c in configs.items() if c["lr"] == cancelled["lr"])
    plan = plan_partitions(list_shards(str(data)), partitions=PARTITIONS, seed=4, url=str(data))
    paths = {k: fetch_partition(plan, k, tmp_path / f"p{k}") for k in range(PARTITIONS)}
    request = {
        "model": spec["model"], "code_paths": [str(CODE)], "batch_size": 5,
        "hyperparameters": configs[model], "seed": trial_seed(4, configs[model]),
    }  # fmt: skip
    folder = train_sequentially(request, paths, orders[model])
    final = checkpoint_url(f"{result.results_url}/checkpoints/{model}", PARTITIONS * EPOCHS)
    assert np.array_equal(np.load(f"{final}/weights.npy"), np.load(f"{folder}/weights.npy"))
    assert slurm.squeue() == []  # finalize cancelled every worker job
