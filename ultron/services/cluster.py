"""The cluster factory: where trials run.

By default a Dask ``LocalCluster`` of ``parallelism`` single-threaded worker processes, so at
most ``parallelism`` trials run at once. ``ULTRON_DASK_ADDRESS`` points at a running scheduler
instead (a Dask-Kubernetes cluster, say). With GPUs per trial, each local worker is pinned to
its own GPUs through ``CUDA_VISIBLE_DEVICES`` and advertises a ``GPU`` resource.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from ultron.services.gpus import local_gpu_cluster
from ultron.settings import settings
from ultron.spec.job import JobSpec

__all__ = ["ClusterHandle", "start_cluster"]

logger = logging.getLogger(__name__)


@dataclass
class ClusterHandle:
    """A Dask client and, when we started it, the cluster behind it."""

    client: Any
    cluster: Any | None
    resources: dict[str, float]

    @property
    def dashboard_link(self) -> str | None:
        return getattr(self.client, "dashboard_link", None)

    def close(self) -> None:
        """Close the client, and the cluster if it is ours."""
        with contextlib.suppress(Exception):
            self.client.close()
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.close()


def _memory_limit(memory: str | None) -> int:
    """Bytes of a Kubernetes quantity (``512Mi``, ``4Gi``, ``1G``); 0, no limit, for None."""
    from dask.utils import parse_bytes  # understands Ki, Mi, Gi, Ti, k, M, G, T as they are

    return 0 if memory is None else parse_bytes(memory)


def start_cluster(spec: JobSpec) -> ClusterHandle:
    """Connect to ``ULTRON_DASK_ADDRESS`` or start a local cluster sized for ``spec``."""
    import dask
    from distributed import Client, LocalCluster

    # A worker that dies while running a trial fails that attempt at once (KilledWorker) so the
    # dispatcher retries it from its checkpoint, instead of Dask rerunning it from scratch.
    dask.config.set({"distributed.scheduler.allowed-failures": 0})
    resources: dict[str, float] = {"GPU": spec.resources.gpu} if spec.resources.gpu else {}
    address = settings().dask_address
    if address:
        logger.info("using the Dask scheduler at %s", address)
        return ClusterHandle(Client(address), None, resources)
    memory_limit = _memory_limit(spec.resources.memory)
    if spec.resources.gpu:
        cluster = local_gpu_cluster(spec, memory_limit)
    else:
        cluster = LocalCluster(
            n_workers=spec.parallelism,
            threads_per_worker=1,
            processes=True,
            memory_limit=memory_limit,
            dashboard_address=":0",
            silence_logs=logging.WARNING,
        )
    return ClusterHandle(Client(cluster), cluster, resources)
