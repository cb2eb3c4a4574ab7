"""The lifecycle of one HPO job around its tasks: signals, Redis, the stored spec, finalize.

:func:`job_lifecycle` is what :func:`ultron.flows.hpo_job.hpo_job` wraps its tasks in, so the
flow reads as the tasks themselves:

1. SIGINT, SIGTERM and SIGHUP cancel the job (:func:`ultron.master.cancel.handling_signals`), over
   Prefect's own SIGTERM handler, which would raise wherever the flow happens to be;
2. the job's Redis is chosen and checked (:func:`ultron.servers.job_redis.job_redis`), and so
   are its credentials: a tenant's own run its own jobs only
   (:func:`ultron.redis.tenants.check_tenant`); every key of the job is under its tenant's
   namespace (:func:`ultron.redis.keys.tenant_namespace`);
3. this process becomes the job's one master: it takes the job's lease, waiting for a dead
   predecessor's to expire or refused while a live one holds it, and renews it with a
   heartbeat until the end (:func:`ultron.master.heartbeat.holding_the_job`);
4. the spec is stored on the job's first run, and a resume with another spec is refused
   (:func:`ultron.master.resume.check_or_store_spec`) before anything else happens, leaving the
   job it refers to as it was, and so is a first run whose storage holds results of the id
   already (another Redis ran it); these checks run once before the lease is taken (its
   heartbeat writes to the job's record: a refused run leaves it untouched) and the spec's
   once more under it; an accepted run emits its first progress event then;
5. ``ultron cancel JOB``, from any machine, reaches this run of the job through its Redis
   (:func:`ultron.master.cancel.watching_requests`; a request sent to an earlier run is not
   this run's);
6. the job's state is written as it goes: ``preparing`` while containerize runs, ``queued``
   while it waits for units, ``running`` from then on (:attr:`JobRun.STAGES`);
7. ``finalize`` runs whatever happened (success, failure, cancellation): a failure propagates
   after it, a cancellation does not (the job's :attr:`JobRun.status` says it).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ultron.containerize.codebase import code_hash
from ultron.errors import JobCancelledError
from ultron.master.cancel import CANCEL, handling_signals, watching_requests
from ultron.master.heartbeat import holding_the_job
from ultron.master.job_state import JobState, JobStatus, JobStore
from ultron.master.progress import ProgressEvent, emit
from ultron.master.results import check_no_foreign_results
from ultron.master.resume import check_or_store_spec, check_stored_spec
from ultron.master.warm_start import check_sources
from ultron.paths import job_results_url
from ultron.redis.client import connect
from ultron.redis.keys import tenant_namespace
from ultron.redis.tenants import check_tenant
from ultron.servers.job_redis import job_redis
from ultron.settings import settings
from ultron.spec.job import JobSpec

__all__ = ["Finalize", "JobRun", "job_lifecycle"]

Finalize = Callable[..., dict[str, Any]]
"""``finalize(spec, job_id, redis_url, resources, state, error, timings, status) -> summary``
(:func:`ultron.tasks.finalize.finalize`)."""


@dataclass
class JobRun:
    """What the job's tasks hold, for finalize, and how the job ended.

    The tasks set :attr:`resources` and :attr:`state` as they get them; :meth:`time` runs one
    task and records its seconds in :attr:`seconds` (the summary's ``timings``); a task named
    in :attr:`STAGES` first writes the job's state (``acquire_resources`` writes ``running``
    itself when it is granted its units).
    """

    STAGES: ClassVar[dict[str, JobStatus]] = {
        "containerize": JobStatus.PREPARING,
        "acquire_resources": JobStatus.QUEUED,
    }

    redis_url: str
    store: JobStore | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    resources: Any = None  # ultron.tasks.acquire_resources.JobResources (a layer above)
    state: JobState | None = None
    status: JobStatus = JobStatus.COMPLETED
    error: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)

    def time(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, its wall time recorded under ``name`` whatever it raises."""
        if name in self.STAGES and self.store is not None:
            self.store.set_status(self.STAGES[name])
        started = time.monotonic()
        try:
            return fn(*args)
        finally:
            self.seconds[name] = round(time.monotonic() - started, 3)


@contextlib.contextmanager
def job_lifecycle(job: JobSpec, job_id: str, *, finalize: Finalize) -> Iterator[JobRun]:
    """Run the body as job ``job_id``: see the module's docstring for what surrounds it.

    A failure in the body is re-raised after ``finalize``; a cancellation (a signal, ``ultron
    cancel``) is not: the caller reads :attr:`JobRun.status` and :attr:`JobRun.summary`.
    """
    with handling_signals(), job_redis(job) as redis_url:
        # Outside the try: a refused resume (or a job another master runs) must leave the job
        # it refers to as it was (finalize would mark it failed and rewrite its results).
        client = connect(redis_url)
        check_tenant(client, job.tenant)  # a tenant's credentials run its own jobs only
        store = JobStore(client, job_id, namespace=tenant_namespace(job.tenant))
        code = code_hash(job.code_path)
        # Read-only, before the lease: its heartbeat writes to the job's record.
        _check_before_holding(client, store, job, job_id, code)
        beat, check = settings().heartbeat_s, lambda: CANCEL.raise_if_requested(job_id)
        with holding_the_job(
            client, job_id, heartbeat_s=beat, check=check, namespace=store.namespace
        ) as lease:
            # Again under the lease: another run of the id may have stored its spec meanwhile.
            check_or_store_spec(store, job, code_hash=code)
            # The job is accepted (`ultron run` prints its header now: a refused run never).
            emit(ProgressEvent(job_id, store.trial_count(), job.num_iterations, running=0))
            run = JobRun(redis_url=redis_url, store=store)
            with watching_requests(client, job_id, token=lease.token, namespace=store.namespace):
                yield from _finalized(run, job, job_id, finalize)


def _check_before_holding(
    client: Any, store: JobStore, job: JobSpec, job_id: str, code: str
) -> None:
    """The checks that refuse a run without writing anything: against the stored first run
    of the id, or, for a first run, that its storage holds no results of the id and that its
    ``warm_start`` names the tenant's own jobs."""
    stored = store.stored_spec()
    if stored is not None:
        check_stored_spec(store, stored, job, code_hash=code)
    elif not store.trial_count():
        check_no_foreign_results(job_results_url(job.storage, job_id), job_id)
        check_sources(client, job, job_id)  # warm_start names the tenant's own jobs


def _finalized(run: JobRun, job: JobSpec, job_id: str, finalize: Finalize) -> Iterator[JobRun]:
    """Yield ``run`` to the body; ``finalize`` whatever happens (see :func:`job_lifecycle`)."""
    try:
        yield run
    except BaseException as exc:
        run.error = f"{type(exc).__name__}: {exc}"
        cancelled = is_cancellation(exc)
        run.status = JobStatus.CANCELLED if cancelled else JobStatus.FAILED
        if not cancelled:
            raise
    finally:
        run.summary = finalize(
            job,
            job_id,
            run.redis_url,
            run.resources,
            run.state,
            run.error,
            run.seconds,
            run.status,
        )


def is_cancellation(exc: BaseException) -> bool:
    """A signal asked the job to stop (ours, or Prefect's SIGTERM bridge before ours was up)."""
    from prefect.exceptions import TerminationSignal

    return isinstance(exc, JobCancelledError | TerminationSignal | KeyboardInterrupt)
