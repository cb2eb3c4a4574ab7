"""Model hopper parallelism (MOP) against task parallelism with the data replicated to every worker.

``python -m benchmarks.hopper [--configs 8] [--workers 4] [--epochs 3] [--shards 16]
[--rows 4000] [--features 64] [--passes 4]``

The same ``--configs`` logistic regressions (``benchmarks/hopper_model``; learning rates
spread over two decades) train ``--epochs`` epochs on a data set of ``--shards`` ``.npz``
shards in a store (a local folder read through fsspec) on a cluster of ``--workers`` Dask
worker processes, so the data set is ``--workers`` times one worker's share:

- **MOP**: :class:`ultron.master.hopper.HopperRunner`: each worker fetches its partition once;
  every sub-epoch is a Dask task on the worker holding its partition, and the checkpoint hops.
- **task parallelism, replicated**: one Dask task per configuration trains all its epochs on
  one worker, which first fetches the whole data set (every partition) once. Each
  configuration visits the partitions in the order its MOP run did, so both methods train on
  the same records in the same order.

Then one process trains each configuration sequentially over the same order
(:func:`ultron.worker.hopper.train_sequentially`). Printed: bytes read from the store (from
the per-worker read logs), wall time, and each configuration's accuracy on a held-out set with
the three methods' weights, and whether the weights are bitwise equal.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from ultron.cluster.partitions import local_partition_cluster
from ultron.datamanager.partitions import (
    PartitionPlan,
    fetch_partition,
    list_shards,
    plan_partitions,
)
from ultron.master.hopper import HopperJob, HopperRunner
from ultron.worker.hopper import train_sequentially

MODEL_CODE = Path(__file__).parent / "hopper_model"
_REPLICAS: dict[str, dict[int, Path]] = {}  # in a worker: the job's partitions, fetched once


def make_data(
    folder: Path, *, shards: int, rows: int, features: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Write a separable-with-noise classification data set as shards; returns a test set."""
    rng = np.random.default_rng(seed)
    truth = rng.normal(size=features)

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        x = rng.normal(size=(n, features))
        return x, ((x @ truth + rng.normal(0, 2.0, n)) > 0).astype(np.float64)

    folder.mkdir(parents=True)
    for i in range(shards):
        x, y = draw(rows)
        np.savez(folder / f"shard-{i:03d}.npz", x=x, y=y)
    return draw(rows)


def accuracy(weights: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    """The share of ``y`` a logistic regression with ``weights`` gets right."""
    return float(np.mean(((x @ weights[:-1] + weights[-1]) > 0) == (y > 0.5)))


def _bytes(read_log: Path) -> int:
    if not read_log.exists():
        return 0
    return sum(json.loads(line)["bytes"] for line in read_log.read_text().splitlines())


def train_replicated(
    request: dict[str, Any], orders: list[list[int]], read_log: str
) -> list[float]:
    """On a worker: fetch the whole data set (once per worker), train one configuration."""
    from distributed import get_worker

    worker = get_worker()
    key = f"{worker.id}-{request['job_id']}"
    if key not in _REPLICAS:
        plan = PartitionPlan.from_dict(request["plan"])
        folder = Path(worker.local_directory, "replica", request["job_id"])
        _REPLICAS[key] = {
            k: fetch_partition(plan, k, folder / str(k), read_log=read_log, reader=str(worker.name))
            for k in range(plan.partitions)
        }
    folder = train_sequentially(request, _REPLICAS[key], orders)
    weights = np.load(Path(folder) / "weights.npy")
    shutil.rmtree(folder)
    return [float(w) for w in weights]


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Train with both methods and sequentially; returns the figures."""
    from distributed import Client

    # By reference, not by value (as a function of __main__ would be): its fetch cache must
    # live once per worker.
    from benchmarks.hopper import train_replicated as replicate

    test_x, test_y = make_data(
        root / "store" / "data", shards=args.shards, rows=args.rows, features=args.features
    )
    lrs = np.geomspace(0.003, 0.3, args.configs)
    job = HopperJob(
        job_id="bench",
        model="hopper_logistic:Logistic",
        configs={f"c{i}": {"lr": float(lr), "passes": args.passes} for i, lr in enumerate(lrs)},
        data_url=str(root / "store" / "data"),
        storage=str(root / "store" / "job"),
        partitions=args.workers,
        epochs=args.epochs,
        seed=0,
        code_paths=(str(MODEL_CODE),),
        batch_size=64,
        read_log=str(root / "reads-mop.jsonl"),
    )
    plan = plan_partitions(
        list_shards(job.data_url), partitions=args.workers, seed=job.seed, url=job.data_url
    )
    with local_partition_cluster(args.workers) as cluster, Client(cluster) as client:
        started = time.perf_counter()
        result = HopperRunner(client, job).run()
        mop_wall = time.perf_counter() - started
        started = time.perf_counter()
        replicated_log = str(root / "reads-replicated.jsonl")
        futures = {
            m: client.submit(
                replicate, job.request(plan, m), result.orders[m], replicated_log, pure=False
            )
            for m in job.configs
        }
        replicated = {m: np.array(f.result()) for m, f in futures.items()}
        task_wall = time.perf_counter() - started
    local = {k: fetch_partition(plan, k, root / "local" / str(k)) for k in range(args.workers)}
    rows = []
    for model in job.configs:
        hopped = np.load(io.BytesIO(Path(result.checkpoints[model], "weights.npy").read_bytes()))
        folder = train_sequentially(job.request(plan, model), local, result.orders[model])
        sequential = np.load(Path(folder) / "weights.npy")
        rows.append(
            {
                "config": model,
                "lr": job.configs[model]["lr"],
                "mop": accuracy(hopped, test_x, test_y),
                "replicated": accuracy(replicated[model], test_x, test_y),
                "sequential": accuracy(sequential, test_x, test_y),
                "equal": bool(
                    np.array_equal(hopped, sequential)
                    and np.array_equal(replicated[model], sequential)
                ),
            }
        )
    data_bytes = sum(p.stat().st_size for p in (root / "store" / "data").iterdir())
    return {
        "data_bytes": data_bytes,
        "mop": {"bytes": _bytes(Path(job.read_log or "")), "wall": mop_wall},
        "replicated": {"bytes": _bytes(Path(replicated_log)), "wall": task_wall},
        "rows": rows,
    }


def table(figures: dict[str, Any], args: argparse.Namespace) -> str:
    """The figures as Markdown tables."""
    size = figures["data_bytes"]
    lines = [
        f"{args.configs} configurations x {args.epochs} epochs, {args.workers} workers, "
        f"data set {size / 1e6:.1f} MB ({args.shards} shards, {args.workers}x a worker's share)",
        "",
        "| method | bytes read from the store | x data set | wall time |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, label in (("mop", "MOP (hopper)"), ("replicated", "task parallelism, replicated")):
        m = figures[name]
        lines.append(f"| {label} | {m['bytes']:,} | {m['bytes'] / size:.2f} | {m['wall']:.1f} s |")
    lines += [
        "",
        "| config | lr | accuracy MOP | replicated | sequential | weights bitwise equal |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in figures["rows"]:
        lines.append(
            f"| {r['config']} | {r['lr']:.4f} | {r['mop']:.4f} | {r['replicated']:.4f} | "
            f"{r['sequential']:.4f} | {'yes' if r['equal'] else 'NO'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, run, print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=8)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--passes", type=int, default=4)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="ultron-hopper-bench-"))
    try:
        print(table(run(args, root), args))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
