"""The ``slurm`` backend: Dask workers as SLURM batch jobs (dask-jobqueue's ``SLURMCluster``).

One worker per SLURM job, and one trial per worker (one thread): each job books the cores,
memory and GPUs of one trial (``resources``) in ``cluster.partition`` under
``cluster.account`` for ``cluster.walltime``. The scheduler runs in the job's own process; the
workers run ``cluster.python`` (default: this interpreter), so the job's environment and
``ULTRON_HOME`` must lie on a file system the compute nodes share. ``sbatch`` passes this
process's environment on to the worker jobs (its default, ``--export=ALL``).

A worker job that ends early (``scancel``, its walltime, a node failure) fails the trial it
was running, which the dispatcher retries from its checkpoint on another worker; a new job
replaces the lost one. Closing the cluster cancels every job it submitted, and then any job
that still carries its name.

A hopper job (``execution: hopper``) gets one worker job per partition instead of alike ones:
job ``k`` starts its worker with the resource ``partition-<k>: 1`` (dask-jobqueue's spec of
each worker, :func:`partition_worker_specs`), and a lost job is replaced by one with the same
worker name and resource, which fetches the partition again.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import shutil
import subprocess
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from ultron.cluster.partitions import worker_args as partition_args
from ultron.errors import ConfigIssue, SpecError
from ultron.paths import new_job_id, ultron_home
from ultron.preflight import mask_url
from ultron.spec.cluster import SlurmCluster
from ultron.spec.job import JobSpec

__all__ = [
    "cancel_jobs_named",
    "check_slurm",
    "partition_worker_specs",
    "slurm_cluster",
    "worker_job_options",
]

logger = logging.getLogger(__name__)

# Memory of a worker job when the spec names none: per booked core, like a site's DefMemPerCPU.
_DEFAULT_MEMORY_PER_CORE = 2 * 2**30
# Seconds between the checks that resubmit a lost worker job (after Dask's lost-worker-timeout).
_REPLACE_EVERY_S = 10
# squeue lists a cancelled job until its processes are gone (state CG): wait that long for it.
_SWEEP_TIMEOUT_S = 60


def check_slurm(spec: JobSpec) -> None:
    """Check, before any compute, that this machine can submit the job's worker jobs.

    Raises:
        SpecError: dask-jobqueue (the ``slurm`` extra) is missing, or ``sbatch`` is not on
            ``PATH``; the issue names ``cluster.type`` and the fix.
    """
    issues = []
    try:
        import dask_jobqueue  # noqa: F401  (only whether it is there)
    except ImportError:
        issues.append(
            ConfigIssue(
                "cluster.type",
                "slurm",
                "the slurm backend needs dask-jobqueue, which is not installed",
                "pip install 'ultron-automl[slurm]'",
            )
        )
    if shutil.which("sbatch") is None:
        issues.append(
            ConfigIssue(
                "cluster.type",
                "slurm",
                "the slurm backend submits worker jobs with sbatch, which is not on PATH",
                "run the job on a SLURM login node (or load the slurm module), or pick "
                "another cluster type",
            )
        )
    if issues:
        raise SpecError(issues)


def worker_job_options(spec: JobSpec, name: str, partition: int | None = None) -> dict[str, Any]:
    """Keyword arguments of ``SLURMCluster`` for one worker job per trial of ``spec``; with
    ``partition``, for the worker job that holds that partition of a hopper job.

    Example:
        >>> from ultron.spec.job import JobSpec
        >>> spec = JobSpec.model_validate({
        ...     "name": "x", "code": ".", "model": "m:M", "search_space": {"a": [1]},
        ...     "resources": {"cpu": 1.5, "gpu": 2},
        ...     "cluster": {"type": "slurm", "partition": "gpu", "walltime": "02:00:00"}})
        >>> options = worker_job_options(spec, "ultron-x-1")
        >>> options["job_cpu"], options["memory"], options["job_extra_directives"][0]
        (2, '4GiB', '--gres=gpu:2')
        >>> options["queue"], options["walltime"], options["worker_extra_args"]
        ('gpu', '02:00:00', ['--resources', 'GPU=2'])
        >>> worker_job_options(spec, "ultron-x-1", partition=1)["worker_extra_args"]
        ['--resources', 'GPU=2,partition-1=1']
    """
    cluster = spec.cluster
    assert isinstance(cluster, SlurmCluster)
    cores = spec.resources.threads
    memory = spec.resources.memory or f"{cores * _DEFAULT_MEMORY_PER_CORE // 2**30}GiB"
    directives = list(cluster.job_directives)
    # SLURM books whole GPUs (a fraction would need a site's shard or MPS gres): a trial that
    # asks for part of one gets one to itself.
    gpus = math.ceil(spec.resources.gpu)
    others = {"GPU": float(gpus)} if gpus else {}
    if gpus:
        directives.insert(0, f"--gres=gpu:{gpus}")
    if partition is not None:
        worker_args = partition_args(partition, others)
    else:
        worker_args = ["--resources", f"GPU={gpus}"] if gpus else []
    return {
        "name": name,  # the cluster's: its workers are <name>-0, <name>-1, ... in the trial table
        "job_name": name,
        "cores": 1,  # one thread: one trial per worker; job_cpu books the trial's cores
        "processes": 1,
        "job_cpu": cores,
        "memory": memory,
        "queue": cluster.partition,
        "account": cluster.account,
        "walltime": cluster.walltime,
        "python": cluster.python or sys.executable,
        "interface": cluster.interface,
        "job_extra_directives": directives,
        "worker_extra_args": worker_args,
        # sbatch writes each job's output here (dask-jobqueue makes the folder)
        "log_directory": str(ultron_home() / "slurm" / name),
        "scheduler_options": {"dashboard_address": cluster.dashboard_address},
        "silence_logs": logging.WARNING,
    }


def slurm_cluster(spec: JobSpec) -> Any:
    """A ``SLURMCluster`` of ``parallelism`` worker jobs, one trial each, sized from ``spec``.

    The jobs are submitted now and join as SLURM starts them. Its ``close`` leaves no job of
    ours queued or running.

    Raises:
        SpecError: see :func:`check_slurm`.
    """
    check_slurm(spec)
    _warn_if_loopback_redis(spec)
    name = f"ultron-{new_job_id(spec.name)}"
    cluster = _cluster_class()(target=spec.parallelism, **worker_job_options(spec, name))
    if spec.execution.hopper:
        # Before the first scale: it then finds its target reached and submits these.
        cluster.worker_spec.clear()
        cluster.worker_spec.update(partition_worker_specs(cluster.new_spec, spec, name))
    logger.info(
        "submitting %d SLURM worker jobs named %s; scheduler at %s",
        spec.parallelism,
        name,
        cluster.scheduler_address,
    )
    cluster.scale(jobs=spec.parallelism)
    return cluster


def partition_worker_specs(
    new_spec: dict[str, Any], spec: JobSpec, name: str
) -> dict[str, dict[str, Any]]:
    """The cluster's worker specs of a hopper job: one worker job per partition, named
    ``<name>-partition-<k>``, whose worker holds ``partition-<k>``.

    ``SpecCluster`` keeps these for the cluster's life: a worker that left (its job ended) is
    started again from its spec once Dask forgets it, with the same name and resource.

    Args:
        new_spec: the cluster's spec of a worker job (``SLURMCluster.new_spec``).
        spec: the job's spec; ``parallelism`` is the number of partitions.
        name: the cluster's name (:func:`worker_job_options`).
    """
    return {
        f"{name}-partition-{k}": {
            **new_spec,
            "options": {
                **new_spec["options"],
                "worker_extra_args": worker_job_options(spec, name, partition=k)[
                    "worker_extra_args"
                ],
            },
        }
        for k in range(spec.parallelism)
    }


def _warn_if_loopback_redis(spec: JobSpec) -> None:
    """Say so when the job's Redis is on loopback: trials on other nodes cannot reach it."""
    url = spec.redis_url or os.environ.get("REDIS_URL")
    host = urlsplit(url).hostname if url else "127.0.0.1"  # no URL: the embedded server
    if host in ("127.0.0.1", "localhost", "::1"):
        logger.warning(
            "the job's Redis (%s) listens on loopback: worker jobs on other nodes cannot reach "
            "it; set redis_url (or REDIS_URL) to a Redis the compute nodes reach",
            mask_url(url) if url else "embedded",
        )


@functools.cache
def _cluster_class() -> type:
    """``SLURMCluster`` that replaces lost worker jobs and sweeps its jobs when closed (made
    on first use: dask-jobqueue is an optional extra)."""
    from dask_jobqueue import SLURMCluster
    from tornado.ioloop import PeriodicCallback

    class UltronSlurmCluster(SLURMCluster):
        def __init__(self, *, target: int, **options: Any) -> None:
            super().__init__(**options)
            self._job_name = options["job_name"]
            # Worker jobs kept: the job's parallelism, which `ultron scale` changes.
            self.ultron_target = target

            def install() -> None:
                # Dask forgets a worker that left after its lost-worker-timeout; scale() then
                # submits a job in its place. Without this a job whose workers all reached
                # their walltime would wait for workers forever.
                callback = PeriodicCallback(
                    lambda: self.scale(jobs=self.ultron_target), _REPLACE_EVERY_S * 1e3
                )
                self.periodic_callbacks["ultron-replace-lost-jobs"] = callback
                callback.start()

            assert self.loop is not None  # a started cluster has its loop
            self.loop.add_callback(install)

        def close(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return super().close(*args, **kwargs)
            finally:
                cancel_jobs_named(self._job_name)

    return UltronSlurmCluster


def _our_jobs(name: str) -> list[str]:
    user = os.environ.get("USER") or _user_name()
    listed = subprocess.run(
        ["squeue", "--noheader", "--name", name, "--user", user, "--format", "%i"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return listed.stdout.split()


def _user_name() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def cancel_jobs_named(name: str, timeout_s: float = _SWEEP_TIMEOUT_S) -> list[str]:
    """Cancel this user's SLURM jobs named ``name`` and wait until ``squeue`` lists none.

    Returns:
        The ids of the jobs that were still listed (and were cancelled).
    """
    try:
        left = _our_jobs(name)
        if left:
            subprocess.run(["scancel", *left], capture_output=True, timeout=30, check=False)
        deadline = time.monotonic() + timeout_s
        while _our_jobs(name) and time.monotonic() < deadline:
            time.sleep(0.5)
        if _our_jobs(name):
            logger.warning("SLURM jobs named %s are still listed after scancel", name)
    except (OSError, subprocess.SubprocessError) as exc:
        logger.warning("could not check for SLURM jobs named %s: %s", name, exc)
        return []
    return left
