"""``ultron run``'s view of a job it runs in this process: the header once the job is accepted,
a progress bar in a terminal (a line per finished trial when piped), what a cancel says, and
the leaderboard at the end. :mod:`ultron.cli.run` starts the job; this module shows it."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ultron.cli.exits import code_for, err_console, fail
from ultron.cli.output import JobConsole, divert_output
from ultron.errors import JobBusyError, JobCancelledError, SpecError, printable

__all__ = ["console", "follow_job", "show_result"]

console = JobConsole()  # a reader that goes away never ends the job (ultron.cli.output)


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


def follow_job(job: Any, job_id: str, *, hint: str, where: str, log_path: Path) -> Any:
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


def show_result(job: Any, job_id: str, result: Any, log_path: Path) -> None:
    """The job's end: its leaderboard, best score and configuration (or Pareto front), and
    where its results and log are."""
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
