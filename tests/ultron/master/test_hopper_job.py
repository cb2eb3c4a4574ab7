"""A hopper job (model hopper parallelism) on a real cluster: ``dask scheduler`` and three
``dask worker`` processes on loopback, each holding one partition, the data set in the S3
server on loopback, and one worker killed in the middle of a sub-epoch."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ultron.datamanager.partitions import fetch_partition, list_shards, plan_partitions
from ultron.master.hopper import HopperJob, HopperRunner
from ultron.master.score_cache import ScoreCache
from ultron.worker.hopper import train_sequentially

CODE = Path(__file__).parents[2] / "data" / "hopper"
DASK = str(Path(sys.executable).with_name("dask"))
WORKERS, CONFIGS, EPOCHS, SHARDS = 3, 6, 3, 6

pytestmark = pytest.mark.slow


def _wait_for(condition: Callable[[], bool], timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the awaited moment never came")
        time.sleep(0.05)


@pytest.fixture
def partition_cluster(tmp_path: Path, s3_endpoint: str) -> Iterator[str]:
    """``dask scheduler`` and three ``dask worker`` processes (with their nannies), worker k
    holding ``partition-k``; the workers see the S3 server (``s3_endpoint`` set the env)."""
    hold = tmp_path / "hold"
    hold.mkdir()
    env = {**os.environ, "HOPPER_HOLD_DIR": str(hold)}
    scheduler_file = tmp_path / "scheduler.json"
    logs = (tmp_path / "dask.log").open("wb")
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> None:
        started.append(
            subprocess.Popen(
                [DASK, *args], env=env, stdout=logs, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )  # fmt: skip

    try:
        start(
            "scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", ":0",
            "--scheduler-file", str(scheduler_file),
        )  # fmt: skip
        _wait_for(lambda: scheduler_file.exists() and bool(scheduler_file.read_text()), 60)
        address = json.loads(scheduler_file.read_text())["address"]
        for k in range(WORKERS):
            start(
                "worker", address, "--nthreads", "1", "--memory-limit", "0", "--no-dashboard",
                "--host", "127.0.0.1", "--name", f"w{k}", "--resources", f"partition-{k}=1",
            )  # fmt: skip
        yield address
    finally:
        for proc in reversed(started):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        logs.close()


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
) -> None:
    import redis
    from distributed import Client

    base = f"{s3_url}/{tmp_path.name}"
    _write_data(f"{base}/data", s3_storage_options)
    reads = tmp_path / "reads.jsonl"
    job = HopperJob(
        job_id="hop",
        model="hopper_linear:Linear",
        configs={f"c{i}": {"lr": 0.02 * (i + 1), "name": f"c{i}"} for i in range(CONFIGS)},
        data_url=f"{base}/data",
        storage=f"{base}/job",
        partitions=WORKERS,
        epochs=EPOCHS,
        seed=3,
        code_paths=(str(CODE),),
        batch_size=8,
        storage_options=s3_storage_options,
        read_log=str(reads),
    )
    hold = tmp_path / "hold" / "hold"
    killed: dict[str, Any] = {}

    def kill_the_held_worker() -> None:  # a resumed sub-epoch waits there to be killed
        _wait_for(lambda: hold.exists() and len(hold.read_text().split()) == 2)
        pid, name = hold.read_text().split()
        killed.update(pid=int(pid), model=name)
        os.kill(int(pid), signal.SIGKILL)

    killer = threading.Thread(target=kill_the_held_worker, daemon=True)
    killer.start()
    cache = ScoreCache(
        redis.Redis.from_url(redis_url), code_hash="c0de", model=job.model, seed=job.seed,
        metric="loss", tenant="t", namespace=f"test-{tmp_path.name}",
    )  # fmt: skip
    with Client(partition_cluster, timeout=30) as client:
        client.wait_for_workers(WORKERS, timeout=120)
        runner = HopperRunner(client, job, cache=cache)
        result = runner.run()
    killer.join(timeout=5)
    assert killed, "no worker was killed"

    # Every model trained exactly 3 epochs, each visiting every partition exactly once.
    per_model = Counter(r["model_id"] for r in result.records)
    assert per_model == {m: WORKERS * EPOCHS for m in job.configs}
    for model, order in result.orders.items():
        assert [sorted(epoch) for epoch in order] == [list(range(WORKERS))] * EPOCHS, model
        steps = sorted(r["step"] for r in result.records if r["model_id"] == model)
        assert steps == list(range(WORKERS * EPOCHS))
    assert not result.failed and not result.stopped
    # Each model's last epoch went to the score cache.
    keys = [runner.cache_key(m) for m in job.configs]
    hits = cache.get_many(keys, job_id="another", trial_ids=list(job.configs))
    assert [h["score"] if h else None for h in hits] == [
        result.epochs[m][-1]["loss"] for m in job.configs
    ]

    # The killed worker was replaced, and the replacement fetched the partition again.
    plan = plan_partitions(
        list_shards(job.data_url, s3_storage_options), partitions=WORKERS, seed=job.seed,
        url=job.data_url,
    )  # fmt: skip
    log = [json.loads(line) for line in reads.read_text().splitlines()]
    by_process: dict[int, set[int]] = {}
    for entry in log:
        assert entry["file"] in plan.shards[entry["partition"]], entry
        assert entry["reader"] == f"w{entry['partition']}", entry  # the worker holding it
        by_process.setdefault(entry["pid"], set()).add(entry["partition"])
    assert all(len(parts) == 1 for parts in by_process.values()), by_process
    assert killed["pid"] in by_process
    lost = by_process[killed["pid"]].pop()
    assert sum(lost in parts for parts in by_process.values()) >= 1  # the replacement
    for pid in {e["pid"] for e in log}:  # each process read its own shards once
        files = Counter(e["file"] for e in log if e["pid"] == pid)
        assert set(files.values()) == {1}
        assert len(files) < SHARDS  # never the whole data set
    assert len({r["pid"] for r in result.records}) == WORKERS + 1  # three, then the replacement

    # The model whose sub-epoch was killed ends with the weights of a sequential run.
    model = killed["model"]
    paths = {
        k: fetch_partition(plan, k, tmp_path / f"p{k}", storage_options=s3_storage_options)
        for k in range(WORKERS)
    }
    folder = train_sequentially(job.request(plan, model), paths, result.orders[model])
    import fsspec

    fs, final = fsspec.core.url_to_fs(result.checkpoints[model], **s3_storage_options)
    hopped = np.load(io.BytesIO(fs.cat_file(f"{final}/weights.npy")))
    assert np.array_equal(hopped, np.load(Path(folder) / "weights.npy"))
