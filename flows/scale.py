"""Scaling a running job from the Prefect UI: the ``scale-job`` flow (``ultron scale`` as a
deployment run, with ``job_id`` and ``parallelism`` as its form).

It only writes the request to the job's Redis (:func:`ultron.master.scaling.scale_job`); the
job's own flow run applies it from its next dispatch.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from ultron.master.scaling import scale_job
from ultron.redis.client import connect
from ultron.servers.job_redis import shared_redis_url

__all__ = ["scale"]


@flow(name="scale-job", validate_parameters=True)
def scale(job_id: str, parallelism: int, redis_url: str | None = None) -> str:
    """Ask job ``job_id`` to run ``parallelism`` trials at once.

    Args:
        job_id: the job (``ultron jobs`` lists them).
        parallelism: trials that run at once from now on (at least 1).
        redis_url: the Redis the job uses; default ``REDIS_URL`` of the worker, else its
            machine's embedded server.

    Returns:
        The job's status (``running``: applied from its next dispatch; else its next run
        starts with it).
    """
    state = scale_job(connect(shared_redis_url(redis_url)), job_id, parallelism)
    get_run_logger().info("job %s (%s): parallelism %d asked", job_id, state, parallelism)
    return state
