"""Where a long command's output goes: the terminal keeps the command's own lines, the job's
log file gets Prefect's and Dask's logs, and a reader that goes away ends nothing.

``ultron run`` and ``ultron experiment`` share these rules: their stderr (file descriptor 2,
and so that of every process they start) goes to a log file unless ``-v``; when the reader of
their output goes away (``ultron run job.yaml | head -2``, a pager that quits, a terminal that
closes), the rest goes on to the log (:class:`JobConsole`, :func:`divert_output`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from rich.console import Console

from ultron.cli.exits import err_console

__all__ = ["JobConsole", "divert_output", "logs_to"]


class JobConsole(Console):
    """rich's console for the command's own lines. When their reader goes away, the lines go
    on to the job's log (:attr:`log_path`; nowhere without one) and the command goes on: rich's
    default ends the process, which would end the job mid-run."""

    log_path: Path | None = None

    def on_broken_pipe(self) -> None:
        divert_output(self.log_path, stderr=False)

    def flush(self) -> None:
        """Flush the output now (a line per trial when piped), whoever reads it."""
        try:
            self.file.flush()
        except BrokenPipeError:
            self.on_broken_pipe()


def divert_output(log: Path | None, *, stderr: bool) -> None:
    """Send stdout (file descriptor 1), and with ``stderr`` the error console and descriptor 2,
    to the job's log (``os.devnull`` without one): their reader is gone."""
    target = str(log) if log is not None else os.devnull
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        if stderr:
            os.dup2(fd, 2)
            err_console.file = open(target, "a", buffering=1)  # noqa: SIM115  (the process's)
    finally:
        os.close(fd)


@contextlib.contextmanager
def logs_to(log_path: Path, *, verbose: bool) -> Iterator[None]:
    """Inside the block, Prefect's and Dask's logs go to ``log_path``: this process's stderr
    (file descriptor 2, and so that of every process it starts) is the log file, and the error
    console keeps the terminal; with ``verbose`` the terminal shows the logs and the log file
    gets them too. Both are as they were after the block (a command run in-process, by tests
    or a notebook, leaves the process's stderr be)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if verbose:
        handler = logging.FileHandler(log_path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(handler)
        try:
            yield
        finally:
            logging.getLogger().removeHandler(handler)
            handler.close()
        return
    sys.stderr.flush()
    saved = os.dup(2)
    # What the console was given, not what it writes to now: None means "sys.stderr of the
    # moment", which a test's CliRunner swaps per command (keeping the stream of one command
    # would write later commands' errors to a closed file).
    previous = err_console._file
    err_console.file = terminal = os.fdopen(os.dup(2), "w", buffering=1)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        if err_console.file is terminal:  # not diverted meanwhile (the terminal closed)
            err_console._file = previous
        terminal.close()
