"""The commands that follow jobs wherever they run: ``ultron submit`` (a deployment run of the
job on a shared Prefect server, the paper's HTTP POST), ``ultron status [JOB]``,
``ultron cancel JOB``, ``ultron scale JOB N`` and ``ultron --version``.

``status``, ``cancel`` and ``scale`` talk to the Redis the jobs share (``--redis-url``, else
``REDIS_URL``, else this machine's embedded server), never to the job's process: they work from
any machine that reaches it. ``ultron jobs`` (every job that Redis knows) is in
:mod:`ultron.cli.admin`. Each sees the caller's jobs only (:mod:`ultron.redis.tenants`): with a
tenant's credentials, another tenant's job id is "not known", as an id nobody used.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ultron.cli.admin import RedisUrl, job_state, shared_redis
from ultron.cli.exits import ExitCode, fail, set_verbose
from ultron.errors import UltronError

__all__ = ["find_job_or_fail", "register"]


def _out() -> Console:
    return Console(soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Adds ``submit``, ``status``, ``cancel`` and ``--version`` to the ``ultron`` command."""
    app.callback()(_main)
    app.command("submit")(submit)
    app.command("status")(status)
    app.command("cancel")(cancel)
    app.command("scale")(scale)


def _version(value: bool) -> None:
    if value:
        from ultron import __version__

        _out().print(f"ultron-automl {__version__}", highlight=False)
        raise typer.Exit()


def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="Show the traceback of an error that ends a command."),
    ] = False,
) -> None:
    """Ultron-AutoML: distributed hyper-parameter optimization."""
    set_verbose(verbose)


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def _report_text(latest: dict[str, Any] | None) -> str:
    if not latest:
        return "no report yet"
    metrics = " ".join(
        f"{k}={_score(v)}" for k, v in latest.items() if k not in ("step", "time", "trial_id")
    )
    ago = f" ({max(0.0, time.time() - float(latest.get('time', time.time()))):.0f}s ago)"
    return f"step {latest.get('step', '?')} {metrics}{ago}"


def _show(job: Any) -> None:
    out = _out()
    budget = job.budget if job.budget is not None else "?"
    best = (
        f"best {job.metric} {_score(job.best_score)} with {job.best_config}"
        if job.best_score is not None
        else f"no {job.metric} yet"
    )
    from ultron.master.job_state import counts_text

    counts = counts_text(job.trials)
    out.print(
        f"job [bold]{escape(job.job_id)}[/] ({escape(job.tenant)}): {escape(job_state(job))}, "
        f"{job.done} of {budget} trials done{f' ({counts})' if counts else ''}; {escape(best)}"
        + (f"; ended: {escape(job.end_reason)}" if job.end_reason else ""),
        highlight=False,
    )
    if job.status == "lost":
        out.print(
            f"its process stopped beating; resume it with: ultron resume {escape(job.job_id)}",
            highlight=False,
        )
    if job.running:
        table = Table(title=f"{len(job.running)} running trial(s)")
        for column in ("trial", "hyperparameters", "latest report"):
            table.add_column(column, overflow="fold")
        for trial in job.running:
            shown = ", ".join(f"{k}={v}" for k, v in trial.hyperparameters.items())
            table.add_row(trial.trial_id, escape(shown), escape(_report_text(trial.latest)))
        out.print(table)


def status(
    job_id: Annotated[
        str | None, typer.Argument(help="The job; default: every running job, else the newest.")
    ] = None,
    redis_url: RedisUrl = None,
) -> None:
    """A job's state (queued, preparing, running, lost, completed, failed, cancelled), trials
    done of its budget by status, the best so far, and its running trials with their latest
    ultron.report values."""
    from ultron.master.job_state import ACTIVE
    from ultron.master.overview import overview, visible_jobs
    from ultron.redis.client import connect

    with shared_redis(redis_url) as url:
        client = connect(url)
        if job_id is not None:
            jobs = [overview(client, job_id, namespace=find_job_or_fail(client, job_id))]
        else:
            every = sorted(
                (overview(client, j, namespace=ns) for ns, j in visible_jobs(client)),
                key=lambda j: -j.updated,
            )
            jobs = [j for j in every if j.status in ACTIVE] or every[:1]
    if not jobs:
        _out().print("no job is known to this Redis", highlight=False)
    for job in jobs:
        _show(job)


def find_job_or_fail(client: Any, job_id: str) -> str:
    """The namespace of the caller's job ``job_id``; else the command ends with "not known"
    (exit 2), for an id nobody used and another tenant's alike."""
    from ultron.master.overview import find_job
    from ultron.paths import check_job_id

    try:
        namespace = find_job(client, check_job_id(job_id))
    except UltronError as exc:
        fail(exc)
    if namespace is None:
        fail(f"job {job_id!r} is not known to this Redis. Fix: `ultron jobs` lists them")
    return namespace


def cancel(
    job_id: Annotated[str, typer.Argument(help="The job to stop.")],
    wait: Annotated[
        float, typer.Option(help="Seconds to wait for the job to end cancelled (0: do not).")
    ] = 60.0,
    redis_url: RedisUrl = None,
) -> None:
    """Stop a running job: its trials are asked to stop, finalize releases everything, and the
    job ends cancelled (run it again with its id to resume)."""
    from ultron.master.cancel import request_cancel
    from ultron.master.job_state import ACTIVE
    from ultron.master.overview import overview
    from ultron.redis.client import connect

    with shared_redis(redis_url) as url:
        client = connect(url)
        namespace = find_job_or_fail(client, job_id)
        state = overview(client, job_id, namespace=namespace).status
        asked = state in ACTIVE and request_cancel(client, job_id, namespace=namespace)
        if state == "lost" or (state in ACTIVE and not asked):
            fail(
                f"job {job_id} is lost: no process runs it (its heartbeat stopped), so there is "
                f"nothing to cancel; it stays as it is. Fix: `ultron resume {job_id}` resumes it"
            )
        if state not in ACTIVE:
            fail(f"job {job_id} is {state}, not running; there is nothing to cancel")
        _out().print(f"asked job {escape(job_id)} to stop", highlight=False)
        deadline = time.monotonic() + wait
        while wait > 0 and time.monotonic() < deadline:
            state = overview(client, job_id, namespace=namespace).status
            if state not in ACTIVE:
                break
            time.sleep(0.2)
    if wait <= 0:
        return
    if state in ACTIVE:
        fail(
            f"job {job_id} still runs after {wait:g} s; its process may be gone (then its "
            "units return after ULTRON_LEASE_TTL). Fix: check `ultron status`, or wait longer",
            code=ExitCode.JOB_FAILED,
        )
    _out().print(f"job {escape(job_id)} {state}", highlight=False)


def scale(
    job_id: Annotated[str, typer.Argument(help="The job to scale.")],
    parallelism: Annotated[int, typer.Argument(help="Trials that run at once from now on.")],
    redis_url: RedisUrl = None,
) -> None:
    """Change a job's parallelism. A running job takes (as the limiter has them free) or gives
    back units and workers and uses them from its next dispatch; running trials finish. Any
    later run of the job (a resume) starts with it."""
    from ultron.master.scaling import scale_job
    from ultron.redis.client import connect

    with shared_redis(redis_url) as url:
        try:
            state = scale_job(connect(url), job_id, parallelism)
        except UltronError as exc:
            fail(exc)
    if state == "running":
        said = f"asked job {escape(job_id)} to run {parallelism} trial(s) at once"
        said += " (from its next dispatch; `ultron status` shows its running trials)"
    else:
        said = f"job {escape(job_id)} is {state}; its next run starts with {parallelism}"
        said += " trial(s) at once"
    _out().print(said, highlight=False)


def submit(
    spec: Annotated[Path, typer.Argument(help="The job spec, YAML or JSON.")],
    deployment: Annotated[
        str, typer.Option(help="The deployment, FLOW/DEPLOYMENT (prefect deployment ls).")
    ] = "hpo-job/hpo-job",
    job_id: Annotated[str | None, typer.Option(help="The job's id (default: a new one).")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Follow the run until it ends.")] = False,
) -> None:
    """Upload the code base to the job's storage (once per content) and start a run of the
    deployment on the Prefect server (PREFECT_API_URL); print the run's URL and the job id."""
    from ultron.submit import start_run, upload_spec_code

    try:
        job, uploaded = upload_spec_code(spec)
    except UltronError as exc:
        fail(exc)
    out = _out()
    verb = "uploaded code base to" if uploaded else "code base unchanged, already at"
    out.print(f"{verb} {escape(str(job.code))}", highlight=False)
    try:
        run = start_run(job, deployment=deployment, job_id=job_id)
    except UltronError as exc:
        fail(exc)
    out.print(f"job id: {escape(run.job_id)}\nflow run: {escape(run.url)}", highlight=False)
    if wait:
        raise typer.Exit(code=_follow(run))


def _follow(run: Any) -> int:
    """Print the run's state and progress as they change; the exit status of its end."""
    from ultron.submit import watch_run

    shown = None
    for state, percent in watch_run(run.flow_run_id):
        line = f"{state} {percent:.0f}%" if percent is not None else state
        if line != shown:
            _out().print(f"{run.job_id}: {line}", highlight=False)
            shown = line
    final = (shown or "").split()[0].lower() if shown else ""
    return {"completed": 0, "cancelled": 130}.get(final, 1)
