"""``ultron run``'s supervision: the job runs in a child process that comes back if it dies.

Where no Prefect worker or Kubernetes restarts a lost master, ``ultron run`` does: the command's
process forks, the child runs the job as ``ultron run`` always did (in that process, with its
progress bar and its log), and the parent only waits. If the child dies of a signal that the
parent did not pass on (SIGKILL from the OOM killer, a crash), the parent forks a new child that
runs the job again with the same job id, which resumes it (its predecessor's lease is known
dead at once: :mod:`ultron.master.heartbeat`), up to ``--restarts`` times.

The child runs in a process group of its own, so each signal reaches it once: the parent passes
on SIGINT (Ctrl-C), SIGTERM and SIGHUP, the child cancels the job as before and the parent
exits with its status (a cancelled job is never restarted). If the parent dies, the kernel kills
the child (``PR_SET_PDEATHSIG``, Linux), whose Dask workers and trial processes end with it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

from rich.markup import escape

from ultron.cli.exits import ExitCode, err_console

__all__ = ["PASSED_ON", "supervise"]

PASSED_ON = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals the parent passes on to the job's process, once each."""

_PR_SET_PDEATHSIG = 1


class _Child:
    """The job's current process, and the signals passed on to it."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.passed: list[int] = []

    def pass_on(self, number: int, frame: object) -> None:
        self.passed.append(number)
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, number)

    def started(self, pid: int) -> None:
        with contextlib.suppress(OSError):  # the child did it already, or it is gone
            os.setpgid(pid, pid)
        self.pid = pid
        for number in self.passed:  # arrived between the fork and now
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, number)


def supervise(job_id: str, restarts: int, *, hint: str) -> int | None:
    """Fork the job's process: ``None`` in the child (it goes on to run the job); in the parent,
    once the job's process is done for good, the exit status ``ultron run`` ends with.

    Args:
        job_id: the job (for the messages).
        restarts: how many times a child that died of a signal is started again.
        hint: the command that resumes the job by hand (for the last message).
    """
    parent, child = os.getpid(), _Child()
    previous = {int(n): signal.signal(n, child.pass_on) for n in PASSED_ON}
    try:
        for restarted in range(restarts + 1):
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                for number, handler in previous.items():
                    signal.signal(number, handler)
                _become_the_job(parent)
                return None
            child.started(pid)
            _, status = os.waitpid(pid, 0)  # retried after each signal handler (PEP 475)
            if os.WIFEXITED(status):
                return os.WEXITSTATUS(status)
            number = os.WTERMSIG(status)
            if child.passed:  # it was asked to stop: how it stopped is the answer
                return 128 + number
            if restarted < restarts:
                err_console.print(
                    f"[yellow]job {escape(job_id)}'s process died ({_name(number)})[/]; "
                    "starting it again with the same job id, which resumes it (restart "
                    f"{restarted + 1} of {restarts})",
                    highlight=False,
                )
        err_console.print(
            f"[bold red]error:[/] job {escape(job_id)}'s process died ({_name(number)}) "
            f"{restarts + 1} time(s); no restarts left (--restarts {restarts}). Resume it "
            f"with: {escape(hint)}",
            highlight=False,
        )
        return int(ExitCode.JOB_FAILED)
    finally:
        if os.getpid() == parent:
            for number, handler in previous.items():
                signal.signal(number, handler)


def _name(number: int) -> str:
    return signal.Signals(number).name if number in signal.valid_signals() else str(number)


def _become_the_job(parent: int) -> None:
    """In the child: a process group of its own, and death with the parent."""
    os.setpgid(0, 0)
    with contextlib.suppress(OSError, AttributeError):  # not Linux: no death signal
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the death signal was set
        os._exit(int(ExitCode.JOB_FAILED))
