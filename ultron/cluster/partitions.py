"""Dask workers that hold the partitions of a hopper job (model hopper parallelism).

Worker ``k`` carries the resource ``partition-<k>: 1``; a sub-epoch on partition ``k`` asks for
it, so it runs only there (:mod:`ultron.master.hopper`). On a running cluster (workers started
by hand, as SLURM jobs or as Kubernetes worker groups, one per partition) the workers get the
resource on their command line (:func:`worker_args`): the job's own ``slurm`` cluster submits
one worker job per partition with them (:mod:`ultron.cluster.slurm`), its ``kubernetes``
cluster makes one worker group per partition (:mod:`ultron.cluster.kubernetes`), and on one
machine :func:`local_partition_cluster` starts them.

Example:
    >>> worker_args(2)
    ['--resources', 'partition-2=1']
    >>> worker_args(0, {"GPU": 2})
    ['--resources', 'GPU=2,partition-0=1']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ultron.datamanager.partitions import resource_name
from ultron.spec.sections import THREAD_VARIABLES

__all__ = ["local_partition_cluster", "worker_args"]


def worker_args(partition: int, others: Mapping[str, float] | None = None) -> list[str]:
    """The ``dask worker`` arguments that make a worker the holder of ``partition``, with the
    worker's ``others`` resources (its GPUs) beside it: one ``--resources`` value, comma
    separated, since a batch script's command line splits on spaces."""
    pairs = {**(others or {}), resource_name(partition): 1}
    return ["--resources", ",".join(f"{name}={amount:g}" for name, amount in pairs.items())]


def local_partition_cluster(
    partitions: int,
    *,
    processes: bool = True,
    threads: int = 1,
    model_threads: int = 1,
    **scheduler_options: Any,
) -> Any:
    """A ``SpecCluster`` on this machine with one worker per partition, worker ``k`` holding
    ``partition-<k>``; ``processes``: each worker a process under a nanny (which restarts it
    if it dies), else threads of this process.

    The models train in these workers' processes, so each gets a trial's settings
    (:mod:`ultron.worker.threads`), not Dask's for its workers: ``model_threads`` threads for
    OpenMP, MKL and OpenBLAS, and glibc's default trim threshold.

    Raises:
        ValueError: ``partitions`` is below 1.
    """
    import dask
    from distributed import Nanny, Scheduler, SpecCluster, Worker

    if partitions < 1:
        raise ValueError(f"partitions is {partitions}; it must be at least 1")
    cls = Nanny if processes else Worker
    workers = {
        f"partition-worker-{k}": {
            "cls": cls,
            "options": {"nthreads": threads, "resources": {resource_name(k): 1}},
        }
        for k in range(partitions)
    }
    options = {"dashboard_address": ":0", **scheduler_options}
    # Read by the nannies, made now, and set before each worker's process starts (a value set
    # in this process's environment stays: Dask's rule); None leaves the variable unset.
    environ = "distributed.nanny.pre-spawn-environ"
    settings: dict[str, str | None] = {f"{environ}.MALLOC_TRIM_THRESHOLD_": None}
    settings.update({f"{environ}.{name}": str(model_threads) for name in THREAD_VARIABLES})
    with dask.config.set(settings):
        return SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": options})
