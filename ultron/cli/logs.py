"""``ultron logs JOB [TRIAL] [-f]``: a job's trial logs, from any machine that reaches the job's
Redis and its storage.

The workers keep each trial's stdout and stderr, secrets masked, in
``<storage>/<job>/logs/<trial>.log`` while it runs (:mod:`ultron.worker.trial_log`). With a
trial, the command prints its log, and with ``-f`` goes on printing what the trial adds until
it has finished (as ``kubectl logs -f`` follows a pod). Without one, it lists the trials that
have a log, with their state and where the log is.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ultron.cli.admin import RedisUrl, shared_redis
from ultron.cli.exits import ExitCode, err_console, fail
from ultron.errors import UltronError

__all__ = ["logs", "register"]


def register(app: typer.Typer) -> None:
    """Adds ``ultron logs`` to the ``ultron`` command."""
    app.command("logs")(logs)


def _write(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def logs(
    job_id: Annotated[str, typer.Argument(help="The job (`ultron jobs` lists them).")],
    trial_id: Annotated[
        str | None,
        typer.Argument(help="The trial; without it, the trials with a log and their state."),
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Go on printing until the trial has finished.")
    ] = False,
    storage: Annotated[
        str | None,
        typer.Option(help="The job's storage, as in its spec; default: where the job wrote."),
    ] = None,
    redis_url: RedisUrl = None,
) -> None:
    """Print a trial's output (stdout and stderr, secrets masked) from the job's storage; with
    -f, follow it until the trial has finished. Without TRIAL, list the trials with a log."""
    from ultron.cli.jobs import find_job_or_fail
    from ultron.master.trial_logs import (
        PENDING,
        follow_log,
        logged_trials,
        read_log,
        results_location,
        trial_state,
    )
    from ultron.paths import check_job_id, check_trial_id, job_results_url, trial_log_url
    from ultron.redis.client import connect

    try:
        check_job_id(job_id)
        if trial_id is not None:
            check_trial_id(trial_id)
        with shared_redis(redis_url) as url:
            client = connect(url)
            ns = find_job_or_fail(client, job_id)  # the caller's job, else "not known"
            where = (
                job_results_url(storage, job_id)
                if storage
                else results_location(client, job_id, namespace=ns)
            )
            if trial_id is None:
                if follow:
                    fail("-f follows one trial: name it, `ultron logs JOB TRIAL -f`")
                states = {
                    t: trial_state(client, job_id, t, namespace=ns) for t in logged_trials(where)
                }
                _list(job_id, where, states)
                return
            log = trial_log_url(where, trial_id)
            if (
                not read_log(log, 0)
                and trial_state(client, job_id, trial_id, namespace=ns) == PENDING
            ):
                fail(
                    f"trial {trial_id} of job {job_id} has no log at {log} and is not running. "
                    f"Fix: `ultron logs {job_id}` lists the trials with a log"
                )
            state = follow_log(client, job_id, trial_id, where, _write, follow=follow, namespace=ns)
    except KeyboardInterrupt:
        raise typer.Exit(code=int(ExitCode.CANCELLED_SIGINT)) from None
    except UltronError as exc:
        fail(exc)
    if follow:
        err_console.print(
            f"trial {escape(trial_id)}: {escape(state)}", style="dim", highlight=False
        )


def _list(job_id: str, where: str, states: dict[str, str]) -> None:
    out = Console(soft_wrap=True)
    if not states:
        out.print(
            f"job {escape(job_id)} has no trial log (yet) in {escape(where)}/logs", highlight=False
        )
        return
    table = Table(title=f"trial logs of job {escape(job_id)} in {escape(where)}/logs")
    for column in ("trial", "state"):
        table.add_column(column)
    for trial, state in states.items():
        table.add_row(escape(trial), escape(state))
    out.print(table)
    out.print(f"show one: ultron logs {escape(job_id)} TRIAL [-f]", highlight=False)
