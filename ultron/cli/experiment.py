"""``ultron experiment SPEC --seeds N``: seeded jobs per strategy and their spread; and
``ultron report JOB``: the HTML report of a finished job."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ultron.cli.admin import RedisUrl, shared_redis
from ultron.cli.exits import ExitCode, VerboseOption, err_console, fail, set_verbose
from ultron.cli.output import JobConsole, logs_to
from ultron.errors import SpecError, UltronError

__all__ = ["experiment", "register", "report"]

console = JobConsole()


def register(app: typer.Typer) -> None:
    """Adds ``ultron experiment`` and ``ultron report`` to the ``ultron`` command."""
    app.command("experiment")(experiment)
    app.command("report")(report)


def _names(text: str | None) -> list[str] | None:
    return [name.strip() for name in text.split(",") if name.strip()] if text else None


def experiment(
    spec: Annotated[Path, typer.Argument(help="The job spec every job starts from.")],
    seeds: Annotated[
        int, typer.Option(min=1, help="Jobs per strategy (seeds spec.seed, +1, ...).")
    ] = 3,
    strategies: Annotated[
        str | None,
        typer.Option(help="Strategies to compare, comma-separated (default: the spec's)."),
    ] = None,
    stoppers: Annotated[
        str | None,
        typer.Option(
            help="Early stoppers to compare, comma-separated; none for none (default: the spec's)."
        ),
    ] = None,
    experiment_id: Annotated[
        str | None, typer.Option(help="A stable id; the id of an unfinished experiment resumes it.")
    ] = None,
    storage: Annotated[
        str | None, typer.Option(help="Where results go (default: the spec's).")
    ] = None,
    verbose: VerboseOption = False,
) -> None:
    """Run SEEDS jobs per strategy and write the table of best scores (mean, standard
    deviation, every seed), the plots and an HTML report. Prefect's and Dask's logs go to the
    experiment's log file, as with ``ultron run``."""
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    set_verbose(verbose)
    from ultron.api import prefect_defaults
    from ultron.flows.experiment import experiment as experiment_flow
    from ultron.flows.experiment import plan_variants
    from ultron.paths import check_job_id, new_job_id, scratch_dir
    from ultron.reporting.plots import require_matplotlib
    from ultron.secrets import conceal
    from ultron.servers.prefect import prefect_api
    from ultron.spec.loader import load_spec

    try:
        require_matplotlib()
        job = load_spec(spec, check_code=True)
        if storage is not None:
            job = job.model_copy(update={"storage": storage})
        plan_variants(job, _names(strategies), _names(stoppers))  # a misspelled name: now
        experiment_id = check_job_id(experiment_id or new_job_id(f"{job.name}-exp"))
    except UltronError as exc:
        fail(exc)
    log_path = scratch_dir(experiment_id) / "experiment.log"
    console.log_path = log_path
    err_console.print(
        f"experiment {escape(experiment_id)}\nlog: {escape(str(log_path))}\n"
        f"resume with --experiment-id {escape(experiment_id)}",
        highlight=False,
    )
    with logs_to(log_path, verbose=verbose):
        try:
            prefect_defaults()
            with prefect_api():  # the machine's shared Prefect server, as ultron run uses
                out = experiment_flow(
                    conceal(job),
                    seeds=seeds,
                    strategies=_names(strategies),
                    stoppers=_names(stoppers),
                    experiment_id=experiment_id,
                )
        except SpecError as exc:
            fail(exc)
        except Exception as exc:
            where = f"log: {log_path}\nresume with --experiment-id {experiment_id}"
            fail(exc, about=f"experiment {experiment_id} failed: ", where=where)
    table = Table("strategy", "seeds", "mean", "std", title=f"experiment {out['experiment_id']}")
    for row in out["summary"]:
        table.add_row(row["strategy"], str(row["seeds"]), f"{row['mean']:.6g}", f"{row['std']:.6g}")
    console.print(table)
    console.print(f"report: {escape(out['files']['report.html'])}", highlight=False, soft_wrap=True)


def report(
    job_id: Annotated[str, typer.Argument(help="The job's id.")],
    storage: Annotated[
        str | None,
        typer.Option(help="The job's storage; default: where the job's record says it wrote."),
    ] = None,
    redis_url: RedisUrl = None,
) -> None:
    """Write the HTML report of a finished job beside its result files and print its path.

    The job's results are found where its record in the shared Redis says they were written
    (``ultron jobs`` lists the jobs it knows), or under ``--storage``.
    """
    from ultron.paths import job_results_url
    from ultron.reporting import read_job, write_job_report

    try:
        url = job_results_url(storage, job_id) if storage else _recorded_results(job_id, redis_url)
        job = read_job(url)
    except SpecError as exc:
        fail(exc)
    except UltronError as exc:  # no results there: the job id or the storage is wrong
        fail(exc, code=ExitCode.BAD_INPUT)
    try:
        path = write_job_report(job, title=job_id)
    except UltronError as exc:
        fail(exc)
    Console().print(f"report: {escape(path)}", highlight=False, soft_wrap=True)


def _recorded_results(job_id: str, redis_url: str | None) -> str:
    """Where the job's record in the shared Redis says its results are; a job the Redis does
    not know is bad input (exit 2, as for ``ultron status``)."""
    from ultron.cli.jobs import find_job_or_fail
    from ultron.master.trial_logs import results_location
    from ultron.paths import check_job_id
    from ultron.redis.client import connect

    with shared_redis(redis_url) as url:
        client, job_id = connect(url), check_job_id(job_id)
        # The caller's job, in its tenant's namespace (another tenant's is not known, and
        # answers as an id nobody used: never a read of a namespace it may not reach).
        namespace = find_job_or_fail(client, job_id)
        return results_location(client, job_id, namespace=namespace)
