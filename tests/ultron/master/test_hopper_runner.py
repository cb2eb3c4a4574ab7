"""The hopper runner's parts at the cheapest level: the score cache (real Redis), the stopper
(the hops' answers handed over without a cluster), the check of the workers' resources, and
on the job's own cluster the wait for a partition's worker still on its way."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis

from ultron.algorithms.stoppers.median import MedianStopping
from ultron.cluster.partitions import local_partition_cluster
from ultron.master.hopper import HopperJob, HopperRunner
from ultron.master.score_cache import ScoreCache

HOPPER_CODE = Path(__file__).parents[2] / "data" / "hopper"


def test_models_the_cache_answers_are_not_trained(tmp_path: Path, redis_url: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(2):
        np.savez(data / f"s{i}.npz", x=np.zeros((4, 2)), y=np.zeros(4))
    job = HopperJob(
        job_id="cached",
        model="absent:Model",  # never imported: no sub-epoch runs
        configs={"a": {"lr": 0.1}, "b": {"lr": 0.2}},
        data_url=str(data),
        storage=str(tmp_path / "job"),
        partitions=2,
        epochs=3,
    )
    cache = ScoreCache(
        redis.Redis.from_url(redis_url), code_hash="c0de", model=job.model, seed=0,
        metric="loss", tenant="t", namespace=f"test-{uuid.uuid4().hex[:8]}",
    )  # fmt: skip
    # No Dask client: a job whose every model the cache answers submits nothing.
    runner = HopperRunner(None, job, cache=cache)
    for model in job.configs:
        cache.put(runner.cache_key(model), {"score": 0.5, "metrics": {"loss": 0.5}})
    other = HopperRunner(None, HopperJob(**{**job.__dict__, "epochs": 4}))
    assert cache.get_many([other.cache_key("a")], job_id="x", trial_ids=["a"]) == [None]

    result = runner.run()

    assert sorted(result.cached) == ["a", "b"]
    assert all(hit["score"] == 0.5 for hit in result.cached.values())
    assert result.records == [] and result.orders == {"a": [], "b": []}


def _job(tmp_path: Path, **changes: object) -> HopperJob:
    fields: dict[str, Any] = {
        "job_id": "unit",
        "model": "absent:Model",
        "configs": {f"m{i}": {"lr": i} for i in range(6)},
        "data_url": str(tmp_path),
        "storage": str(tmp_path / "job"),
        "partitions": 2,
        "epochs": 3,
        **changes,
    }
    return HopperJob(**fields)


def test_the_stopper_hears_each_epoch_weighted_by_records_and_stops_models(
    tmp_path: Path,
) -> None:
    # No cluster: the hops' answers are handed to the runner as Dask would hand them.
    stopper = MedianStopping(max_resource=3, min_trials=2)
    heard: list[tuple[str, int, dict[str, float]]] = []
    runner = HopperRunner(
        None, _job(tmp_path), stopper=stopper, on_epoch=lambda *a: heard.append(a)
    )
    losses = {f"m{i}": float(i) for i in range(6)}  # m5 is the worst
    while not runner.scheduler.finished:
        for hop in runner.scheduler.assign():
            records = 10 if hop.partition == 0 else 30
            loss = losses[hop.model] + hop.partition  # partition 1 weighs three times more
            answer = {"model_id": hop.model, "epoch": hop.epoch, "partition": hop.partition,
                      "step": hop.step, "records": records, "metrics": {"loss": loss}}  # fmt: skip
            runner._completed(hop, answer)
    first = {model: metrics for model, epoch, metrics in heard if epoch == 0}
    assert first["m0"] == {"loss": 0.75}  # (0 * 10 + 1 * 30) / 40
    assert "m5" in runner._stopped and len(runner.scheduler.order("m5")) < 3
    assert runner.scheduler.order("m0") and len(runner.scheduler.order("m0")) == 3


def test_a_partition_no_worker_holds_is_refused_before_any_training(tmp_path: Path) -> None:
    from distributed import Client

    np.savez(tmp_path / "s0.npz", x=np.zeros(2))
    np.savez(tmp_path / "s1.npz", x=np.zeros(2))
    with (
        local_partition_cluster(1, processes=False) as cluster,  # partition-0 only
        Client(cluster) as client,
        pytest.raises(ValueError, match=r"no worker holds partition-1.*Fix"),
    ):
        HopperRunner(client, _job(tmp_path)).run()


def test_a_runner_started_again_goes_on_from_the_stored_state(tmp_path: Path) -> None:
    job = _job(tmp_path)
    first = HopperRunner(None, job)
    for hop in first.scheduler.assign():
        answer = {"model_id": hop.model, "epoch": hop.epoch, "partition": hop.partition,
                  "step": hop.step, "records": 1, "metrics": {"loss": 1.0}}  # fmt: skip
        first._completed(hop, answer)
    running = first.scheduler.assign()  # lost with the first runner: they run again
    first._save()

    second = HopperRunner(None, job)
    second._load()

    assert second.records == first.records
    assert second.scheduler.log == first.scheduler.log
    for hop in running:
        first.scheduler.release(hop)
    assert second.scheduler.assign() == first.scheduler.assign()


def test_on_the_job_s_own_cluster_a_sub_epoch_waits_for_its_partition_s_worker(
    tmp_path: Path,
) -> None:
    # A SLURM job or a pod still on its way: the worker of partition-1 joins after the run began.
    import threading

    from distributed import Client, Worker

    data = tmp_path / "data"
    data.mkdir()
    for i in range(2):
        np.savez(data / f"s{i}.npz", x=np.ones((4, 3)), y=np.ones(4))
    job = _job(
        tmp_path, model="hopper_linear:Linear", code_paths=(str(HOPPER_CODE),),
        configs={"m0": {"lr": 0.1}}, data_url=str(data), epochs=1,
    )  # fmt: skip

    def unrunnable(dask_scheduler: Any = None) -> int:
        return len(dask_scheduler.unrunnable)

    waited: list[bool] = []
    with (
        local_partition_cluster(1, processes=False) as cluster,  # partition-0 only, so far
        Client(cluster) as client,
    ):

        def join_late() -> None:  # once a sub-epoch waits for a worker with partition-1
            deadline = time.monotonic() + 60
            while not client.run_on_scheduler(unrunnable) and time.monotonic() < deadline:
                time.sleep(0.05)
            waited.append(time.monotonic() < deadline)
            options = {"nthreads": 1, "resources": {"partition-1": 1}}
            cluster.worker_spec["late"] = {"cls": Worker, "options": options}
            cluster.scale(2)

        joiner = threading.Thread(target=join_late, daemon=True)
        joiner.start()
        result = HopperRunner(client, job, own_workers=True).run()
        joiner.join(timeout=10)

    assert waited == [True]  # the run did not refuse partition-1: its sub-epoch waited
    assert sorted(result.orders["m0"][0]) == [0, 1]
    assert {r["worker"] for r in result.records} == {"partition-worker-0", "late"}


def test_a_partition_worker_has_a_trial_s_threads_and_not_dask_s_trim_threshold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The models train in the partition workers' own processes: they get the job's threads
    (resources.cpu) for OpenMP, MKL and OpenBLAS, as the libraries size their pools, and
    glibc's default trim threshold, with which PyTorch training runs about twice as fast
    (ultron.worker.threads)."""
    threadpoolctl = pytest.importorskip("threadpoolctl", reason="reads the BLAS's own threads")
    from distributed import Client

    # A local cluster another test started in this process left Dask's values here (its
    # nannies set them in the process that runs them); a job's process has what its user set.
    for name in ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                 "OPENBLAS_NUM_THREADS"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)

    def settings() -> dict[str, Any]:
        import os

        import numpy  # noqa: F401  # its BLAS, sized as it loads

        pools = threadpoolctl.threadpool_info()
        blas = [pool["num_threads"] for pool in pools if pool["user_api"] == "blas"]
        names = ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS")
        return {"blas": blas, **{name: os.environ.get(name) for name in names}}

    with (
        local_partition_cluster(1, model_threads=2) as cluster,
        Client(cluster) as client,
    ):
        (seen,) = client.run(settings).values()
    assert seen["MALLOC_TRIM_THRESHOLD_"] is None and seen["OMP_NUM_THREADS"] == "2", seen
    assert seen["blas"] and set(seen["blas"]) == {2}, seen
