"""What every hopper job test checks of a finished job's records and read log (local, address
and SLURM clusters alike)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any


def partition_orders(
    records: Sequence[dict[str, Any]], models: Sequence[str], partitions: int, epochs: int
) -> dict[str, list[list[int]]]:
    """Each model's partitions in the order it visited them, one list per epoch, after checking
    that every model trained ``epochs`` epochs, its steps in order, visiting every partition
    exactly once per epoch."""
    assert Counter(r["model_id"] for r in records) == {m: partitions * epochs for m in models}
    orders: dict[str, list[list[int]]] = {}
    for model in models:
        mine = sorted((r for r in records if r["model_id"] == model), key=lambda r: r["step"])
        assert [r["step"] for r in mine] == list(range(partitions * epochs))
        orders[model] = [[r["partition"] for r in mine if r["epoch"] == e] for e in range(epochs)]
        assert [sorted(epoch) for epoch in orders[model]] == [list(range(partitions))] * epochs
    return orders


def partitions_by_process(log: Sequence[Mapping[str, Any]]) -> dict[int, set[int]]:
    """The partitions each worker process read, from the read log, after checking that no
    process read more than one partition."""
    by_process: dict[int, set[int]] = {}
    for entry in log:
        by_process.setdefault(entry["pid"], set()).add(entry["partition"])
    assert all(len(parts) == 1 for parts in by_process.values()), by_process
    return by_process
