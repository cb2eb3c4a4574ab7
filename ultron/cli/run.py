"""``ultron run SPEC`` and ``ultron resume JOB``: run a job from the terminal.

The command checks the job (a refused one prints only its error and exits 2), then runs it in
a child process that comes back if it dies (:mod:`ultron.cli.supervise`); with ``--restarts
0``, in the command's own process. What the job shows while it runs is
:mod:`ultron.cli.follow`'s.

The child is forked once the spec is checked, not before: the checks are almost all imports
(the spec's models, the preflight's modules) that the job needs too, and a child forked first
imported them again itself (0.3 s more CPU a command, and no shorter: RESULTS.md, issue 30).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from ultron.cli.exits import VerboseOption, fail, set_verbose
from ultron.errors import UltronError

__all__ = ["RestartsOption", "SpecArg", "register", "resume", "run", "run_job"]

SpecArg = Annotated[Path, typer.Argument(help="The job spec, YAML or JSON.")]

RestartsOption = Annotated[
    int,
    typer.Option(
        min=0,
        max=100,
        help="How many times the job's process is started again (same job id, it resumes) if "
        "it dies of a signal nobody sent it on purpose (SIGKILL, OOM); 0: no supervision.",
    ),
]

# A checked job: the spec, its id and the command that resumes it by hand.
Checked = tuple[Any, str, str]


def register(app: typer.Typer) -> None:
    """Adds ``ultron run`` and ``ultron resume`` to the ``ultron`` command."""
    app.command()(run)
    app.command()(resume)


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

    def check() -> Checked:
        from ultron.api import preflight
        from ultron.paths import check_job_id, new_job_id
        from ultron.secrets import install_redaction
        from ultron.spec.loader import load_spec

        job = load_spec(spec, check_code=True)
        install_redaction(job)  # nothing this process logs shows the spec's passwords
        checked_id = check_job_id(job_id) if job_id is not None else new_job_id(job.name)
        preflight(job)
        return job, checked_id, f"ultron run {shlex.quote(str(spec))} --job-id {checked_id}"

    start_job(check, verbose=verbose, restarts=restarts)


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

    def check() -> Checked:
        from ultron.api import preflight, spec_to_resume
        from ultron.cli.admin import shared_redis
        from ultron.paths import check_job_id

        checked_id = check_job_id(job_id)
        with shared_redis(redis_url) as url:
            given = redis_url or os.environ.get("REDIS_URL")
            job = spec_to_resume(checked_id, redis_url=url, keep_redis_url=bool(given))
        preflight(job)
        return job, checked_id, f"ultron resume {checked_id}"

    start_job(check, verbose=verbose, restarts=restarts)


def start_job(check: Callable[[], Checked], *, verbose: bool, restarts: int) -> None:
    """Check the job with ``check`` (an :class:`~ultron.errors.UltronError` ends the command
    with its message, exit status 2 for a bad spec) and run it (:func:`run_job`)."""
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    set_verbose(verbose)
    try:
        job, job_id, hint = check()
    except UltronError as exc:
        fail(exc)
    run_job(job, job_id, hint=hint, verbose=verbose, restarts=restarts)


def run_job(job: Any, job_id: str, *, hint: str, verbose: bool, restarts: int) -> None:
    """Run ``job`` (checked, its preflight done) as ``ultron run`` and ``ultron resume`` do:
    the job in a supervised child process (:mod:`ultron.cli.supervise`) unless ``restarts``
    is 0, its progress, and its end. ``hint`` resumes it by hand."""
    from ultron.cli.supervise import supervise

    if restarts > 0:
        code = supervise(job_id, restarts, hint=hint)
        if code is not None:  # the parent: the job's process is done for good
            raise typer.Exit(code=code)
    _run_here(job, job_id, hint=hint, verbose=verbose)


def _run_here(job: Any, job_id: str, *, hint: str, verbose: bool) -> None:
    """Run the job in this process, its progress shown, and print its end."""
    from ultron.cli.follow import console, follow_job, show_result
    from ultron.cli.output import logs_to
    from ultron.paths import job_results_url, scratch_dir

    log_path = scratch_dir(job_id) / "job.log"
    results_url = job_results_url(job.storage, job_id)
    console.log_path = log_path
    where = f"results: {results_url}\nlog: {log_path}\nresume with: {hint}"
    with logs_to(log_path, verbose=verbose):
        result = follow_job(job, job_id, hint=hint, where=where, log_path=log_path)
    show_result(job, job_id, result, log_path)
