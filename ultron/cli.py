"""The ``ultron`` command line: ``ultron run SPEC``, ``ultron validate SPEC``, ``ultron serve``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ultron.errors import SpecError, UltronError

app = typer.Typer(
    help="Ultron-AutoML: distributed hyper-parameter optimization.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
console = Console()
# soft_wrap: an error is printed whole, its lines as they are, at any terminal width (rich would
# otherwise break them at the width, COLUMNS or 80 without a terminal, mid-sentence).
err_console = Console(stderr=True, soft_wrap=True)

SpecArg = Annotated[Path, typer.Argument(help="The job spec, YAML or JSON.")]


def _fail(exc: Exception) -> None:
    # escape: an error quotes user input, and "[lr]" or "[/tmp]" there is text, not markup.
    err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
    raise typer.Exit(code=2)


@app.command()
def validate(spec: SpecArg) -> None:
    """Check a job spec; print every problem and exit non-zero if there is one."""
    from ultron.spec.loader import load_spec

    try:
        job = load_spec(spec)
    except SpecError as exc:
        _fail(exc)
    console.print(
        f"[green]ok[/]: {escape(str(spec))} is a valid job spec ({escape(job.name)}: "
        f"{job.num_iterations} trials of {job.model}, strategy {escape(job.strategy)})",
        soft_wrap=True,
    )


def _leaderboard(result: Any, metric: str, top: int = 10) -> Table:
    from ultron.master.results import leaderboard

    board = leaderboard(result.trials, result.direction)[:top]
    table = Table(title=f"Leaderboard (top {len(board)} of {len(result.trials)} trials)")
    for name in ("rank", "trial", metric, "status", "hyperparameters"):
        table.add_column(name)
    for rank, t in enumerate(board, 1):
        table.add_row(
            str(rank),
            t.trial_id,
            f"{t.score:.6g}",
            str(t.status),
            ", ".join(f"{k}={v}" for k, v in t.hyperparameters.items()),
        )
    return table


@app.command()
def run(
    spec: SpecArg,
    job_id: Annotated[str | None, typer.Option(help="Resume or name the job with this id.")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show Prefect logs.")] = False,
) -> None:
    """Run an HPO job: a progress bar while it runs, the leaderboard at the end."""
    if not verbose:  # the progress bar says what matters; -v shows the logs
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
        os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    from ultron.api import run as run_job
    from ultron.master.progress import ProgressEvent, listening
    from ultron.spec.loader import load_spec

    try:
        job = load_spec(spec)
    except SpecError as exc:
        _fail(exc)
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as bar:
        task = bar.add_task(job.name, total=job.num_iterations, status="starting")

        def show(event: ProgressEvent) -> None:
            best = f"best {event.best_score:.6g}" if event.best_score is not None else "best -"
            bar.update(task, completed=event.done, status=f"{best} | running {event.running}")

        try:
            with listening(show):
                result = run_job(job, job_id=job_id)
        except UltronError as exc:
            _fail(exc)
    metric = job.objective.metric
    console.print(_leaderboard(result, metric))
    console.print(f"[bold green]best {metric}[/]: {result.best_score}")
    console.print(f"[bold green]best configuration[/]: {result.best_config}")
    console.print(
        f"trials: {len(result.trials)} ({result.cache_hits} from the score cache); "
        f"results in {result.results_url}"
    )


@app.command()
def serve(name: Annotated[str, typer.Option(help="Deployment name.")] = "hpo-job") -> None:
    """Serve the hpo-job flow so jobs can be triggered from the Prefect UI."""
    from ultron.flows.hpo_job import hpo_job

    hpo_job.serve(name=name)


if __name__ == "__main__":
    app()
