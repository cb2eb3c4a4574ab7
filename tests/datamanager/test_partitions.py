"""Partitioning a data set of shards for hopper mode (:mod:`ultron.datamanager.partitions`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ultron import data
from ultron.datamanager.partitions import (
    PartitionPlan,
    fetch_partition,
    list_shards,
    load_partition,
    plan_partitions,
)


def _shards(folder: Path, count: int = 5, rows: int = 7) -> Path:
    folder.mkdir()
    for i in range(count):
        ids = np.arange(i * rows, (i + 1) * rows)
        np.savez(folder / f"part-{i}.npz", id=ids, x=ids[:, None] * np.ones((1, 2)))
    return folder


def test_the_plan_deals_every_shard_to_exactly_one_partition_by_seed() -> None:
    shards = [f"s{i}.npz" for i in range(7)]
    plan = plan_partitions(shards, partitions=3, seed=5)
    dealt = [s for part in plan.shards for s in part]
    assert sorted(dealt) == sorted(shards)
    assert sorted(len(p) for p in plan.shards) == [2, 2, 3]
    assert plan == plan_partitions(shards, partitions=3, seed=5)
    assert PartitionPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan


def test_fewer_shards_than_partitions_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"2 shards for 3 partitions.*at least 3 shards"):
        plan_partitions(["a.npz", "b.npz"], partitions=3, seed=0)


def test_a_worker_reads_only_its_partition_and_logs_each_read(tmp_path: Path) -> None:
    folder = _shards(tmp_path / "data")
    plan = plan_partitions(list_shards(str(folder)), partitions=2, seed=1, url=str(folder))
    log = tmp_path / "reads.jsonl"
    path = fetch_partition(plan, 1, tmp_path / "local", read_log=log, reader="w1")
    reads = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(r["file"] for r in reads) == sorted(plan.shards[1])
    assert {r["reader"] for r in reads} == {"w1"} and all(r["bytes"] > 0 for r in reads)
    arrays = load_partition(path)
    expected = np.concatenate([np.load(folder / s)["id"] for s in plan.shards[1]])
    assert sorted(arrays["id"]) == sorted(expected)  # all its records, shuffled once
    again = fetch_partition(plan, 1, tmp_path / "again")
    assert np.array_equal(load_partition(again)["id"], arrays["id"])  # the same fixed order


def test_ultron_data_gives_the_partition_in_batches(tmp_path: Path) -> None:
    folder = _shards(tmp_path / "data", count=2)
    plan = plan_partitions(list_shards(str(folder)), partitions=1, seed=0, url=str(folder))
    path = fetch_partition(plan, 0, tmp_path / "local")
    data.set_service({"partition_path": str(path), "batch_size": 4})
    try:
        with data.batches(framework="numpy") as stream:
            sizes = [len(batch["id"]) for batch in stream]
    finally:
        data.set_service(None)
    assert sizes == [4, 4, 4, 2]


def test_an_empty_folder_names_what_a_hopper_data_set_needs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"holds no \.npz shard"):
        list_shards(str(tmp_path))
