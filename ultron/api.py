"""``ultron.run``: run an HPO job from Python."""

from __future__ import annotations

import ast
import contextlib
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

from ultron.cluster.factory import check_scheduler, stop_warm_workers
from ultron.cluster.forkserver import restoring_environ
from ultron.cluster.gpus import check_local_gpus
from ultron.errors import JobCancelledError, UltronError
from ultron.master.cancel import CANCEL, handling_signals
from ultron.master.results import HPOResult
from ultron.master.strategy import check_options
from ultron.paths import check_job_id, new_job_id
from ultron.preflight import check_redis, check_storage
from ultron.secrets import conceal
from ultron.settings import settings
from ultron.spec.job import JobSpec
from ultron.spec.loader import load_spec

__all__ = ["prefect_defaults", "preflight", "resume", "run", "scale", "spec_to_resume"]

# Ephemeral Prefect (no server) takes over 20 s to start on a fresh database on a small
# machine, past its default startup timeout; telemetry needs a network some machines lack.
_PREFECT_DEFAULTS = {
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_API_SERVICES_TELEMETRY_ENABLED": "false",
}


def prefect_defaults() -> None:
    """Set Prefect settings that suit running jobs locally, unless the user set them."""
    for name, value in _PREFECT_DEFAULTS.items():
        os.environ.setdefault(name, value)


def run(
    spec: str | Path | Mapping[str, Any] | JobSpec,
    *,
    job_id: str | None = None,
    **overrides: Any,
) -> HPOResult:
    """Run an HPO job to the end and return its result.

    Ctrl-C (SIGINT), SIGTERM or SIGHUP cancels the job: its running trials are asked to stop, the
    results so far are written, and :class:`~ultron.errors.JobCancelledError` is raised (its
    ``result`` holds what was done); running again with the same ``job_id`` resumes. A second
    Ctrl-C ends the process at once. A process runs one job at a time: run jobs side by side in
    separate processes.

    Args:
        spec: a path to a YAML/JSON spec, the spec as a mapping, or a :class:`JobSpec`.
        job_id: a stable id (letters, digits, ``.``, ``_`` and ``-``); the id of an
            unfinished job resumes it. Default: a new id from the job's name.
        **overrides: spec fields to replace, e.g. ``num_iterations=4``.

    Raises:
        SpecError: the spec or the job id has problems (all of them are listed); nothing was
            started.
        JobCancelledError: the job was cancelled; it resumes with its id.
        UltronError: the job failed (too many failed trials, no resources, ...), or another
            job runs in this process.

    Example:
        >>> result = ultron.run("examples/quickstart/job.yaml")        # doctest: +SKIP
        >>> result.best_config, result.best_score                      # doctest: +SKIP
    """
    prefect_defaults()
    job = spec if isinstance(spec, JobSpec) else load_spec(spec, check_code=True)
    if overrides:
        job = load_spec({**job.model_dump(mode="json"), **overrides}, check_code=True)
    job_id = check_job_id(job_id) if job_id is not None else new_job_id(job.name)
    preflight(job)
    if not _one_job.acquire(blocking=False):
        raise UltronError(
            "ultron.run is running another job in this process; one process runs one job at "
            "a time (a job claims the process's module names for the user's code). Fix: run "
            "jobs side by side in separate processes (ultron run, or one process per job)"
        )
    try:
        with restoring_environ():  # Dask's nannies set theirs in this process
            return _run_flow(job, job_id)
    finally:
        stop_warm_workers()  # started with the job's local cluster, if it needed one
        _one_job.release()


def scale(job_id: str, parallelism: int, *, redis_url: str | None = None) -> str:
    """Change job ``job_id``'s parallelism (``ultron scale``): a running job takes or gives
    back units and workers and uses them from its next dispatch; running trials finish. Any
    later run of the job (a resume) starts with it.

    Args:
        job_id: the job.
        parallelism: trials that run at once from now on (at least 1).
        redis_url: the Redis the job uses; default ``REDIS_URL``, else this machine's
            embedded server.

    Returns:
        The job's status: ``running`` when it applies now, else its next run starts with it.

    Raises:
        UltronError: the job is not known to that Redis, or ``parallelism`` is below 1.
    """
    from ultron.master.scaling import scale_job
    from ultron.redis.client import connect
    from ultron.servers.job_redis import shared_redis_url

    return scale_job(connect(shared_redis_url(redis_url)), job_id, parallelism)


def spec_to_resume(job_id: str, *, redis_url: str, keep_redis_url: bool = True) -> JobSpec:
    """The spec that resumes job ``job_id`` of the Redis at ``redis_url``, as its first run
    stored it (:func:`ultron.master.resume.spec_to_resume`). With ``keep_redis_url`` the job
    runs with that Redis; without, it chooses its own as its first run did (the embedded one).

    Raises:
        SpecError: the job is not known there, has no stored spec, or completed.
        JobBusyError: a live process runs the job.
    """
    from ultron.errors import ConfigIssue, SpecError
    from ultron.master.job_state import JobStore
    from ultron.master.overview import find_job
    from ultron.master.resume import spec_to_resume as stored_spec_to_resume
    from ultron.redis.client import connect

    client = connect(redis_url)
    # The caller's job only, as `ultron status` finds it: another tenant's is not known.
    namespace = find_job(client, check_job_id(job_id))
    if namespace is None:
        rule = "no job of this id is known to that Redis"
        fix = "`ultron jobs` lists the jobs; give the job's Redis with --redis-url or REDIS_URL"
        raise SpecError([ConfigIssue("JOB", job_id, rule, fix)], source="ultron resume")
    store = JobStore(client, job_id, namespace=namespace)
    return stored_spec_to_resume(store, redis_url=redis_url if keep_redis_url else None)


def resume(job_id: str, *, redis_url: str | None = None) -> HPOResult:
    """Resume the unfinished job ``job_id`` (lost, cancelled, failed) from the spec its first
    run stored, with no spec file, from any folder (``ultron resume JOB`` from Python).

    Args:
        job_id: the job.
        redis_url: its Redis; default ``REDIS_URL``, else this machine's embedded one.

    Raises:
        SpecError: the job is not known, has no stored spec, or completed.
        JobBusyError: a live process runs the job.
        JobCancelledError, UltronError: as :func:`run`.
    """
    from ultron.paths import ultron_home
    from ultron.servers.home_redis import start_redis

    given = redis_url or os.environ.get("REDIS_URL")
    url = given or start_redis(ultron_home()).url
    return run(spec_to_resume(job_id, redis_url=url, keep_redis_url=bool(given)), job_id=job_id)


def _run_flow(job: JobSpec, job_id: str) -> HPOResult:
    from prefect.states import State

    from ultron.flows.hpo_job import hpo_job
    from ultron.servers.prefect import prefect_api

    CANCEL.reset()
    # ULTRON_HOME's Prefect server, unless the user has one (ultron.servers.prefect).
    with handling_signals(), prefect_api(), _no_flow_heartbeats():
        # Prefect stores a flow's parameters: it gets the spec with its passwords masked, and
        # the flow, in this process, puts them back.
        state: State = hpo_job(conceal(job), job_id=job_id, return_state=True)
    if state.is_cancelled():
        summary = state.result(raise_on_failure=False)
        raise JobCancelledError(
            f"job {job_id} was cancelled; run it again with job_id={job_id!r} to resume",
            signal_number=CANCEL.signal_number,
            result=HPOResult.from_summary(summary) if isinstance(summary, dict) else None,
        )
    if not state.is_completed():
        outcome = state.result(raise_on_failure=False)
        if isinstance(outcome, BaseException):
            raise outcome
        raise UltronError(f"job {job_id} ended {state.type.value}: {state.message}")
    return HPOResult.from_summary(state.result())


_one_job = threading.Lock()


@contextlib.contextmanager
def _no_flow_heartbeats() -> Iterator[None]:
    """Prefect's flow-run heartbeats off for a job this process runs, unless the user set
    ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` (or a profile does).

    Prefect's heartbeat thread sleeps in steps of a second and the flow joins it as it ends:
    up to a second on every job's end (half a second on average), a third of a cached job's
    run. Only an automation of the user's reads those events (a run without them for a while
    is marked crashed); here the command's own supervisor (``ultron run --restarts``) and the
    job's lease in Redis (``lost`` after 3 heartbeats of ours) do that job. A run from a
    deployment (a Prefect worker, ``ultron serve``) keeps Prefect's heartbeats.
    """
    from prefect.settings import get_current_settings, temporary_settings

    if "heartbeat_frequency" in get_current_settings().flows.model_fields_set:
        yield
        return
    with temporary_settings(updates={"flows.heartbeat_frequency": None}):
        yield


def preflight(job: JobSpec) -> None:
    """The checks ``run`` makes before Prefect starts, in seconds: the strategy's and stopper's
    options, that a local job's GPU trials fit this machine's GPUs, the script's main guard,
    that the job's Redis credentials are those of the spec's tenant (or an admin's),
    and that the job's Redis, storage and Dask scheduler (``cluster.address`` or
    ``ULTRON_DASK_ADDRESS``) answer (the flow checks those again: it may run elsewhere).

    Raises:
        SpecError: naming the field, the value, the rule and the fix.
        UltronError: ``run`` is called at the top level of a script without a main guard.
    """
    check_options(job)
    check_local_gpus(job)  # parallelism x gpu fits the GPUs here (the local backend)
    _check_main_guard(job)
    if job.redis_url or os.environ.get("REDIS_URL"):
        field = "redis_url" if job.redis_url else "REDIS_URL"
        check_redis(job.redis_url or os.environ["REDIS_URL"], field=field)
        _check_tenant(job.redis_url or os.environ["REDIS_URL"], job)
    check_storage(job.storage)
    check_scheduler(job)


def _check_tenant(url: str, job: JobSpec) -> None:
    """Refuse a spec's tenant that is not the one the job's Redis credentials say."""
    from ultron.redis.client import connect_once
    from ultron.redis.tenants import check_tenant

    client = connect_once(url, timeout_s=5.0)
    try:
        check_tenant(client, job.tenant)
    finally:
        client.close()


def _check_main_guard(job: JobSpec) -> None:
    """Refuse a call at the top level of a script without ``if __name__ == "__main__":``.

    Dask starts its local worker processes by importing the main script again; unguarded,
    each of them would start the job again, and the workers would fail to start after 30 s.
    """
    if settings().dask_address or job.cluster.type != "local":  # no local worker processes
        return
    main = sys.modules.get("__main__")
    main_file = getattr(main, "__file__", None)
    if main is None or not main_file or not str(main_file).endswith(".py"):
        return  # python -c, a notebook, a REPL: no script to import again
    line = _unguarded_line(main_file, _main_frame(main))
    if line is not None:
        raise UltronError(_guard_message(main_file, line))


def _main_frame(main: Any) -> FrameType | None:
    """The frame of the main script's top level that leads to this call."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals is vars(main) and frame.f_code.co_name == "<module>":
            return frame
        frame = frame.f_back  # type: ignore[assignment]
    return None


def _unguarded_line(path: str, frame: FrameType | None) -> int | None:
    """The line of the script's top-level statement that runs the job, when it is not inside
    an ``if __name__ == "__main__":`` block; ``None`` when guarded or unknown."""
    if frame is None:
        return None
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    line = frame.f_lineno
    for node in tree.body:
        end = getattr(node, "end_lineno", node.lineno)
        if node.lineno <= line <= end:
            return None if _is_main_guard(node) else line
    return None


def _is_main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    sides = [node.test.left, *node.test.comparators]
    names = {s.id for s in sides if isinstance(s, ast.Name)}
    texts = {s.value for s in sides if isinstance(s, ast.Constant)}
    return names == {"__name__"} and texts == {"__main__"}


def _guard_message(path: str, line: int) -> str:
    return (
        f"ultron.run is called at the top level of {path}, line {line}, outside an "
        '`if __name__ == "__main__":` block. Dask starts its worker processes by importing '
        "that script again, and each would start the job again. Fix: put the call (and "
        'whatever starts the job) under `if __name__ == "__main__":`'
    )
