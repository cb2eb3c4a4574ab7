"""The HPO job: one Prefect flow of four tasks.

    containerize -> acquire_resources -> search_loop -> finalize (always)

Serve it to trigger jobs from the Prefect UI (``prefect.yaml`` or
``python -m ultron.flows.hpo_job serve``). The ``spec`` parameter is a typed
:class:`~ultron.spec.job.JobSpec`, so Prefect's run form shows every field with its type,
default, description and choices; a mapping (the paper's Fig. 2 keys too) is validated into one.
A code base in an object store (``code: s3://...``) is fetched first, into ``ULTRON_HOME``.
``ultron cancel JOB`` reaches the job through Redis
(:func:`ultron.master.cancel.watching_requests`).

SIGINT, SIGTERM and SIGHUP cancel the job (:mod:`ultron.master.cancel`): ``finalize`` still
runs, the flow run ends ``Cancelled`` (its data is the job's summary) and the job resumes with
its id.
"""

from __future__ import annotations

import sys
from typing import Any

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from prefect.states import Cancelled, State

from ultron.datamanager import validate_data
from ultron.master.cancel import CANCEL
from ultron.master.hopper_search import check_hopper_model
from ultron.master.job_state import JobStatus
from ultron.master.lifecycle import JobRun, job_lifecycle
from ultron.master.scaling import effective_spec
from ultron.master.strategy import build_stopper, build_strategy
from ultron.paths import check_job_id, new_job_id, ultron_home
from ultron.preflight import check_storage
from ultron.redis.client import connect
from ultron.secrets import install_redaction, reveal
from ultron.spec.job import JobSpec
from ultron.spec.loader import load_spec
from ultron.tasks.acquire_resources import acquire_resources
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
    job, job_id = _load(spec, job_id)
    # Signals, the job's Redis, the stored spec, ultron cancel and finalize (always).
    with job_lifecycle(job, job_id, finalize=finalize) as run:
        CANCEL.raise_if_requested(job_id)  # Ctrl-C while Prefect was starting
        # A resume starts with the parallelism of the job's last `ultron scale`.
        job = effective_spec(connect(run.redis_url), job_id, job)
        check_storage(job.storage)  # an unreachable object store fails in seconds
        env = run.time("containerize", containerize, job, job_id)
        CANCEL.raise_if_requested(job_id)
        # The user's code owns its module names in this process while the job runs (a BYO
        # strategy may import more of it later); nothing of it outlives the job.
        with user_code(import_paths(env.source)):
            # Built before resources are taken, so a bad strategy, stopper or data set fails
            # first (why live objects go to search_loop: JobResources' docstring).
            strategy, stopper = build_strategy(job), build_stopper(job)
            if job.execution.hopper:
                check_hopper_model(job.model)  # sub-epochs call its train_epoch
            elif job.data is not None:
                validate_data(job.data, base_dir=job.code_path.parent)
            run.resources = run.time(
                "acquire_resources", acquire_resources, job, job_id, run.redis_url, env
            )
            run.state = run.time(
                "search_loop",
                search_loop,
                *(job, job_id, env, run.resources, run.redis_url, strategy, stopper),
            )
    return _outcome(run, job_id)


def _load(spec: JobSpec | dict[str, Any], job_id: str | None) -> tuple[JobSpec, str]:
    """The job's spec, validated with its passwords back, and its id (checked, or a new one)."""
    # ultron.run and ultron submit hand Prefect the spec with its passwords masked (Prefect
    # stores parameters); they come back here, in the job's process.
    raw = reveal(spec.model_dump(mode="json") if isinstance(spec, JobSpec) else spec)
    install_redaction(raw)  # before anything can log the spec's passwords
    job = load_spec(raw)  # every problem is reported before any compute is spent
    job_id = check_job_id(job_id) if job_id is not None else _stable_job_id(job.name)
    if job.code_is_remote:  # the containerizer fetches it into ULTRON_HOME, by content hash
        job = fetched(job)
    return job, job_id


def _outcome(run: JobRun, job_id: str) -> dict[str, Any] | State:
    """The flow's return: the summary, or a ``Cancelled`` state that carries it."""
    if run.status is JobStatus.CANCELLED:
        return Cancelled(
            message=f"job {job_id} was cancelled; it resumes with its id", data=run.summary
        )
    return run.summary


def fetched(job: JobSpec) -> JobSpec:
    """The job with its object-store code base fetched to this machine (by content hash)."""
    from ultron.containerize.remote import fetch_code

    local = fetch_code(str(job.code), home=ultron_home())
    get_run_logger().info("fetched code base %s to %s", job.code, local)
    return job.model_copy(update={"code": local})


def _stable_job_id(name: str) -> str:
    """A new job's id; a Prefect retry of the same flow run gets the same one, and resumes."""
    run_id = flow_run.get_id()
    return new_job_id(name, suffix=run_id[:8] if run_id else None)


if __name__ == "__main__" and sys.argv[1:2] == ["serve"]:
    from ultron.deploy.restarts import ensure_restart_automation

    ensure_restart_automation()  # a crashed run is scheduled again, and resumes
    hpo_job.serve(name="hpo-job")
