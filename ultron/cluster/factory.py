"""The cluster factory: where trials run, from the spec's ``cluster:`` section.

- ``local`` (the default): a Dask ``LocalCluster`` of ``parallelism`` single-threaded worker
  processes, so at most ``parallelism`` trials run at once (but no more workers than
  ``num_iterations`` trials, nor than four per core: the rest would only wait); with GPUs per
  trial, each worker is pinned to its GPUs (:mod:`ultron.cluster.gpus`). Its dashboard
  listens on ``cluster.dashboard_address`` (loopback by default).
- ``address``: a Dask scheduler that already runs; the job only connects to it.
- ``kubernetes``: a ``KubeCluster`` of the Dask operator (:mod:`ultron.cluster.kubernetes`).
- ``slurm``: workers as SLURM jobs (:mod:`ultron.cluster.slurm`).

``ULTRON_DASK_ADDRESS``, when set, overrides the section: the job connects to that scheduler.
On every backend a trial whose worker is lost fails at once (Dask's ``allowed-failures`` is 0,
on a running scheduler too) and the dispatcher retries it from its checkpoint, instead of Dask
rerunning it from scratch.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from typing import Any

from ultron.cluster import forkserver
from ultron.cluster.gpus import local_gpu_cluster
from ultron.errors import ConfigIssue, SpecError
from ultron.settings import settings
from ultron.spec.cluster import AddressCluster, dashboard_address
from ultron.spec.job import JobSpec

__all__ = [
    "QUIET_DASK",
    "ClusterHandle",
    "check_scheduler",
    "start_cluster",
    "stop_warm_workers",
    "trial_resources",
    "warm_local_workers",
]

logger = logging.getLogger(__name__)

# Seconds to reach a scheduler that should already run: a wrong address fails in seconds.
_CONNECT_TIMEOUT_S = 15
# Local worker processes per core at most: trials that wait on I/O or sleep may share a core,
# more only queue and cost each a Python process's memory and start time.
LOCAL_WORKERS_PER_CORE = 4

QUIET_DASK = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "2s",
}
"""Dask's own monitoring, turned down for a local cluster of trial workers. By default each
worker samples its task's stack every 10 ms, ticks its event loop every 20 ms and reads its
system metrics every 500 ms, and so does the scheduler in the job's process: 16 idle workers
spent 0.26-0.31 CPU seconds a second on it (0.04 with these), taken from the trials' own hops
on a machine of few cores (benchmarks/RESULTS.md, the overhead section). A trial runs in its
trial process, so the profiler saw only ``run_trial`` waiting on it; a loop blocked for 3 s is
still reported, and the dashboard's system graphs move every 2 s."""


@dataclass
class ClusterHandle:
    """A Dask client and, when we started it, the cluster behind it."""

    client: Any
    cluster: Any | None
    resources: dict[str, float]
    dashboard_address: str | None = None  # where our cluster's dashboard was told to listen

    @property
    def dashboard_link(self) -> str | None:
        """The dashboard's URL; Dask's, with the host the dashboard was told to listen on
        when that is one address (Dask writes the scheduler's host)."""
        link = getattr(self.client, "dashboard_link", None)
        host = _dashboard_host(self.dashboard_address)
        if not link or host is None:
            return link
        from urllib.parse import urlsplit

        parts = urlsplit(link)
        return parts._replace(netloc=f"{host}:{parts.port}").geturl()

    def close(self) -> None:
        """Close the client, and the cluster if it is ours."""
        # Each is closed even if the other failed; a failure is logged with its traceback.
        try:
            self.client.close()
        except Exception:
            logger.warning("closing the Dask client failed", exc_info=True)
        if self.cluster is not None:
            try:
                self.cluster.close()
            except Exception:
                logger.warning("closing the Dask cluster failed", exc_info=True)


def _dashboard_host(address: str | None) -> str | None:
    """The host in ``address`` (HOST:PORT) when the dashboard listens on that one address
    (Dask's link names the scheduler's host, which may be another); None for every interface,
    where the scheduler's host reaches it too."""
    if address is None:
        return None
    host = address.rpartition(":")[0]
    return None if host in ("", "0.0.0.0", "[::]") else host


def local_worker_count(spec: JobSpec, *, cores: int | None = None) -> int:
    """Worker processes of the local cluster: ``parallelism``, but no more than the job's
    ``num_iterations`` trials nor what the usable cores hold: :data:`LOCAL_WORKERS_PER_CORE`
    per core, or as many trials as fit at their ``resources.cpu`` where that is more (trials
    that declare 0.1 of a core, ten to a core).

    Example (on a machine of 2 usable cores, ``cores=2``):
        >>> from ultron.spec.job import JobSpec
        >>> job = dict(code=".", model="m:M", search_space={"x": [1]}, parallelism=16)
        >>> local_worker_count(JobSpec(**job, num_iterations=64), cores=2)
        8
        >>> local_worker_count(JobSpec(**job, num_iterations=64, resources={"cpu": 0.1}), cores=2)
        16
    """
    if cores is None:
        usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        cores = len(usable) if usable is not None else (os.cpu_count() or 1)
    fit = math.floor(cores / spec.resources.cpu + 1e-9)
    most = max(LOCAL_WORKERS_PER_CORE * cores, fit)
    return max(1, min(spec.parallelism, spec.num_iterations, most))


def _memory_limit(memory: str | None) -> int:
    """Bytes of a Kubernetes quantity (``512Mi``, ``4Gi``, ``1G``); 0, no limit, for None."""
    from dask.utils import parse_bytes  # understands Ki, Mi, Gi, Ti, k, M, G, T as they are

    return 0 if memory is None else parse_bytes(memory)


def start_cluster(spec: JobSpec, job_id: str = "ultron") -> ClusterHandle:
    """Connect to ``ULTRON_DASK_ADDRESS``, or start (or reach) the cluster of ``spec.cluster``.

    Args:
        spec: the job's spec; ``cluster`` picks the backend, ``resources`` sizes the workers.
        job_id: names the job's cluster where the backend makes one (Kubernetes).

    Raises:
        SpecError: the scheduler of ``cluster.address`` does not answer, or the kubernetes
            backend has no image.
        UltronError: the backend's optional dependency is not installed (the error names it).
    """
    import dask

    dask.config.set({"distributed.scheduler.allowed-failures": 0})
    resources = trial_resources(spec)
    address = settings().dask_address
    if address:
        logger.info("using the Dask scheduler at %s (ULTRON_DASK_ADDRESS)", address)
        return ClusterHandle(_running(address, "ULTRON_DASK_ADDRESS"), None, resources)
    kind = spec.cluster.type
    if isinstance(spec.cluster, AddressCluster):
        logger.info("using the Dask scheduler at %s (cluster.address)", spec.cluster.address)
        return ClusterHandle(_running(spec.cluster.address, "cluster.address"), None, resources)
    if kind == "kubernetes":
        from ultron.cluster.kubernetes import kube_cluster

        cluster = kube_cluster(spec, job_id)
    elif kind == "slurm":
        from ultron.cluster.slurm import slurm_cluster  # lazy: dask-jobqueue is the slurm extra

        cluster = slurm_cluster(spec)
    else:
        cluster = _local_cluster(spec)
    return _client_of(cluster, resources, dashboard_address(spec.cluster))


def trial_resources(spec: JobSpec) -> dict[str, float]:
    """The Dask resources each of ``spec``'s trials asks for: ``{"GPU": gpu}``, or none."""
    return {"GPU": spec.resources.gpu} if spec.resources.gpu else {}


def warm_local_workers(spec: JobSpec) -> None:
    """When ``spec``'s trials run on the local cluster, start the forkserver its workers fork
    from (:mod:`ultron.cluster.forkserver`; not with ``ULTRON_SPAWN_WORKERS=1``). The local
    cluster's start calls it: a job whose every trial the score cache answers starts no
    forkserver and imports no ``distributed``."""
    here = settings()
    if spec.cluster.type == "local" and not here.dask_address and not here.spawn_workers:
        forkserver.start()


def stop_warm_workers() -> None:
    """As a job ends: stop the forkserver :func:`warm_local_workers` started, if any."""
    forkserver.stop()


def _client_of(cluster: Any, resources: dict[str, float], dashboard: str | None) -> ClusterHandle:
    """A client of a cluster we started; the cluster is closed if no client can be made."""
    from distributed import Client

    try:
        client = Client(cluster)
    except BaseException:
        cluster.close()
        raise
    return ClusterHandle(client, cluster, resources, dashboard)


def _local_cluster(spec: JobSpec) -> Any:
    if spec.execution.hopper:  # worker k holds partition k (ultron.cluster.partitions)
        from ultron.cluster.partitions import local_partition_cluster

        return local_partition_cluster(
            spec.parallelism,
            model_threads=spec.resources.threads,
            dashboard_address=dashboard_address(spec.cluster),
        )
    # The job's first trial the cache cannot answer: the forkserver starts now, and imports
    # what the workers need while this process imports distributed for the scheduler.
    warm_local_workers(spec)
    import dask
    from distributed import LocalCluster

    memory_limit = _memory_limit(spec.resources.memory)
    with forkserver.worker_start_method(), dask.config.set(QUIET_DASK):
        if spec.resources.gpu:
            return local_gpu_cluster(spec, memory_limit)
        return LocalCluster(
            n_workers=local_worker_count(spec),
            threads_per_worker=1,
            processes=True,
            memory_limit=memory_limit,
            dashboard_address=dashboard_address(spec.cluster),
            silence_logs=logging.WARNING,
        )


def _tell_fail_fast(client: Any) -> None:
    """Set ``allowed-failures`` to 0 on a scheduler we did not start (our own read it from the
    config, or, in a pod, from the environment): a task whose worker dies then fails at once
    (KilledWorker), and ultron retries the trial from its checkpoint instead of Dask rerunning
    it from scratch. A scheduler shared by several jobs is told too: every ultron job wants so.
    """

    def fail_fast(dask_scheduler: Any) -> None:
        dask_scheduler.allowed_failures = 0

    # Nested, so that it travels by value: the scheduler need not have ultron installed.
    client.run_on_scheduler(fail_fast)


def _connect(address: str, field: str) -> Any:
    """A client of the running scheduler at ``address``; a clear error if none answers."""
    from distributed import Client

    try:
        client = Client(address, timeout=_CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        where = "the environment" if field.isupper() else "job spec"
        issue = ConfigIssue(
            field,
            address,
            f"a Dask scheduler must answer there within {_CONNECT_TIMEOUT_S} s, but "
            f"{type(exc).__name__}: {str(exc)[:200]}",
            "start the scheduler (`dask scheduler` prints its address) or correct the address",
        )
        raise SpecError([issue], where) from None
    return client


def _running(address: str, field: str) -> Any:
    """A client of the running scheduler at ``address``, told to fail a lost worker's task."""
    client = _connect(address, field)
    try:
        _tell_fail_fast(client)
    except Exception as exc:  # a scheduler that refuses run_on_scheduler still runs trials
        logger.warning("could not set allowed-failures=0 on the scheduler at %s: %s", address, exc)
    return client


def check_scheduler(spec: JobSpec) -> None:
    """Before a job starts: the scheduler it is to use (``ULTRON_DASK_ADDRESS`` or
    ``cluster.address``) answers; a ``slurm`` job can submit its worker jobs (dask-jobqueue
    and ``sbatch`` are here).

    Raises:
        SpecError: naming the field, the address, why it failed and the fix.
    """
    address = settings().dask_address
    field = "ULTRON_DASK_ADDRESS"
    if not address and isinstance(spec.cluster, AddressCluster):
        address, field = spec.cluster.address, "cluster.address"
    if address:
        _connect(address, field).close()
    elif spec.cluster.type == "slurm":
        from ultron.cluster.slurm import check_slurm  # lazy: dask-jobqueue is the slurm extra

        check_slurm(spec)
