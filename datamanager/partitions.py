"""A data set split once into fixed partitions, one per worker, for model hopper parallelism.

The data set is a folder of ``.npz`` shards in the object store (any fsspec URL). The plan
(:func:`plan_partitions`) deals the shards out to the partitions in a seeded random order,
from their names alone: nothing is read to plan. Each worker then fetches only its own
partition's shards (:func:`fetch_partition`), once, onto its local disk, and shuffles the
partition's records once with a generator seeded by the job seed and the partition number.
The records' order is thus fixed for the whole job, as in Cerebro (the data shuffled once, the
partitions fixed), so one model's sequential run over the same partitions in the same order
sees exactly the same records in the same order.

Every fetch is written first to a read log (JSON lines: the worker, its process, the partition,
the file and its size), so a job can show that no worker read another's partition.

Example:
    >>> plan = plan_partitions([f"s{i}.npz" for i in range(4)], partitions=2, seed=0)
    >>> sorted(len(files) for files in plan.shards)
    [2, 2]
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "PartitionPlan",
    "PartitionStream",
    "fetch_partition",
    "list_shards",
    "load_partition",
    "plan_partitions",
    "resource_name",
]

_LOCAL_FILE = "partition.npz"


def resource_name(partition: int) -> str:
    """The Dask worker resource that says a worker holds ``partition`` (``partition-0``, ...)."""
    return f"partition-{partition}"


@dataclass(frozen=True)
class PartitionPlan:
    """Which shards make up each partition; the same for every worker of a job.

    Attributes:
        url: the data set's folder (fsspec URL).
        shards: per partition, its shards' paths relative to ``url``.
        seed: the job seed; it fixed the deal and shuffles each partition's records.
    """

    url: str
    shards: tuple[tuple[str, ...], ...]
    seed: int

    @property
    def partitions(self) -> int:
        """How many partitions."""
        return len(self.shards)

    def to_dict(self) -> dict[str, Any]:
        """As JSON-compatible data (it travels in each sub-epoch's request)."""
        return {"url": self.url, "shards": [list(s) for s in self.shards], "seed": self.seed}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PartitionPlan:
        """The plan :meth:`to_dict` wrote."""
        return cls(data["url"], tuple(tuple(s) for s in data["shards"]), int(data["seed"]))


def list_shards(url: str, storage_options: dict[str, Any] | None = None) -> list[str]:
    """The ``.npz`` shards under ``url``, relative to it and sorted (a listing; no reads).

    Raises:
        ValueError: ``url`` holds no ``.npz`` file.
    """
    import fsspec

    fs, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
    root = root.rstrip("/")
    files = sorted(f[len(root) + 1 :] for f in fs.find(root) if f.endswith(".npz"))
    if not files:
        raise ValueError(
            f"data url {url!r} holds no .npz shard; a hopper job's data set must be a folder "
            "of .npz shards (one or more per worker). Fix: write the data set as shards there"
        )
    return files


def plan_partitions(
    shards: Sequence[str], *, partitions: int, seed: int, url: str = ""
) -> PartitionPlan:
    """Deal ``shards`` to ``partitions`` parts in a seeded random order (round robin).

    Raises:
        ValueError: fewer shards than partitions (a worker would hold nothing).
    """
    if partitions < 1:
        raise ValueError(f"partitions is {partitions}; it must be at least 1")
    if len(shards) < partitions:
        raise ValueError(
            f"the data set has {len(shards)} shards for {partitions} partitions; each "
            "partition needs at least one shard. Fix: write the data set as at least "
            f"{partitions} shards, or use fewer workers"
        )
    order = np.random.default_rng(seed).permutation(len(shards))
    dealt = tuple(
        tuple(sorted(shards[int(i)] for i in order[k::partitions])) for k in range(partitions)
    )
    return PartitionPlan(url, dealt, seed)


def _shuffled(arrays: dict[str, np.ndarray], seed: int, partition: int) -> dict[str, np.ndarray]:
    lengths = {len(a) for a in arrays.values()}
    if len(lengths) != 1:
        raise ValueError(f"the shards' columns differ in length ({sorted(lengths)} records)")
    order = np.random.default_rng([seed, partition]).permutation(lengths.pop())
    return {name: column[order] for name, column in arrays.items()}


def fetch_partition(
    plan: PartitionPlan,
    partition: int,
    local_dir: str | Path,
    *,
    storage_options: dict[str, Any] | None = None,
    read_log: str | Path | None = None,
    reader: str = "",
) -> Path:
    """Read ``partition``'s shards from the store, shuffle its records once, keep them locally.

    Args:
        plan: the job's partition plan.
        partition: which partition.
        local_dir: the worker's folder for it; the partition lands in ``partition.npz`` there.
        storage_options: fsspec options of the store.
        read_log: a JSON-lines file each read is appended to before it happens.
        reader: who reads (the worker's name), for the read log.

    Returns:
        The local file.
    """
    import fsspec

    fs, root = fsspec.core.url_to_fs(plan.url, **(storage_options or {}))
    columns: dict[str, list[np.ndarray]] = {}
    for shard in plan.shards[partition]:
        path = f"{root.rstrip('/')}/{shard}"
        if read_log is not None:
            entry = {"reader": reader, "pid": os.getpid(), "partition": partition, "file": shard}
            with open(read_log, "a") as log:  # O_APPEND: one whole line per write
                log.write(json.dumps({**entry, "bytes": fs.size(path)}) + "\n")
        with np.load(io.BytesIO(fs.cat_file(path))) as shard_data:
            for name in shard_data.files:
                columns.setdefault(name, []).append(shard_data[name])
    arrays = _shuffled({n: np.concatenate(c) for n, c in columns.items()}, plan.seed, partition)
    folder = Path(local_dir)
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{_LOCAL_FILE}.{os.getpid()}"
    with partial.open("wb") as out:
        np.savez(out, **arrays)  # type: ignore[arg-type]
    partial.replace(folder / _LOCAL_FILE)  # whole or absent: a killed fetch leaves no half
    return folder / _LOCAL_FILE


def load_partition(path: str | Path) -> dict[str, np.ndarray]:
    """A fetched partition's columns, in its fixed record order."""
    with np.load(path) as data:
        return {name: data[name] for name in data.files}


class PartitionStream:
    """One pass over a local partition in batches: what ``ultron.data.batches`` gives a model
    in hopper mode. Iterate it, or use it as a context manager like a ``BatchStream``.

    Args:
        path: the fetched partition (:func:`fetch_partition`).
        batch_size: records per batch (the last batch may be smaller).
        framework: ``numpy`` or ``torch`` (``tf`` gets NumPy arrays, which it takes as they are).
    """

    def __init__(self, path: str | Path, *, batch_size: int, framework: str = "numpy") -> None:
        if batch_size < 1:
            raise ValueError(f"data.batch_size is {batch_size}; it must be at least 1")
        self.arrays = load_partition(path)
        self.batch_size = batch_size
        self.framework = framework
        self.records = len(next(iter(self.arrays.values()))) if self.arrays else 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for start in range(0, self.records, self.batch_size):
            batch = {n: a[start : start + self.batch_size] for n, a in self.arrays.items()}
            if self.framework == "torch":
                import torch

                yield {n: torch.from_numpy(np.ascontiguousarray(a)) for n, a in batch.items()}
            else:
                yield batch

    def __enter__(self) -> PartitionStream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None
