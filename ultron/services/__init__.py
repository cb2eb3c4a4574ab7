"""Services a job talks to: the embedded Redis server, shared by the jobs of a machine, and its
client, the checks that a Redis or storage answers, the resource limiter, the Dask cluster
factory, the job's folders, and :mod:`ultron.services.keys`, which owns every Redis key.

Names load on first use (:mod:`ultron._lazy`): the trial process imports modules of this
package and must not pay for the rest of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ultron._lazy import lazy_exports

if TYPE_CHECKING:
    from ultron.services import keys
    from ultron.services.cluster import ClusterHandle, start_cluster
    from ultron.services.lease_keeper import LeaseKeeper
    from ultron.services.limiter import Holding, Lease, ResourceLimiter
    from ultron.services.limits import read_max_units
    from ultron.services.paths import (
        artifact_key,
        job_results_url,
        new_job_id,
        scratch_dir,
        ultron_home,
    )
    from ultron.services.reachability import check_redis, check_storage, mask_url
    from ultron.services.redis_client import connect
    from ultron.services.redis_server import EmbeddedRedis, find_redis_server
    from ultron.services.redis_share import EmbeddedRedisUse, ensure_embedded_redis
    from ultron.services.runtime import job_redis

__all__ = [
    "ClusterHandle",
    "EmbeddedRedis",
    "EmbeddedRedisUse",
    "Holding",
    "Lease",
    "LeaseKeeper",
    "ResourceLimiter",
    "artifact_key",
    "check_redis",
    "check_storage",
    "connect",
    "ensure_embedded_redis",
    "find_redis_server",
    "job_redis",
    "job_results_url",
    "keys",
    "mask_url",
    "new_job_id",
    "read_max_units",
    "scratch_dir",
    "start_cluster",
    "ultron_home",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "cluster": ["ClusterHandle", "start_cluster"],
        "lease_keeper": ["LeaseKeeper"],
        "limiter": ["Holding", "Lease", "ResourceLimiter"],
        "limits": ["read_max_units"],
        "paths": ["artifact_key", "job_results_url", "new_job_id", "scratch_dir", "ultron_home"],
        "reachability": ["check_redis", "check_storage", "mask_url"],
        "redis_client": ["connect"],
        "redis_server": ["EmbeddedRedis", "find_redis_server"],
        "redis_share": ["EmbeddedRedisUse", "ensure_embedded_redis"],
        "runtime": ["job_redis"],
        "keys": ["keys"],
    },
)
