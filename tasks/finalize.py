"""Task 4 of a job: the completion manager. Runs whatever happened before it.

It gives back the resources, removes the job's transient keys from Redis, writes the result
files and the Prefect artifacts, and records the job's final status.
"""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_table_artifact,
)
from prefect.cache_policies import NONE

from ultron.algorithms.objectives import Bound, Goal
from ultron.master.goals import EndKind, JobEnd
from ultron.master.job_state import JobState, JobStatus, JobStore, trial_counts
from ultron.master.pareto import is_feasible, pareto_trials
from ultron.master.results import best_trial, leaderboard, objectives_record, write_results
from ultron.paths import artifact_key, job_results_url, remove_tree, scratch_dir
from ultron.redis.client import connect
from ultron.redis.keys import tenant_namespace
from ultron.reporting import REPORT_FILE, JobFiles, write_job_report
from ultron.secrets import redact, redacted_spec
from ultron.spec.job import JobSpec
from ultron.spec.objectives import job_bounds, job_goals
from ultron.tasks.acquire_resources import JobResources
from ultron.trial_records import TrialStatus

__all__ = ["finalize"]

_TOP = 20


@task(name="finalize", task_run_name="finalize-{job_id}", cache_policy=NONE)
def finalize(
    spec: JobSpec,
    job_id: str,
    redis_url: str,
    resources: JobResources | None,
    state: JobState | None,
    error: str | None = None,
    timings: dict[str, float] | None = None,
    status: JobStatus | None = None,
) -> dict[str, Any]:
    """Release, clean up and report; returns the job's summary.

    ``status`` is how the job ended (default: failed with an ``error``, else completed). An
    unfinished (cancelled or failed) job keeps its record of running trials, so that they
    resume from their checkpoints when the job runs again with its id.
    """
    logger = get_run_logger()
    error = redact(error) if error else error  # it may quote a URL with its password
    unsynced = resources.release() if resources is not None else []
    timings = dict(timings or {})
    if resources is not None and resources.cluster.start_s is not None:
        # Absent when no trial needed a worker (the score cache answered them all).
        timings["start_workers"] = resources.cluster.start_s
    warnings = _unsynced_warnings(unsynced)
    for warning in warnings:
        logger.warning("%s", warning)
    store = JobStore(connect(redis_url), job_id, namespace=tenant_namespace(spec.tenant))
    state = _record_end(store, state or store.load() or JobState(job_id), status, error)
    # An unfinished job keeps its checkpoints, and so does one whose store lacks some.
    if state.status is JobStatus.COMPLETED and not unsynced:
        _remove_local_checkpoints(job_id)
    url = job_results_url(spec.storage, job_id)
    mode = spec.objective.mode
    goals, bounds = (job_goals(spec) if spec.objectives else ()), job_bounds(spec)
    best = best_trial(state.trials, mode, goals=goals, bounds=bounds)
    front = pareto_trials(state.trials, goals, bounds) if goals else []
    ended = {
        "job_id": job_id,
        "status": str(state.status),
        "end_reason": state.end_reason,
        "error": error,
        "timings": timings,
        "warnings": warnings,
        "unsynced_checkpoints": unsynced,
    }
    files = write_results(
        url,
        goals=goals,
        bounds=bounds,
        trials=state.trials,
        curves=state.curves,
        direction=mode,
        metric=spec.objective.metric,
        extra={**ended, "spec": redacted_spec(spec)},
    )
    store.set_results_url(url)  # where `ultron report JOB` finds them
    files.update(_report(spec, job_id, url, state))
    _artifacts(spec, job_id, state, error, warnings)
    logger.info("job %s %s (%s); results in %s", job_id, state.status, state.end_reason, url)
    return {
        **ended,
        "best_config": best.hyperparameters if best else None,
        "best_score": best.score if best else None,
        "trials": [t.to_dict() for t in state.trials],
        "results_url": url,
        "best_checkpoint": f"{url}/checkpoints/{best.trial_id}" if best else None,
        "mode": str(mode),
        "files": files,
        "pareto": [t.trial_id for t in front],
    }


def _record_end(
    store: JobStore, state: JobState, status: JobStatus | None, error: str | None
) -> JobState:
    """Record how the job ended and remove its transient keys. An unfinished job keeps its
    record of running trials: they resume from their checkpoints when it runs again."""
    state.status = status or (JobStatus.FAILED if error else JobStatus.COMPLETED)
    state.end_reason = _end_reason(state, error)
    store.set_status(state.status, end_reason=state.end_reason)
    interrupted = store.running() if state.status is not JobStatus.COMPLETED else {}
    removed = store.clear_transient()
    if interrupted:
        store.mark_running(interrupted)
    get_run_logger().info("removed %d transient keys", removed)
    return state


def _remove_local_checkpoints(job_id: str) -> None:
    """The completed job's checkpoints on this machine (all of them are in its store)."""
    job_dir = scratch_dir(job_id)
    try:
        remove_tree(job_dir / "checkpoints", root=job_dir)
    except OSError as exc:
        get_run_logger().warning("could not remove the local checkpoints of %s: %s", job_id, exc)


def _pareto_text(state: JobState, goals: tuple[Goal, ...], bounds: tuple[Bound, ...]) -> str:
    """The summary artifact's Pareto front (several objectives) and infeasible count."""
    text = ""
    if goals:
        front = pareto_trials(state.trials, goals, bounds)
        names = [g.metric for g in goals]
        text += f"\nPareto front ({len(front)} trials; {', '.join(names)}):\n\n"
        text += "".join(
            f"- trial {t.trial_id}: "
            + ", ".join(f"{n} {t.metrics[n]:.6g}" for n in names)
            + f" with `{t.hyperparameters}`\n"
            for t in front
        )
    if bounds:
        scored = [t for t in state.trials if t.status.ok and t.score is not None]
        bad = sum(not is_feasible(t, bounds) for t in scored)
        text += f"\nInfeasible trials: {bad} of {len(scored)} scored\n"
    return text


def _end_reason(state: JobState, error: str | None) -> str:
    """Why the job ended: the search's reason when it completed, else how it stopped."""
    if state.status is JobStatus.CANCELLED:
        return str(JobEnd(EndKind.CANCELLED))
    if state.status is JobStatus.FAILED:
        return str(JobEnd(EndKind.FAILED, error=error or "unknown cause"))
    return state.end_reason or str(JobEnd(EndKind.TRIALS, trials=len(state.trials)))


def _unsynced_warnings(unsynced: list[dict[str, str]]) -> list[str]:
    """The job's warning for checkpoints that never reached the store (none: no warning)."""
    if not unsynced:
        return []
    named = "; ".join(
        f"trial {c['trial_id']} checkpoint {c['checkpoint']} ({c['local_path']} -> "
        f"{c['store_url']}): {c['error']}"
        for c in unsynced
    )
    return [
        f"{len(unsynced)} checkpoint(s) did not reach the store before the job ended: {named}. "
        "They stay on the worker's local disk only; a resumed trial cannot restore them from "
        "the store. Fix: check the storage (its URL, permissions, space), or allow more time "
        "with ULTRON_CHECKPOINT_FLUSH_S"
    ]


def _report(spec: JobSpec, job_id: str, url: str, state: JobState) -> dict[str, str]:
    """Write the job's HTML report and link it from the flow run; a report that cannot be
    written (no matplotlib: the ``report`` extra) is a warning, never a failed job."""
    about = {"job_id": job_id, "status": str(state.status), "metric": spec.objective.metric}
    about.update(objectives_record(job_goals(spec) if spec.objectives else (), job_bounds(spec)))
    job = JobFiles(url, {**about, "mode": str(spec.objective.mode)}, state.trials, state.curves)
    try:
        path = write_job_report(
            job, title=f"{spec.name} ({job_id})", plots_note=_plots_on_demand(state, job_id)
        )
    except Exception as exc:
        get_run_logger().warning("no HTML report for %s: %s", job_id, exc)
        return {}
    link = path if "://" in path else f"file://{path}"
    try:
        create_link_artifact(
            link, link_text="HPO job report", key=artifact_key(job_id, "report"), description=link
        )
    except Exception:  # artifacts are for the UI; their failure never fails a job
        get_run_logger().warning("could not link the report from the flow run")
    return {REPORT_FILE: path}


def _plots_on_demand(state: JobState, job_id: str) -> str | None:
    """The report's line in place of its plots when every trial came from the score cache:
    nothing new to look at, and drawing them (matplotlib's import and four figures) took
    longer than the rest of such a job. ``ultron report JOB`` draws them; None: draw them."""
    if not state.trials or any(t.status is not TrialStatus.CACHED for t in state.trials):
        return None
    return (
        "Every trial of this job came from the score cache, so its plots were not drawn as it "
        f"ended. `ultron report {job_id}` draws them and writes this page again with them."
    )


def _artifacts(
    spec: JobSpec, job_id: str, state: JobState, error: str | None, warnings: list[str]
) -> None:
    goals, bounds = (job_goals(spec) if spec.objectives else ()), job_bounds(spec)
    board = leaderboard(state.trials, spec.objective.mode, goals=goals, bounds=bounds)[:_TOP]
    metrics = [g.metric for g in goals] + [b.metric for b in bounds]
    rows = [
        {
            "rank": i,
            "trial": t.trial_id,
            spec.objective.metric: t.score,
            **{m: t.metrics.get(m) for m in metrics},
            **({"feasible": is_feasible(t, bounds)} if bounds else {}),
            "status": str(t.status),
            **t.hyperparameters,
        }
        for i, t in enumerate(board, 1)
    ]
    best = best_trial(state.trials, spec.objective.mode, goals=goals, bounds=bounds)
    text = (
        f"# {spec.name}: {state.status}\n\nEnded: {state.end_reason}\n\n"
        + (f"Trials: {trial_counts(state.trials)}\n\n" if state.trials else "")
        + (
            f"Best {spec.objective.metric}: **{best.score}** with `{best.hyperparameters}`\n"
            if best
            else "No trial produced a score.\n"
        )
        + _pareto_text(state, goals, bounds)
        + (f"\nError: `{error}`\n" if error else "")
        + "".join(f"\nWarning: {w}\n" for w in warnings)
    )
    try:
        create_table_artifact(
            rows, key=artifact_key(job_id, "leaderboard"), description=f"{spec.name} top {_TOP}"
        )
        create_markdown_artifact(
            redact(text), key=artifact_key(job_id, "summary"), description=spec.name
        )
    except Exception:  # artifacts are for the UI; their failure never fails a job
        get_run_logger().warning("could not write Prefect artifacts")
