"""How every ``ultron`` command ends: one error line, and an exit status from one table.

=====  =====================  ==========================================================
Code   Name                   When
=====  =====================  ==========================================================
0      ``DONE``               the command did what it was asked (a job completed)
1      ``JOB_FAILED``         a job (or a report of one) failed: too many failed trials,
                              no units in time, a code base that does not install, a bug
2      ``BAD_INPUT``          the input is wrong and nothing ran: a spec, an option, a
                              job id, an ``ULTRON_*`` variable (:class:`SpecError`)
3      ``UNREACHABLE``        a service did not answer: Redis, the storage, the Prefect
                              server (:class:`ServiceUnreachableError`, or a connection
                              error of Redis, of the network or of Prefect's client)
4      ``BUSY``               the job runs in another live process (its master holds the
                              job's lease, :class:`JobBusyError`); nothing ran
129    ``CANCELLED_SIGHUP``   the job was cancelled by SIGHUP (its terminal closed: an SSH
                              session ended); it can resume
130    ``CANCELLED_SIGINT``   the job was cancelled by Ctrl-C (SIGINT); it can resume
143    ``CANCELLED_SIGTERM``  the job was cancelled by SIGTERM, or by ``ultron cancel`` (a
                              request from elsewhere, as Prefect's cancel sends SIGTERM); it
                              can resume
=====  =====================  ==========================================================

An error is mapped to its code by its type (:func:`code_for`). :func:`fail` prints one line
``error: ...`` on stderr, with no traceback unless the command ran with ``-v``/``--verbose``
(``ultron -v limits``, ``ultron run -v``), and exits with that code.
"""

from __future__ import annotations

import signal
import traceback
from enum import IntEnum
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from ultron.errors import (
    JobBusyError,
    JobCancelledError,
    ServiceUnreachableError,
    SpecError,
    UltronError,
    UsageError,
    printable,
)

__all__ = ["ExitCode", "VerboseOption", "code_for", "fail", "set_verbose"]

VerboseOption = Annotated[
    bool, typer.Option("--verbose", "-v", help="Show Prefect's and Dask's logs here too.")
]
"""``--verbose``/``-v`` of the commands that run jobs (their logs go to the job's log file)."""

# soft_wrap: an error is printed whole, its lines as they are, at any terminal width (rich would
# otherwise break them at the width, COLUMNS or 80 without a terminal, mid-sentence).
err_console = Console(stderr=True, soft_wrap=True)


class ExitCode(IntEnum):
    """The exit status of an ``ultron`` command (the table of this module)."""

    DONE = 0
    JOB_FAILED = 1
    BAD_INPUT = 2
    UNREACHABLE = 3
    BUSY = 4
    CANCELLED_SIGHUP = 128 + signal.SIGHUP
    CANCELLED_SIGINT = 128 + signal.SIGINT
    CANCELLED_SIGTERM = 128 + signal.SIGTERM


class _Verbose:
    on = False


def set_verbose(on: bool) -> None:
    """Show the traceback of an error that ends a command (``-v``)."""
    _Verbose.on = _Verbose.on or on


def _unreachable_types() -> tuple[type[BaseException], ...]:
    """Connection errors of the clients ultron uses; imported lazily (the CLI starts fast)."""
    import httpx
    import redis

    return (
        ServiceUnreachableError,
        redis.ConnectionError,
        redis.TimeoutError,
        httpx.TransportError,
    )


# By the signal that cancelled the job; no signal (``ultron cancel``) and any other: SIGTERM's.
_CANCELLED: dict[int | None, ExitCode] = {
    signal.SIGHUP: ExitCode.CANCELLED_SIGHUP,
    signal.SIGINT: ExitCode.CANCELLED_SIGINT,
    signal.SIGTERM: ExitCode.CANCELLED_SIGTERM,
}


def code_for(exc: BaseException) -> ExitCode:
    """The exit status an error ends a command with, by its type.

    Example:
        >>> from ultron.errors import ConfigIssue, JobFailedError
        >>> code_for(SpecError([ConfigIssue("parallelism", 0, "it must be at least 1", "1")]))
        <ExitCode.BAD_INPUT: 2>
        >>> code_for(JobFailedError("3 of 4 trials failed"))
        <ExitCode.JOB_FAILED: 1>
    """
    if isinstance(exc, JobCancelledError):
        return _CANCELLED.get(exc.signal_number, ExitCode.CANCELLED_SIGTERM)
    if isinstance(exc, _unreachable_types()):  # before SpecError: it is one too
        return ExitCode.UNREACHABLE
    if isinstance(exc, ConnectionError):  # the network, whatever client met it
        return ExitCode.UNREACHABLE
    if isinstance(exc, SpecError | UsageError):
        return ExitCode.BAD_INPUT
    if isinstance(exc, JobBusyError):
        return ExitCode.BUSY
    return ExitCode.JOB_FAILED


def fail(
    error: BaseException | str,
    *,
    code: ExitCode | None = None,
    about: str = "",
    where: str = "",
) -> NoReturn:
    """End the command: one ``error:`` line on stderr, then exit with ``code``.

    Args:
        error: what went wrong; a string is bad input unless ``code`` says otherwise. An
            error not of ultron's hierarchy (a bug, a library's) shows its type's name.
        code: the exit status; default :func:`code_for` the error.
        about: the start of the line, e.g. ``"job j-1 failed: "``.
        where: lines printed after the error (the job's results, log, how to resume).
    """
    if isinstance(error, BaseException):
        plain = isinstance(error, UltronError)
        text = about + (str(error) if plain else f"{type(error).__name__}: {error}")
        status = code if code is not None else code_for(error)
        if _Verbose.on:
            err_console.print(
                "".join(traceback.format_exception(error)), end="", markup=False, highlight=False
            )
    else:
        text, status = about + error, code if code is not None else ExitCode.BAD_INPUT
    # escape: an error quotes user input, and "[lr]" or "[/tmp]" there is text, not markup;
    # printable: a control character or bidi override in it is shown, not obeyed.
    text = "\n".join(printable(line) for line in text.split("\n"))
    tail = "\n" + "\n".join(escape(printable(line)) for line in where.split("\n")) if where else ""
    err_console.print(f"[bold red]error:[/] {escape(text)}{tail}", highlight=False)
    raise typer.Exit(code=int(status))
