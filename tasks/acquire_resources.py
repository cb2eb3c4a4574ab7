"""Task 2 of a job: take units from the shared resource limiter; hand out the job's workers,
which start at the first trial the score cache cannot answer (:mod:`ultron.cluster.lazy`), or
at once where the job knows it needs them (:func:`lazy_cluster`).

The paper's Fig. 7, made atomic: the limiter's Lua script checks and increments in one step,
the units are a lease that a keeper thread renews while the job lives (so a dead job's units
come back after the TTL), and if the workers cannot be started the job fails and ``finalize``
gives the units back (a data service that cannot start gives them back here). The
limits are the platform team's, read from Redis when the job starts waiting: the global one
and that of the job's tenant (``ultron limits``). Waiting jobs are served first come first
served within a tenant and in turns across tenants (:mod:`ultron.limiter.resource_limiter`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from ultron.cluster.factory import ClusterHandle, start_cluster, trial_resources
from ultron.cluster.lazy import LazyCluster
from ultron.containerize.environment import TrialEnvironment
from ultron.containerize.image import with_image, worker_paths
from ultron.datamanager import DataServiceHandle, start_data_service
from ultron.limiter.elastic import fit_parallelism
from ultron.limiter.lease_keeper import LeaseKeeper
from ultron.limiter.leases import Lease
from ultron.limiter.limits import read_max_units, read_tenant_max_units
from ultron.limiter.resource_limiter import ResourceLimiter
from ultron.master.cancel import CANCEL
from ultron.master.job_state import JobStatus, JobStore
from ultron.master.score_cache import ScoreCache, job_score_cache
from ultron.paths import scratch_dir, ultron_home
from ultron.redis.client import connect
from ultron.redis.keys import tenant_namespace
from ultron.settings import settings
from ultron.spec.job import JobSpec
from ultron.worker.checkpoints import flush_checkpoints
from ultron.worker.pool import shutdown_processes
from ultron.worker.runner import warm_up_worker

__all__ = ["JobResources", "acquire_resources", "lazy_cluster", "lease_ttl_s", "start_workers"]

logger = logging.getLogger(__name__)


def lease_ttl_s() -> float:
    """Seconds a job's lease outlives its last renewal (``ULTRON_LEASE_TTL``, default 30)."""
    return settings().lease_ttl


def default_max_units() -> int:
    """The limit when Redis has none set (``ULTRON_MAX_UNITS``, default 64)."""
    return settings().max_units


@dataclass
class JobResources:
    """What a running job holds: its lease, the thread renewing it, and its Dask cluster
    (started at its first use).

    Not plain data, on purpose: search_loop submits trials through this Dask client, and
    finalize must release these very objects (the lease is renewed by a thread; the cluster
    and the data service are processes this job started). The flow also hands search_loop
    the strategy and the stopper it built once; everything else tasks pass on is plain data.
    """

    limiter: ResourceLimiter
    lease: Lease
    keeper: LeaseKeeper
    cluster: LazyCluster
    data: DataServiceHandle | None = None
    # Trials the lease holds units for: ``parallelism``, or fewer with ``min_parallelism``.
    parallelism: int = 1

    def release(self) -> list[dict[str, str]]:
        """Stop the trial processes, the cluster and the data service; give the units back.

        Every worker first commits its trials' checkpoints to the store
        (``ULTRON_CHECKPOINT_FLUSH_S`` at most).

        Returns:
            The checkpoints that did not reach the store, one entry each (``trial_id``,
            ``checkpoint``, ``local_path``, ``store_url``, ``error``; see
            :func:`~ultron.worker.checkpoints.flush_checkpoints`), for the job's summary.
        """
        running = self.cluster.settled()  # None: no trial needed one, nothing was started
        missing = self._flush_checkpoints(running) if running is not None else []
        try:
            if running is not None:
                running.client.run(shutdown_processes)
        except Exception:  # a worker already gone: closing the cluster below ends its processes
            logger.warning(
                "stopping the trial processes failed; closing the cluster anyway", exc_info=True
            )
        self.cluster.close()
        if self.data is not None:
            self.data.stop()
        self.keeper.stop()
        self.limiter.release(self.keeper.lease)  # as the job last resized it
        return missing

    def _flush_checkpoints(self, running: ClusterHandle) -> list[dict[str, str]]:
        timeout_s = settings().checkpoint_flush_s
        try:
            per_worker = running.client.run(flush_checkpoints, timeout_s=timeout_s)
        except Exception as exc:  # e.g. a worker died: what it held cannot be listed
            logger.warning("flushing the workers' checkpoints failed", exc_info=True)
            return [_unlisted(f"flushing the workers' checkpoints failed: {exc!r}")]
        missing = [entry for entries in per_worker.values() for entry in entries]
        for entry in missing:
            logger.warning(
                "checkpoint %s of trial %s is not in the store (%s): %s",
                entry["checkpoint"],
                entry["trial_id"],
                entry["store_url"],
                entry["error"],
            )
        return missing


def _unlisted(error: str) -> dict[str, str]:
    """The entry for checkpoints that may be missing but could not be listed."""
    unknown = "(unknown)"
    return {
        "trial_id": unknown,
        "checkpoint": unknown,
        "local_path": unknown,
        "store_url": unknown,
        "error": error,
    }


@task(name="acquire-resources", task_run_name="acquire-resources-{job_id}", cache_policy=NONE)
def acquire_resources(
    spec: JobSpec, job_id: str, redis_url: str, env: TrialEnvironment
) -> JobResources:
    """Wait in the limiter's queue (with delayed retries, up to ``acquire_timeout``) for the
    job's units; its Dask workers, with a warm trial process on each, start at the first
    trial the score cache cannot answer (:class:`~ultron.cluster.lazy.LazyCluster`), or at
    once, in the background, where that trial is known to come (:func:`lazy_cluster`)."""
    logger = get_run_logger()
    client = connect(redis_url)
    limiter = ResourceLimiter(
        client,
        max_units=read_max_units(client, default=default_max_units()),
        tenant=spec.tenant,
        tenant_max_units=read_tenant_max_units(client, spec.tenant),
    )
    least = spec.min_parallelism or spec.parallelism
    lease = limiter.acquire_blocking(
        job_id,
        spec.resources.units_for(least),
        ttl_s=lease_ttl_s(),
        timeout_s=spec.acquire_timeout,
        check=lambda: CANCEL.raise_if_requested(job_id),
    )
    keeper = LeaseKeeper(limiter, lease).start()
    store = JobStore(client, job_id, namespace=tenant_namespace(spec.tenant))
    store.set_status(JobStatus.RUNNING)  # queued no more: it holds units
    try:
        # min_parallelism: what is free up to parallelism now; the master grows it later.
        keeper.lease, parallelism = fit_parallelism(
            limiter, lease, units_for=spec.resources.units_for, have=least, most=spec.parallelism
        )
        logger.info(
            "holding %s units for %d of %d trials at once (%s in use of %d)",
            keeper.lease.units, parallelism, spec.parallelism, limiter.in_use(),
            limiter.max_units,
        )  # fmt: skip
        data = None
        if spec.data is not None and not spec.execution.hopper:  # hopper: partitions instead
            data = start_data_service(
                spec.data,
                job_id=job_id,
                seed=spec.seed,
                base_dir=spec.code_path.parent,
                work_dir=scratch_dir(job_id) / "data",
                cache_dir=ultron_home() / "data-cache",
            )
            logger.info("data service at %s", data.dispatcher_address)
    except BaseException:
        keeper.stop()
        limiter.release(keeper.lease)
        raise
    start = functools.partial(start_workers, spec, job_id, env, logger, redis_url=redis_url)
    fingerprint = data.fingerprint() if data is not None else None
    cache = job_score_cache(
        spec, client, code_hash=env.code_hash, namespace=store.namespace, data_hash=fingerprint
    )
    cluster = lazy_cluster(spec, start, parallelism, cache=cache)
    return JobResources(limiter, keeper.lease, keeper, cluster, data, parallelism)


def lazy_cluster(
    spec: JobSpec,
    start: Callable[[int], ClusterHandle],
    parallelism: int,
    *,
    cache: ScoreCache | None = None,
) -> LazyCluster:
    """The job's cluster, started by ``start`` at the first trial the score cache cannot
    answer. It starts now, in the background, where the job knows already that it needs it:
    a GPU job's (its trial processes start CUDA meanwhile), and a job whose score ``cache``
    holds nothing for its computation (code base, data, model, seed: a first run of new code),
    whose first trial trains whatever the strategy proposes. A job whose cache holds entries
    learns it at its first proposal, and a cached job starts nothing."""
    cluster = LazyCluster(start, parallelism=parallelism, resources=trial_resources(spec))
    empty = cache is not None and not spec.execution.hopper and len(cache) == 0
    if spec.resources.gpu or empty:
        # The workers and their trial processes start (a GPU job's import the model and
        # start CUDA, tens of seconds on a fresh machine) while the master restores its
        # state and makes its first proposals.
        cluster.start_soon()
    return cluster


def start_workers(
    spec: JobSpec,
    job_id: str,
    env: TrialEnvironment,
    logger: Any,
    parallelism: int,
    *,
    redis_url: str,
) -> ClusterHandle:
    """Start the job's Dask workers for ``parallelism`` trials at once, a warm trial process
    on each (CUDA started in it for a GPU job), and each worker's client of ``redis_url``;
    what started is closed on failure."""
    from dask.utils import parse_bytes  # Dask only once a trial needs it: not in a cached job

    # Kubernetes: the workers run the image containerize pushed, with the code inside it.
    started = spec.model_copy(update={"parallelism": parallelism})
    cluster = start_cluster(with_image(started, env), job_id)
    try:
        log_dir = str(scratch_dir(job_id) / "logs")
        memory = parse_bytes(spec.resources.memory) if spec.resources.memory else None
        python, code_paths = worker_paths(env)
        if spec.execution.hopper:  # its sub-epochs run in the Dask workers themselves
            return cluster
        cluster.client.run(
            warm_up_worker,
            redis_url,
            python,
            code_paths,
            spec.model,
            log_dir,
            memory_limit=memory,  # the trials' own limit, or they would not use these processes
            gpu_memory_fraction=spec.resources.gpu_memory_fraction,
            cuda=bool(spec.resources.gpu),
            threads=spec.resources.threads,
        )
    except BaseException:
        cluster.close()
        raise
    logger.info("%s cluster up; Dask dashboard: %s", spec.cluster.type, cluster.dashboard_link)
    return cluster
