"""The HPO job: one Prefect flow of four tasks.

    containerize -> acquire_resources -> search_loop -> finalize (always)

Serve it to trigger jobs from the Prefect UI (``prefect.yaml`` or
``python -m ultron.flows.hpo_job serve``). The ``spec`` parameter is a typed
:class:`~ultron.spec.job.JobSpec`, so Prefect's run form shows every field with its type,
default, description and choices; a mapping (the paper's Fig. 2 keys too) is validated into one.
A code base in an object store (``code: s3://...``) is fetched first, into ``ULTRON_HOME``.
``ultron cancel JOB`` reaches the job through Redis
(:func:`ultron.master.cancel.watching_requests`).

SIGINT and SIGTERM cancel the job (:mod:`ultron.master.cancel`): ``finalize`` still runs, the
flow run ends ``Cancelled`` (its data is the job's summary) and the job resumes with its id.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from prefect.states import Cancelled, State

from ultron.cluster.factory import warm_local_workers
from ultron.containerize.codebase import code_hash
from ultron.containerize.modelcheck import check_model
from ultron.datamanager import validate_data
from ultron.errors import JobCancelledError
from ultron.master.cancel import CANCEL, handling_signals, watching_requests
from ultron.master.job_state import JobState, JobStatus, JobStore
from ultron.master.resume import check_or_store_spec
from ultron.master.strategy import build_stopper, build_strategy
from ultron.paths import check_job_id, new_job_id, ultron_home
from ultron.preflight import check_storage
from ultron.redis.client import connect
from ultron.secrets import install_redaction, reveal
from ultron.servers.job_redis import job_redis
from ultron.spec.job import JobSpec
from ultron.spec.loader import load_spec
from ultron.tasks.acquire_resources import JobResources, acquire_resources
from ultron.tasks.containerize import containerize
from ultron.tasks.finalize import finalize
from ultron.tasks.search_loop import search_loop
from ultron.usercode import import_paths, user_code

__all__ = ["hpo_job"]


@flow(name="hpo-job", validate_parameters=True)
def hpo_job(spec: JobSpec, job_id: str | None = None) -> dict[str, Any] | State:
    """Run one HPO job and return its summary (best configuration, score, trials, files).

    Args:
        spec: the job spec.
        job_id: a stable id; running again with the id of an unfinished job resumes it.

    Returns:
        The summary; a cancelled job returns a ``Cancelled`` state whose data is the summary.
    """
    # ultron.run and ultron submit hand Prefect the spec with its passwords masked (Prefect
    # stores parameters); they come back here, in the job's process.
    raw = reveal(spec.model_dump(mode="json") if isinstance(spec, JobSpec) else spec)
    install_redaction(raw)  # before anything can log the spec's passwords
    job = load_spec(raw)  # every problem is reported before any compute is spent
    job_id = check_job_id(job_id) if job_id is not None else _stable_job_id(job.name)
    warm_local_workers(job)  # a run from a deployment: its imports overlap Redis and containerize
    if job.code_is_remote:  # the containerizer fetches it into ULTRON_HOME, by content hash
        job = fetched(job)
    # Over Prefect's own SIGTERM handler, which would raise wherever the flow happens to be.
    with handling_signals(), job_redis(job) as redis_url:
        # Outside the try: a refused resume must leave the job it refers to as it was (finalize
        # would mark it failed and rewrite its results with this spec).
        store = JobStore(connect(redis_url), job_id)
        check_or_store_spec(store, job, code_hash=code_hash(job.code_path))
        error: str | None = None
        status = JobStatus.COMPLETED
        run = _Run()
        # ultron cancel JOB, from any machine, reaches the job through its Redis.
        with watching_requests(store.client, job_id):
            try:
                _run_tasks(job, job_id, redis_url, run)
            except BaseException as exc:
                error = f"{type(exc).__name__}: {exc}"
                status = JobStatus.CANCELLED if _is_cancellation(exc) else JobStatus.FAILED
                if status is JobStatus.FAILED:
                    raise
            finally:
                summary = finalize(
                    job, job_id, redis_url, run.resources, run.state, error, run.seconds, status
                )
    if status is JobStatus.CANCELLED:
        return Cancelled(
            message=f"job {job_id} was cancelled; it resumes with its id", data=summary
        )
    return summary


def _run_tasks(job: JobSpec, job_id: str, redis_url: str, run: _Run) -> None:
    """containerize, acquire_resources and search_loop; what they hold goes into ``run``, for
    finalize, whatever happens."""
    CANCEL.raise_if_requested(job_id)  # Ctrl-C while Prefect was starting
    check_storage(job.storage)  # an unreachable object store fails in seconds
    env = run.time("containerize", containerize, job, job_id)
    CANCEL.raise_if_requested(job_id)
    check_model(env.python, import_paths(env.source), job.model)
    # The user's code owns its module names in this process while the job runs (a BYO
    # strategy may import more of it later); nothing of it outlives the job.
    with user_code(import_paths(env.source)):
        # Built once per job, here, so a bad strategy or stopper fails before resources are
        # taken (why live objects go to search_loop: JobResources' docstring).
        strategy = build_strategy(job)
        stopper = build_stopper(job)
        if job.data is not None:  # bad data stops the job before any compute is spent
            validate_data(job.data, base_dir=job.code_path.parent)
        run.resources = run.time(
            "acquire_resources", acquire_resources, job, job_id, redis_url, env
        )
        _log_dashboard(run.resources)
        run.state = run.time(
            "search_loop",
            search_loop,
            *(job, job_id, env, run.resources, redis_url, strategy, stopper),
        )


def fetched(job: JobSpec) -> JobSpec:
    """The job with its object-store code base fetched to this machine (by content hash)."""
    from ultron.containerize.remote import fetch_code

    local = fetch_code(str(job.code), home=ultron_home())
    get_run_logger().info("fetched code base %s to %s", job.code, local)
    return job.model_copy(update={"code": local})


def _log_dashboard(resources: JobResources) -> None:
    """The Dask dashboard's address, in the flow run's logs (where users look)."""
    link = getattr(getattr(resources.cluster, "client", None), "dashboard_link", None)
    if link:
        get_run_logger().info("Dask dashboard: %s", link)


def _is_cancellation(exc: BaseException) -> bool:
    """A signal asked the job to stop (ours, or Prefect's SIGTERM bridge before ours was up)."""
    from prefect.exceptions import TerminationSignal

    return isinstance(exc, JobCancelledError | TerminationSignal | KeyboardInterrupt)


def _stable_job_id(name: str) -> str:
    """A new job's id; a Prefect retry of the same flow run gets the same one, and resumes."""
    run_id = flow_run.get_id()
    return new_job_id(name, suffix=run_id[:8] if run_id else None)


class _Run:
    """What the tasks hold (for finalize) and the seconds each took (``timings``)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.resources: JobResources | None = None
        self.state: JobState | None = None

    def time(self, name: str, fn: Any, *args: Any) -> Any:
        started = time.monotonic()
        try:
            return fn(*args)
        finally:
            self.seconds[name] = round(time.monotonic() - started, 3)


if __name__ == "__main__" and sys.argv[1:2] == ["serve"]:
    hpo_job.serve(name="hpo-job")
