"""The platform team's commands: ``ultron limits`` shows and sets the compute-unit limits, and
``ultron jobs`` lists every job the Redis knows, newest first, with its state (the units it
holds or waits for) and best score.

Every command finds Redis as ``ultron cache clear`` does: ``--redis-url``, else ``REDIS_URL``,
else the embedded server of this machine (started for the command if none runs). The limits
live in Redis (:mod:`ultron.limiter.resource_limiter`): a job reads them when it starts
waiting, so a change applies to the jobs that start waiting after it; jobs holding units keep them.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ultron.cli.exits import ExitCode, fail
from ultron.errors import ConfigIssue, UltronError

if TYPE_CHECKING:
    from ultron.limiter.resource_limiter import ResourceLimiter

__all__ = ["jobs", "limits_app", "register"]


def _out() -> Console:
    """The terminal, measured when a command prints (COLUMNS may differ from import time)."""
    return Console()


limits_app = typer.Typer(
    help="The compute-unit limits: global and per tenant (shown without a command)."
)

RedisUrl = Annotated[
    str | None,
    typer.Option(help="The Redis the jobs share; default REDIS_URL, else the embedded one."),
]
TenantOption = Annotated[str | None, typer.Option(help="Only this tenant.")]


def register(app: typer.Typer) -> None:
    """Adds ``ultron limits`` and ``ultron jobs`` to the ``ultron`` command."""
    app.add_typer(limits_app, name="limits")
    app.command("jobs")(jobs)


@contextlib.contextmanager
def shared_redis(redis_url: str | None) -> Iterator[str]:
    """The URL of the Redis the jobs share: ``--redis-url``, else ``REDIS_URL`` (each checked
    in seconds), else this machine's embedded server, used for the block. Bad ones end the
    command with one error."""
    from ultron.paths import ultron_home
    from ultron.preflight import check_redis
    from ultron.servers.home_redis import start_redis

    url = redis_url or os.environ.get("REDIS_URL")
    try:
        if url:
            check_redis(url, field="--redis-url" if redis_url else "REDIS_URL")
        else:
            url = start_redis(ultron_home()).url  # up until `ultron server stop`
    except UltronError as exc:
        fail(exc)
    yield url


@contextlib.contextmanager
def _limiter(redis_url: str | None) -> Iterator[ResourceLimiter]:
    """A limiter of the shared Redis, with the global limit stored there (or the default)."""
    from ultron.limiter.limits import read_max_units
    from ultron.limiter.resource_limiter import ResourceLimiter
    from ultron.redis.client import connect
    from ultron.settings import settings

    with shared_redis(redis_url) as url:
        client = connect(url)
        try:
            max_units = read_max_units(client, default=settings().max_units)
        except UltronError as exc:
            fail(exc, code=ExitCode.BAD_INPUT)  # a limit given or stored
        yield ResourceLimiter(client, max_units=max_units)


def _units(value: float) -> str:
    """Units as a person reads them: ``3``, ``0.75``; a sum of fractions shows no float noise
    (0.1 + 0.2 is ``0.3``)."""
    return format(round(value, 9), ".12g")


def _when(since: float) -> str:
    stamp = datetime.fromtimestamp(since, UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"{stamp} UTC ({max(0.0, time.time() - since):.0f}s ago)"


def job_state(job: Any) -> str:
    """A job's state as the terminal shows it: ``lost`` says since when its master was last
    heard from (its last heartbeat, or its last change if it never beat)."""
    if job.status != "lost":
        return str(job.status)
    last = job.heartbeat or job.updated
    return f"lost (since {_when(last)})" if last else "lost"


@limits_app.callback(invoke_without_command=True)
def limits(ctx: typer.Context, redis_url: RedisUrl = None) -> None:
    """Show the global and per-tenant limits, the units in use and the jobs waiting."""
    if ctx.invoked_subcommand is None:
        show(redis_url)


@limits_app.command("show")
def show(redis_url: RedisUrl = None) -> None:
    """Show the global and per-tenant limits, the units in use and the jobs waiting."""
    from ultron.limiter.limits import tenant_limits
    from ultron.redis import keys

    with _limiter(redis_url) as limiter:
        try:
            per_tenant = tenant_limits(limiter.client)
        except UltronError as exc:
            fail(exc, code=ExitCode.BAD_INPUT)  # a limit given or stored
        stored = limiter.client.exists(keys.limiter("max_units")) > 0
        holders, waiters = limiter.holders().values(), limiter.waiters()
    in_use = _units(sum(h.units for h in holders))
    origin = "set in Redis" if stored else "the default, ULTRON_MAX_UNITS"
    _out().print(
        f"global: max_units {limiter.max_units} ({origin}); {in_use} in use; "
        f"{len(waiters)} job(s) waiting",
        highlight=False,
    )
    table = Table(title="Tenants")
    for column in ("tenant", "max units", "in use", "holding", "waiting"):
        table.add_column(column)
    tenants = set(per_tenant) | {h.tenant for h in holders} | {w.tenant for w in waiters}
    for tenant in sorted(tenants):
        mine = [h for h in holders if h.tenant == tenant]
        table.add_row(
            escape(tenant),
            str(per_tenant.get(tenant, "none")),
            _units(sum(h.units for h in mine)),
            f"{len(mine)} job(s)",
            f"{sum(w.tenant == tenant for w in waiters)} job(s)",
        )
    _out().print(table)


@limits_app.command("set")
def set_limit(
    max_units: Annotated[
        int | None, typer.Option("--max-units", help="The limit in units (1 or more).")
    ] = None,
    tenant: Annotated[
        str | None, typer.Option(help="Set this tenant's limit instead of the global one.")
    ] = None,
    unset: Annotated[
        bool, typer.Option("--unset", help="Remove the limit (global: back to the default).")
    ] = False,
    redis_url: RedisUrl = None,
) -> None:
    """Set (or, with --unset, remove) the global limit or a tenant's limit."""
    from ultron.limiter.limits import set_max_units, set_tenant_max_units
    from ultron.redis.tenants import caller_tenant

    if (max_units is None) == (not unset):
        rule = "give exactly one of --max-units N and --unset"
        fix = "e.g. `ultron limits set --tenant team-a --max-units 8`"
        fail(str(ConfigIssue("--max-units", max_units, rule, fix)), code=ExitCode.BAD_INPUT)
    what = f"max_units of tenant {tenant!r}" if tenant is not None else "the global max_units"
    with _limiter(redis_url) as limiter:
        if caller_tenant(limiter.client) is not None:
            fail(
                "the limits are the admin's to set, and these Redis credentials are a "
                "tenant's. Fix: ask the platform team, or use the admin's credentials"
            )
        try:
            if tenant is None:
                set_max_units(limiter.client, max_units)
            else:
                set_tenant_max_units(limiter.client, tenant, max_units)
        except UltronError as exc:
            fail(exc, code=ExitCode.BAD_INPUT)  # a limit given or stored
    done = "removed" if unset else f"set to {max_units}"
    _out().print(f"{escape(what)} {done}; jobs that start waiting now apply it", highlight=False)


def jobs(tenant: TenantOption = None, redis_url: RedisUrl = None) -> None:
    """Every job the Redis knows, newest first (by when it started, or began to hold or wait
    for units): its state (queued, preparing, running, lost, completed, failed, cancelled;
    holding units, or its place in the queue), why it ended, tenant, trials by status, the
    parallelism asked for it, units, best score, since when. A tenant's Redis credentials see
    that tenant's jobs only."""
    from ultron.master.overview import overview, visible_jobs
    from ultron.redis.tenants import caller_tenant

    with _limiter(redis_url) as limiter:
        client = limiter.client
        holders, waiters = limiter.holders(), limiter.waiters()
        known = [overview(client, job_id, namespace=ns) for ns, job_id in visible_jobs(client)]
        mine = caller_tenant(client)
    if mine is not None:  # a tenant sees its own jobs only, in the limiter's records too
        holders = {job_id: lease for job_id, lease in holders.items() if lease.tenant == mine}
        waiters = [waiting for waiting in waiters if waiting.tenant == mine]
    rows = {job.job_id: (job.started, _job_cells(job, holders.get(job.job_id))) for job in known}
    for job_id, lease in holders.items():
        if job_id not in rows:  # units held by a job with no record (yet)
            cells = {"job": job_id, "tenant": lease.tenant, "state": "holding"}
            rows[job_id] = (lease.since, {**cells, "units": _units(lease.units)})
    places: dict[str, int] = {}
    for waiting in waiters:
        places[waiting.tenant] = places.get(waiting.tenant, 0) + 1
        cells = {
            **rows.get(waiting.job_id, (0.0, {}))[1],
            "job": waiting.job_id,
            "tenant": waiting.tenant,
            "state": f"queued (#{places[waiting.tenant]} of its tenant)",
            "units": _units(waiting.units),
            "best": "-",
        }
        rows[waiting.job_id] = (waiting.since, cells)
    shown = [
        (since, cells)
        for since, cells in sorted(rows.values(), key=lambda r: -r[0])
        if tenant in (None, cells["tenant"])
    ]
    if not shown:
        whose = "" if tenant is None else f" of tenant {tenant!r}"
        _out().print(f"no job{escape(whose)} is known to this Redis", highlight=False)
        return
    out = _out()
    out.print(_jobs_table(out, shown, "Jobs" if tenant is None else f"Jobs of tenant {tenant}"))


# The columns of `ultron jobs`, in order; a cell a row lacks shows "-".
_JOB_COLUMNS = ("job", "tenant", "state", "ended", "trials", "parallelism", "units", "best")
# A failed job's reason holds its first error whole: the table shows its start,
# `ultron status JOB` all of it.
_REASON_CHARS = 60


def _job_cells(job: Any, held: Any | None) -> dict[str, str]:
    """One job's cells, from its record (:class:`~ultron.master.overview.JobOverview`) and the
    lease it holds, if any."""
    from ultron.master.job_state import counts_text

    state = job_state(job)
    reason = job.end_reason or "-"
    if len(reason) > _REASON_CHARS:  # cut at a space: no word shows half of itself
        reason = f"{reason[: _REASON_CHARS - 1].rsplit(' ', 1)[0]} …"
    return {
        "job": job.job_id,
        "tenant": job.tenant,
        "state": f"{state} (holding)" if held and job.status == "running" else state,
        "ended": reason,
        "trials": counts_text(job.trials) or "-",
        "parallelism": "-" if job.parallelism is None else str(job.parallelism),
        "units": _units(held.units) if held else "-",
        "best": f"{job.metric} {job.best_score:.6g}" if job.best_score is not None else "-",
    }


def _jobs_table(console: Console, shown: list[tuple[float, dict[str, str]]], title: str) -> Table:
    """The rows as a table of a column per field where it fits the terminal with every word
    whole (long cells wrap at their spaces), else (a narrow terminal) as a field and its value
    per line, a section per job. A job id is never broken: the other commands take it."""
    columns = (*_JOB_COLUMNS, "since")
    rows = [
        [*(cells.get(column, "-") for column in _JOB_COLUMNS), _when(since) if since else "-"]
        for since, cells in shown
    ]
    texts = [[header, *(row[n] for row in rows)] for n, header in enumerate(columns)]
    natural = [max(map(cell_len, text)) for text in texts]
    words = [max(cell_len(word) for cell in text for word in cell.split()) for text in texts]
    widths = _fit(
        natural,
        [natural[0], *words[1:]],  # a job id whole, the rest their longest word
        console.width - (3 * len(columns) + 1),  # a border and a space each side per column
    )
    table = Table(title=escape(title), show_header=widths is not None)
    if widths is not None:
        for column, width in zip(columns, widths, strict=True):
            table.add_column(column, width=width, overflow="fold")
        for row in rows:
            table.add_row(*map(escape, row))
    else:
        table.add_column("field", no_wrap=True)
        table.add_column("value", overflow="fold")
        for row in rows:
            for n, (column, value) in enumerate(zip(columns, row, strict=True)):
                table.add_row(column, escape(value), end_section=n == len(columns) - 1)
    if any(row[_JOB_COLUMNS.index("ended")].endswith(" …") for row in rows):
        table.caption = "…: cut short; `ultron status JOB` shows why the job ended in full"
    return table


def _fit(widths: list[int], floors: list[int], room: int) -> list[int] | None:
    """Column widths that fit in ``room`` cells: the widest narrowed first, none below its
    floor; ``None`` when the floors do not fit."""
    if sum(floors) > room:
        return None
    widths = list(widths)
    for _ in range(sum(widths) - room):
        widest = max(
            (n for n, width in enumerate(widths) if width > floors[n]), key=widths.__getitem__
        )
        widths[widest] -= 1
    return widths
