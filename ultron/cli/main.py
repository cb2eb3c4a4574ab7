"""The ``ultron`` command line: the typer app, ``ultron validate SPEC``, ``ultron cache clear``,
``ultron serve``, and the command's entry point (:func:`main`).

Each other family of commands is in a module of its own that registers it here: ``ultron run``
and ``ultron resume`` in :mod:`ultron.cli.run` (the job in a child process that comes back if
it dies, :mod:`ultron.cli.supervise`); the admin commands, ``ultron limits`` and ``ultron
jobs``, in :mod:`ultron.cli.admin`; ``ultron submit``, ``ultron status``, ``ultron cancel`` and
``ultron --version`` in :mod:`ultron.cli.jobs`; ``ultron logs`` in :mod:`ultron.cli.logs`.
"""

from __future__ import annotations

import gc
import sys
from typing import Annotated

import typer
from rich.markup import escape

from ultron.cli.exits import fail
from ultron.cli.output import JobConsole
from ultron.cli.run import SpecArg
from ultron.cli.run import register as register_run
from ultron.errors import SpecError, printable

app = typer.Typer(
    help="Ultron-AutoML: distributed hyper-parameter optimization.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
console = JobConsole()  # a reader that goes away never ends the command (ultron.cli.output)


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


register_run(app)  # ultron run, resume

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
