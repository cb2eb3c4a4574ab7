"""GPUs of a trial: how many the machine has, and the local cluster that hands them out.

A local worker per trial slot, each pinned to its GPUs through ``CUDA_VISIBLE_DEVICES`` and
advertising a ``GPU`` resource.
"""

from __future__ import annotations

import logging
from typing import Any

from ultron.spec.job import JobSpec

__all__ = ["local_gpu_cluster"]


def local_gpu_cluster(spec: JobSpec, memory_limit: int) -> Any:
    """A ``SpecCluster`` of ``parallelism`` workers, each pinned to its own GPUs."""
    from distributed import Nanny, Scheduler, SpecCluster

    per = spec.resources.gpu
    workers = {
        f"gpu-worker-{i}": {
            "cls": Nanny,
            "options": {
                "nthreads": 1,
                "memory_limit": memory_limit,
                "resources": {"GPU": per},
                "env": {"CUDA_VISIBLE_DEVICES": ",".join(str(i * per + g) for g in range(per))},
            },
        }
        for i in range(spec.parallelism)
    }
    scheduler = {"cls": Scheduler, "options": {"dashboard_address": ":0"}}
    return SpecCluster(workers=workers, scheduler=scheduler, silence_logs=logging.WARNING)
