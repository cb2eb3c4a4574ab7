"""One sub-epoch of model hopper parallelism, run by the Dask worker that holds the partition.

The function Dask runs is :func:`run_sub_epoch`. The task is restricted to workers with the
resource ``partition-<k>``, so it lands on the worker that holds partition ``k``; the first
sub-epoch there fetches the partition from the store onto the worker's local folder (a worker
started to replace a lost one has a new folder, and fetches it again). The model's checkpoint
after ``n`` sub-epochs lies in the store under ``<checkpoints>/step-<n>``: the sub-epoch restores
checkpoint ``step``, calls the model's ``train_epoch`` with ``ultron.data`` pointed at the local
partition, and saves checkpoint ``step + 1``. A sub-epoch run again (its worker died) restores
the same checkpoint and writes the same one, so a lost hop costs only its own time.

:func:`train_sequentially` runs the same code over given partitions in one process: the
sequential reference a hopper job's weights equal, and the unit of work of task parallelism.
"""

from __future__ import annotations

import importlib
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ultron.datamanager.partitions import (
    PartitionPlan,
    fetch_partition,
    load_partition,
    resource_name,
)
from ultron.usercode import user_code

__all__ = ["checkpoint_url", "run_sub_epoch", "train_sequentially"]

# (worker, job, partition) -> the local file and its record count
_FETCHED: dict[tuple[str, str, int], tuple[Path, int]] = {}


def checkpoint_url(base: str, step: int) -> str:
    """Where a model's checkpoint after ``step`` sub-epochs lies, under its folder ``base``."""
    return f"{base.rstrip('/')}/step-{step:05d}"


def _worker() -> Any:
    from distributed import get_worker

    return get_worker()


def _local_partition(request: dict[str, Any], partition: int) -> tuple[Path, int]:
    """This worker's copy of ``partition`` and its record count, fetched the first time."""
    worker = _worker()
    if not worker.state.total_resources.get(resource_name(partition)):
        raise RuntimeError(
            f"worker {worker.name} does not hold {resource_name(partition)} "
            f"(its resources: {worker.state.total_resources})"
        )
    key = (str(worker.id), str(request["job_id"]), partition)
    fetched = _FETCHED.get(key)
    if fetched is None or not fetched[0].exists():
        folder = Path(worker.local_directory, "ultron-hopper", request["job_id"], str(partition))
        path = fetch_partition(
            PartitionPlan.from_dict(request["plan"]),
            partition,
            folder,
            storage_options=request.get("storage_options"),
            read_log=request.get("read_log"),
            reader=str(worker.name),
        )
        fetched = _FETCHED[key] = (path, len(next(iter(load_partition(path).values()))))
    return fetched


def _train(request: dict[str, Any], model: Any, partition_path: Path, checkpoint: str) -> Any:
    """One call of the model's ``train_epoch`` with ``ultron.data`` on ``partition_path``."""
    from ultron import data

    data.set_service(
        {"partition_path": str(partition_path), "batch_size": request["batch_size"]},
        seed=request.get("seed"),
        hyperparameters=request["hyperparameters"],
    )
    try:
        resume = any(Path(checkpoint).iterdir())
        return model.train_epoch(dict(request["hyperparameters"]), checkpoint, resume)
    finally:
        data.set_service(None)


def _model(request: dict[str, Any]) -> Any:
    """A new instance of the job's model class (``module:Class``) from its code base."""
    module_name, _, class_name = str(request["model"]).partition(":")
    with user_code(request.get("code_paths") or []):
        cls = getattr(importlib.import_module(module_name), class_name)
    if not callable(getattr(cls, "train_epoch", None)):
        raise TypeError(
            f"model {request['model']!r} has no train_epoch(hyperparameters, checkpoint_path, "
            "resume); hopper mode calls it once per sub-epoch. Fix: add that method"
        )
    return cls()


def _metrics(answer: Any) -> dict[str, float]:
    if answer is None:
        return {}
    if isinstance(answer, dict):
        return {str(k): float(v) for k, v in answer.items()}
    return {"value": float(answer)}


def run_sub_epoch(request: dict[str, Any]) -> dict[str, Any]:
    """Train one model one sub-epoch on this worker's partition; the function Dask runs.

    Args:
        request: the job's fields (``job_id``, ``model``, ``code_paths``, ``plan``,
            ``storage_options``, ``batch_size``, ``read_log``), the model's
            (``model_id``, ``hyperparameters``, ``seed``, ``checkpoints``: its folder in the
            store) and the hop's (``partition``, ``epoch``, ``step``).

    Returns:
        The hop, the metrics ``train_epoch`` returned, the partition's record count, who ran
        it (worker name and process id) and how long it took (seconds, fetch included).
    """
    import fsspec

    started = time.perf_counter()
    partition, step = int(request["partition"]), int(request["step"])
    path, records = _local_partition(request, partition)
    fs, base = fsspec.core.url_to_fs(
        request["checkpoints"], **(request.get("storage_options") or {})
    )
    with tempfile.TemporaryDirectory(prefix="ultron-hop-") as checkpoint:
        if step > 0:
            fs.get(checkpoint_url(base, step).rstrip("/") + "/", checkpoint, recursive=True)
        answer = _train(request, _model(request), path, checkpoint)
        # A lost attempt's upload, if any, is overwritten: the same files, by the same code.
        fs.put(checkpoint.rstrip("/") + "/", checkpoint_url(base, step + 1), recursive=True)
    worker = _worker()
    return {
        "model_id": request["model_id"],
        "partition": partition,
        "epoch": int(request["epoch"]),
        "step": step,
        "metrics": _metrics(answer),
        "records": records,
        "worker": str(worker.name),
        "pid": os.getpid(),
        "seconds": round(time.perf_counter() - started, 4),
    }


def train_sequentially(
    request: dict[str, Any], partition_paths: dict[int, Path], orders: Sequence[Sequence[int]]
) -> str:
    """Train one model in this process over ``orders`` (per epoch, the partitions in order).

    Args:
        request: as for :func:`run_sub_epoch`, without the hop's and store's fields.
        partition_paths: each partition's local file (:func:`fetch_partition`).
        orders: per epoch, the partitions in the order the model visits them.

    Returns:
        The folder that holds the final checkpoint (the caller removes it).
    """
    checkpoint = tempfile.mkdtemp(prefix="ultron-sequential-")
    for order in orders:
        for partition in order:  # a new instance each time, as each hop has its own
            _train(request, _model(request), partition_paths[partition], checkpoint)
    return checkpoint
