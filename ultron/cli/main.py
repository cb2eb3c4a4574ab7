"""The ``ultron`` command line: ``ultron run SPEC``, ``ultron resume JOB``, ``ultron validate
SPEC``, ``ultron serve``. ``ultron run`` and ``ultron resume`` run the job in a child process
that comes back if it dies (:mod:`ultron.cli.supervise`).

The admin commands, ``ultron limits`` (show and set the stored limits) and ``ultron jobs`` (every
job the Redis knows), are in :mod:`ultron.cli.admin`; ``ultron submit``, ``ultron status``,
``ultron cancel`` and ``ultron --version`` in :mod:`ultron.cli.jobs`; ``ultron logs`` in
:mod:`ultron.cli.logs`.
"""

from __future__ import annotations

import gc
import os
import shlex
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ultron.cli.exits import VerboseOption, code_for, err_console, fail, set_verbose
from ultron.cli.output import JobConsole, divert_output, logs_to
from ultron.errors import JobBusyError, JobCancelledError, SpecError, UltronError, printable

app = typer.Typer(
    help="Ultron-AutoML: distributed hyper-parameter optimization.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
console = JobConsole()  # a reader that goes away never ends the job (ultron.cli.output)

SpecArg = Annotated[Path, typer.Argument(help="The job spec, YAML or JSON.")]


@app.command()
def validate(spec: SpecArg) -> None:
    """Check a job spec; print every problem and exit non-zero if there is one."""
    from ultron.spec.loader import load_spec

    try:
        job = load_spec(spec, check_code=True)
    except SpecError as exc:
        fail(exc)
    console.print(
        f"[green]ok[/]: {escape(printable(str(spec)))} is a valid job spec "
        f"({escape(printable(job.name))}: "
        f"{job.num_iterations} trials of {job.model}, strategy {escape(job.strategy)})",
        soft_wrap=True,
    )


def _leaderboard(result: Any, metric: str, top: int = 10, job: Any = None) -> Table:
    from ultron.master.pareto import is_feasible
    from ultron.master.results import leaderboard
    from ultron.spec.objectives import job_bounds, job_goals

    goals = job_goals(job) if job is not None and job.objectives else ()
    bounds = job_bounds(job) if job is not None else ()
    board = leaderboard(result.trials, result.direction, goals=goals, bounds=bounds)[:top]
    table = Table(title=f"Leaderboard (top {len(board)} of {len(result.trials)} trials)")
    columns = ["rank", "trial", metric, *(g.metric for g in goals[1:])]
    for name in [*columns, *(["feasible"] if bounds else []), "status", "hyperparameters"]:
        table.add_column(name)
    for rank, t in enumerate(board, 1):
        table.add_row(
            str(rank),
            t.trial_id,
            f"{t.score:.6g}",
            *(f"{t.metrics.get(g.metric, float('nan')):.6g}" for g in goals[1:]),
            *([str(is_feasible(t, bounds))] if bounds else []),
            str(t.status),
            ", ".join(f"{k}={v}" for k, v in t.hyperparameters.items()),
        )
    return table


def _trial_line(event: Any, metric: str) -> str:
    """One line per finished trial, for a terminal-less run (``ultron run job.yaml > log``)."""
    last = event.last
    score = last.get("score")
    shown = f"{metric}={score:.6g}" if isinstance(score, int | float) else f"{metric}=-"
    best = f"best={event.best_score:.6g}" if event.best_score is not None else "best=-"
    return (
        f"trial {last.get('trial_id', '?')} {last.get('status', '?')} {shown} {best} "
        f"({event.done}/{event.budget})"
    )


def _cancelled_by(signal_number: int | None) -> str:
    """Who asked the job to stop, in the user's words."""
    if signal_number is None:
        return "`ultron cancel`"
    if signal_number == signal.SIGINT:
        return "Ctrl-C"
    if signal_number == signal.SIGHUP:
        return "SIGHUP (its terminal closed)"
    return signal.Signals(signal_number).name


def _announce_cancel(job_id: str, resume: str, log_path: Path) -> Any:
    def announce(signal_number: int | None, count: int) -> None:
        if count == 1:
            from ultron.settings import settings

            if signal_number == signal.SIGHUP:  # no terminal to write to: the log has it all
                divert_output(log_path, stderr=True)
            grace = settings().cancel_grace
            force = "Ctrl-C again" if signal_number == signal.SIGINT else "A signal now"
            err_console.print(
                f"[yellow]cancelling job {escape(job_id)}[/] (by {_cancelled_by(signal_number)})"
                f": running trials get {grace:g} s to stop, then the results so far are "
                f"written. {force} forces the exit.",
                highlight=False,
            )
        else:
            err_console.print(
                f"[red]forced exit[/]; resume with: {escape(resume)}", highlight=False
            )

    return announce


RestartsOption = Annotated[
    int,
    typer.Option(
        min=0,
        max=100,
        help="How many times the job's process is started again (same job id, it resumes) if "
        "it dies of a signal nobody sent it on purpose (SIGKILL, OOM); 0: no supervision.",
    ),
]


@app.command()
def run(
    spec: SpecArg,
    job_id: Annotated[
        str | None,
        typer.Option(help="Resume or name the job with this id (letters, digits, . _ -)."),
    ] = None,
    verbose: VerboseOption = False,
    restarts: RestartsOption = 2,
) -> None:
    """Run an HPO job: a progress bar while it runs (a line per trial when piped), the
    leaderboard at the end. Ctrl-C cancels it (resumable); a second Ctrl-C forces the exit.
    If the job's process dies (SIGKILL, OOM), it is started again with the same job id."""
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    from ultron.api import preflight
    from ultron.paths import check_job_id, new_job_id
    from ultron.secrets import install_redaction
    from ultron.spec.loader import load_spec

    set_verbose(verbose)
    try:
        job = load_spec(spec, check_code=True)
        install_redaction(job)  # nothing this process logs shows the spec's passwords
        job_id = check_job_id(job_id) if job_id is not None else new_job_id(job.name)
        preflight(job)
    except UltronError as exc:
        fail(exc)
    hint = f"ultron run {shlex.quote(str(spec))} --job-id {job_id}"
    run_job(job, job_id, hint=hint, verbose=verbose, restarts=restarts)


def run_job(job: Any, job_id: str, *, hint: str, verbose: bool, restarts: int) -> None:
    """Run ``job`` (checked, its preflight done) as ``ultron run`` and ``ultron resume`` do:
    the header, the job in a supervised child process (:mod:`ultron.cli.supervise`) unless
    ``restarts`` is 0, its progress, and its end. ``hint`` resumes it by hand."""
    from ultron.cli.supervise import supervise
    from ultron.paths import job_results_url, scratch_dir

    log_path = scratch_dir(job_id) / "job.log"
    results_url = job_results_url(job.storage, job_id)
    if restarts > 0:
        code = supervise(job_id, restarts, hint=hint)
        if code is not None:  # the parent: the job's process is done for good
            raise typer.Exit(code=code)
    console.log_path = log_path
    where = f"results: {results_url}\nlog: {log_path}\nresume with: {hint}"
    with logs_to(log_path, verbose=verbose):
        result = _follow_job(job, job_id, hint=hint, where=where, log_path=log_path)
    metric = job.objective.metric
    console.print(_leaderboard(result, metric, job=job))
    console.print(f"[bold green]best {metric}[/]: {result.best_score}")
    console.print(f"[bold green]best configuration[/]: {result.best_config}")
    if result.pareto:  # several objectives: the trade-offs, not one best
        names = [entry.metric for entry in job.objectives or []]
        front = "; ".join(
            f"{t.trial_id}: "
            + ", ".join(f"{n} {t.metrics.get(n, float('nan')):.6g}" for n in names)
            for t in result.pareto
        )
        console.print(f"[bold green]Pareto front[/] ({len(result.pareto)} trials): {escape(front)}")
    console.print(
        f"job {escape(job_id)} {escape(result.status)}"
        + (f" ({escape(result.end_reason)})" if result.end_reason else "")
        + f": {len(result.trials)} trials "
        f"({result.cache_hits} from the score cache); results in {escape(result.results_url)}\n"
        f"log: {escape(str(log_path))}",
        soft_wrap=True,
        highlight=False,
    )


def _header(job: Any, job_id: str, log_path: Path, resume: str) -> Any:
    """A progress listener that prints the job's header at the first event, once."""
    printed = threading.Event()

    def show(event: Any) -> None:
        if printed.is_set():
            return
        printed.set()
        console.print(
            f"job [bold]{escape(job_id)}[/]: {job.num_iterations} trials of "
            f"{escape(job.model)}, strategy {escape(job.strategy)}, {job.parallelism} at a "
            f"time\nlog: {escape(str(log_path))}\nresume with: {escape(resume)}",
            soft_wrap=True,
            highlight=False,
        )
        console.flush()

    return show


def _follow_job(job: Any, job_id: str, *, hint: str, where: str, log_path: Path) -> Any:
    """Run the job in this process with its progress shown; its result, or the command's end."""
    from ultron.api import run as run_in_process
    from ultron.master.cancel import CANCEL
    from ultron.master.progress import ProgressEvent, listening

    metric = job.objective.metric
    CANCEL.listeners.append(_announce_cancel(job_id, hint, log_path))
    try:
        # The header comes with the job's first event, once its spec passed the checks of a
        # resume: a refused run prints only its error, not a resume command that is refused.
        with listening(_header(job, job_id, log_path, hint)):
            if console.is_terminal:
                return _run_with_bar(run_in_process, job, job_id, listening, ProgressEvent)

            def line(event: ProgressEvent) -> None:
                if event.last:
                    console.print(_trial_line(event, metric), soft_wrap=True, highlight=False)
                    console.flush()

            with listening(line):
                return run_in_process(job, job_id=job_id)
    except JobCancelledError as exc:
        done = len(getattr(exc.result, "trials", None) or [])
        err_console.print(
            f"[yellow]cancelled[/] (by {_cancelled_by(exc.signal_number)}): job "
            f"{escape(job_id)} stopped after {done} of {job.num_iterations} trials; the "
            f"running ones resume from their checkpoints.\n{escape(where)}",
            highlight=False,
        )
        raise typer.Exit(code=code_for(exc)) from None
    except (SpecError, JobBusyError) as exc:  # refused before it ran: the job is as it was
        fail(exc)
    except Exception as exc:
        fail(exc, about=f"job {job_id} failed: ", where=where)


@app.command()
def resume(
    job_id: Annotated[str, typer.Argument(help="The job to resume (`ultron jobs` lists them).")],
    redis_url: Annotated[
        str | None,
        typer.Option(help="The Redis the job is in; default REDIS_URL, else the embedded one."),
    ] = None,
    verbose: VerboseOption = False,
    restarts: RestartsOption = 2,
) -> None:
    """Resume an unfinished job (lost, cancelled, failed) from the spec its first run stored:
    no spec file, from any folder. The job is found as `ultron status` finds it."""
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    from ultron.api import preflight, spec_to_resume
    from ultron.cli.admin import shared_redis
    from ultron.paths import check_job_id

    set_verbose(verbose)
    try:
        job_id = check_job_id(job_id)
        with shared_redis(redis_url) as url:
            given = redis_url or os.environ.get("REDIS_URL")
            job = spec_to_resume(job_id, redis_url=url, keep_redis_url=bool(given))
        preflight(job)
    except UltronError as exc:
        fail(exc)
    run_job(job, job_id, hint=f"ultron resume {job_id}", verbose=verbose, restarts=restarts)


def _run_with_bar(run_job: Any, job: Any, job_id: str, listening: Any, event_type: Any) -> Any:
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
    )
    # redirect_stderr=False: stderr is the log file; the bar must not pull it back here.
    with Progress(*columns, console=console, redirect_stderr=False) as bar:
        task = bar.add_task(printable(job.name), total=job.num_iterations, status="starting")

        def show(event: Any) -> None:
            best = f"best {event.best_score:.6g}" if event.best_score is not None else "best -"
            bar.update(task, completed=event.done, status=f"{best} | running {event.running}")

        with listening(show):
            return run_job(job, job_id=job_id)


cache_app = typer.Typer(help="The score cache: scores of configurations already trained.")
app.add_typer(cache_app, name="cache")


@cache_app.command("clear")
def cache_clear(
    redis_url: Annotated[
        str | None,
        typer.Option(help="The Redis holding the cache; default REDIS_URL, else the embedded one."),
    ] = None,
) -> None:
    """Empty the score cache: every later job trains its configurations again. A tenant's
    credentials empty that tenant's cache; the admin's, every tenant's."""
    from ultron.cli.admin import shared_redis
    from ultron.master.score_cache import clear_callers_caches
    from ultron.preflight import mask_url
    from ultron.redis.client import connect

    with shared_redis(redis_url) as url:
        removed = clear_callers_caches(connect(url))
    console.print(
        f"removed {removed} score-cache key(s) from {escape(mask_url(url))}", highlight=False
    )


@app.command()
def serve(name: Annotated[str, typer.Option(help="Deployment name.")] = "hpo-job") -> None:
    """Serve the hpo-job flow so jobs can be triggered from the Prefect UI.

    A crashed run of it is scheduled again, up to 3 times (ultron/deploy/restarts.py).
    """
    from ultron.deploy.restarts import ensure_restart_automation
    from ultron.flows.hpo_job import hpo_job

    ensure_restart_automation()
    hpo_job.serve(name=name)


from ultron.cli.admin import register  # noqa: E402  (ultron limits, ultron jobs)

register(app)
from ultron.cli.jobs import register as register_jobs  # noqa: E402

register_jobs(app)  # ultron submit, status, cancel, --version
from ultron.cli.experiment import register as register_experiment  # noqa: E402

register_experiment(app)  # ultron experiment, ultron report
from ultron.cli.infra import register as register_infra  # noqa: E402

register_infra(app)  # ultron infra render
from ultron.cli.server import register as register_server  # noqa: E402

register_server(app)  # ultron server start, stop, status
from ultron.cli.tenants import register as register_tenants  # noqa: E402

register_tenants(app)  # ultron tenants add, list, rotate, remove
from ultron.cli.logs import register as register_logs  # noqa: E402

register_logs(app)  # ultron logs


def main() -> None:
    """The ``ultron`` command (``[project.scripts]``): the CLI, in the command's own process.

    An error no command turned into its message (a Redis that went away mid-command, a bug)
    still ends it with one line and the exit status of its type (:mod:`ultron.cli.exits`).
    """
    try:
        app(prog_name="ultron")
    except Exception as exc:
        try:
            fail(exc)
        except typer.Exit as done:
            sys.exit(done.exit_code)
    finally:
        _exit_without_collecting()


def _exit_without_collecting() -> None:
    """Keep the interpreter's exit from collecting the whole heap again and again.

    A job's process holds Prefect, Dask, pydantic and numpy's objects; the interpreter's
    teardown runs the cycle collector over all of them several times: 1-2 s after every job on
    2 cores, more than a cached job's own work. Frozen (Python's ``gc.freeze``), they are left
    to the process's end; everything else happens as before: the exit handlers (Prefect's log
    and event workers send what they hold, logging flushes its files) and the deallocation of
    what is not in a cycle. Nothing of ours needs the collector to be closed (files and
    sockets are closed by their ``with`` blocks and owners).
    """
    gc.freeze()


if __name__ == "__main__":
    main()
