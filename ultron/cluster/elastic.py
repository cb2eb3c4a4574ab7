"""Adds and retires a running job's Dask workers as its parallelism changes (elastic jobs).

Per backend, with the backend's own means:

- ``local``: ``LocalCluster.scale`` (a GPU cluster gets workers pinned like its first ones);
- ``slurm``: dask-jobqueue's ``scale(jobs=n)``: worker jobs submitted, or cancelled as their
  workers retire;
- ``kubernetes``: the adaptive bounds of the ``KubeCluster`` (``adapt``), which then adds and
  removes pods itself;
- ``address`` (a scheduler that runs already, or ``ULTRON_DASK_ADDRESS``): the workers are
  not the job's; it uses those that join, up to ``parallelism`` trials at once.

Only idle workers retire: a worker is picked on the scheduler, in one step, among those that
run no task, and is marked closing there before anything could be handed to it, so a running
trial is never cut short or run twice by a scale-down. A worker that is busy retires once its
trial has ended (the master asks again after each trial).
"""

from __future__ import annotations

import logging
from typing import Any

from ultron.cluster.factory import QUIET_DASK, ClusterHandle, local_worker_count
from ultron.cluster.lazy import LazyCluster
from ultron.errors import UltronError
from ultron.spec.job import JobSpec

__all__ = ["ElasticWorkers"]

logger = logging.getLogger(__name__)

# Seconds a local scale-up waits for its new workers (they start from the forkserver, or spawn).
_LOCAL_START_S = 120


def _claim_idle(prefix: str, count: int, dask_scheduler: Any = None) -> list[Any]:
    """On the scheduler: mark up to ``count`` idle workers closing, and return their names.

    None while a task of the job (its keys start with ``prefix``) waits for a worker: an idle
    worker may be about to get it. Marked in the same step as the check, so no task is handed
    to a claimed worker afterwards.
    """
    from time import time

    from distributed.core import Status

    for key, task in dask_scheduler.tasks.items():
        if str(key).startswith(prefix) and task.state in ("released", "waiting", "queued",
                                                          "no-worker"):  # fmt: skip
            return []
    names: list[Any] = []
    for worker in list(dask_scheduler.workers.values()):
        if len(names) >= count:
            break
        if worker.status == Status.running and not worker.processing:
            dask_scheduler.handle_worker_status_change(
                Status.closing_gracefully, worker, stimulus_id=f"ultron-scale-down-{time()}"
            )
            names.append(worker.name)
    return names


class ElasticWorkers:
    """The workers of one job's cluster, sized to its parallelism.

    Args:
        handle: the job's cluster (:func:`~ultron.cluster.factory.start_cluster`), or the
            :class:`~ultron.cluster.lazy.LazyCluster` that starts it: until it runs, a resize
            only sets how many workers it starts with.
        spec: the job's spec (backend, per-trial resources).
        job_id: the job; its trials' Dask keys start with ``trial-<job_id>-``.
    """

    def __init__(self, handle: ClusterHandle | LazyCluster, spec: JobSpec, job_id: str) -> None:
        self._source = handle
        self.spec = spec
        self.prefix = f"trial-{job_id}-"
        self._adapted: int | None = None  # kubernetes: the parallelism of the last adapt

    @property
    def handle(self) -> ClusterHandle:
        """The running cluster (a lazy one that has not started: one with no workers)."""
        if isinstance(self._source, LazyCluster):
            return self._source.running or ClusterHandle(None, None, self._source.resources)
        return self._source

    @property
    def kind(self) -> str:
        """The backend: ``address`` for a scheduler that is not the job's."""
        return "address" if self.handle.cluster is None else self.spec.cluster.type

    def resize(self, parallelism: int) -> None:
        """Ask for workers for ``parallelism`` trials: start the missing ones, retire the idle
        ones above it (the busy ones retire at a later call, once idle)."""
        if isinstance(self._source, LazyCluster) and not self._source.started:
            self._source.parallelism = parallelism  # it starts with these, when it starts
            return
        if isinstance(self._source, LazyCluster):
            self._source.settled()  # a start in progress: resize what it started
        cluster = self.handle.cluster
        if cluster is None:  # address: the scheduler's workers are not ours to start or stop
            return
        if self.kind == "kubernetes":
            if parallelism == self._adapted:
                return
            from ultron.cluster.kubernetes import adapt_bounds

            resized = self.spec.model_copy(update={"parallelism": parallelism})
            minimum, maximum = adapt_bounds(resized, resized.cluster)  # type: ignore[arg-type]
            cluster.adapt(minimum=minimum, maximum=maximum)
            self._adapted = parallelism
            return
        if self.kind == "local" and not self.spec.resources.gpu:
            # As at the start: no more processes than the trials left could use, or the cores.
            resized = self.spec.model_copy(update={"parallelism": parallelism})
            parallelism = local_worker_count(resized)
        have = len(cluster.worker_spec)
        if parallelism > have:
            self._grow(cluster, parallelism)
        elif parallelism < have:
            self._retire_idle(cluster, have - parallelism)

    def _grow(self, cluster: Any, parallelism: int) -> None:
        if self.kind == "slurm":
            cluster.ultron_target = parallelism  # the replacement of lost jobs keeps this many
            cluster.scale(jobs=parallelism)
            logger.info("scaling to %d SLURM worker jobs", parallelism)
            return
        import dask

        from ultron.cluster import forkserver

        with forkserver.worker_start_method(), dask.config.set(QUIET_DASK):  # as the first ones
            if self.spec.resources.gpu:
                self._grow_gpu(cluster, parallelism)
            else:
                cluster.scale(parallelism)
            logger.info("scaling to %d local workers", parallelism)
            try:  # started inside the block: from the forkserver when it runs
                self.handle.client.wait_for_workers(parallelism, timeout=_LOCAL_START_S)
            except TimeoutError:
                logger.warning("the new local workers did not all start in %d s", _LOCAL_START_S)

    def _grow_gpu(self, cluster: Any, parallelism: int) -> None:
        from distributed import Nanny

        from ultron.cluster.factory import _memory_limit
        from ultron.cluster.gpus import local_gpu_workers

        resized = self.spec.model_copy(update={"parallelism": parallelism})
        try:
            wanted = local_gpu_workers(resized, _memory_limit(self.spec.resources.memory))
        except UltronError as exc:  # more GPU slots than this machine has
            logger.warning("cannot add local GPU workers: %s", exc)
            return
        for name, options in wanted.items():
            cluster.worker_spec.setdefault(name, {"cls": Nanny, "options": options})
        cluster.scale(len(cluster.worker_spec))

    def _retire_idle(self, cluster: Any, count: int) -> None:
        # Workers not started yet (a worker job SLURM has not run) go first: they run nothing.
        joined = {info.get("name") for info in cluster.scheduler_info.get("workers", {}).values()}
        ours = [name for name in cluster.worker_spec if name not in joined][:count]
        if len(ours) < count:
            names = self.handle.client.run_on_scheduler(_claim_idle, self.prefix, count - len(ours))
            ours += [name for name in names if name in cluster.worker_spec]
        for name in ours:
            del cluster.worker_spec[name]
        if not ours:
            return
        left = len(cluster.worker_spec)
        logger.info("retiring idle workers %s; %d left", ours, left)
        if self.kind == "slurm":
            cluster.ultron_target = left
            cluster.scale(jobs=left)  # closes the retired workers' jobs (scancel)
        else:
            cluster.scale(left)
