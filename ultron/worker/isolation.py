"""The trial process's isolation: its memory limit and the processes a trial starts.

:mod:`ultron.worker.process` holds itself to the spec's ``resources.memory`` (``RLIMIT_DATA``,
soft and hard, set before the user's code is imported) and becomes a child subreaper, so a
process that a trial starts stays below it even when it calls ``setsid``; every such process
is killed (:func:`end_descendants`) when ``score`` returns and when the trial process gets
SIGTERM. The runner finds a trial process's descendants with :func:`descendants`.

The worker side: before it starts a trial process, the Dask worker makes itself not dumpable
(:func:`hide_from_trials`), so a trial of the same user cannot read its ``/proc/PID/environ``
or memory, where the job's Redis URL is.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

__all__ = [
    "become_subreaper",
    "descendants",
    "end_descendants",
    "hide_from_trials",
    "limit_memory",
]

_PR_SET_DUMPABLE = 4  # linux/prctl.h
_PR_SET_CHILD_SUBREAPER = 36


def hide_from_trials() -> None:
    """Make this process (a Dask worker) not dumpable: only root may then read its
    ``/proc/PID/environ``, ``mem`` and ``fd`` or attach a debugger to it, so the trial
    processes it starts (the user's code, as the same user) cannot take the job's Redis URL from
    its environment or memory. The trial processes themselves stay dumpable: ``execve`` resets
    the flag. A no-op where the system has no ``prctl`` (not Linux).

    Also means: the worker leaves no core dump, and a profiler attaches to it only as root.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


def limit_memory(limit: int | None) -> None:
    """Hold this process, and each process it starts, to ``limit`` bytes of private memory.

    ``RLIMIT_DATA`` rather than ``RLIMIT_AS``: it counts the heap and the private anonymous
    maps that numpy and torch allocate, not address space that is only reserved (importing
    torch reserves about 630 MB of address space and uses about 230 MB). The hard limit is
    set too, so ``score`` cannot lift it; a warm process therefore serves one limit, and the
    runner keeps its warm processes by limit.
    """
    if limit is None:
        return
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    cap = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))


def become_subreaper() -> None:
    """Adopt the orphans of the processes below this one (Linux), ``setsid`` or not, so that
    :func:`end_descendants` finds them."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def descendants(pid: int) -> list[tuple[int, bool]]:
    """``(pid, is_zombie)`` of every process below ``pid`` (Linux ``/proc``; empty elsewhere)."""
    children: dict[int, list[tuple[int, bool]]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append((int(entry), fields[0] == b"Z"))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child[0])
    return found


def end_descendants(pid: int | None = None, *, rounds: int = 100) -> int:
    """SIGKILL every process below ``pid`` (this process by default) until none is left.

    Killing a parent hands its children to the nearest subreaper (this process), so each
    round finds what the last one orphaned; this process reaps what it adopted. Returns how
    many processes were killed.
    """
    root = os.getpid() if pid is None else pid
    killed: set[int] = set()
    for _ in range(rounds):
        live = [child for child, zombie in descendants(root) if not zombie]
        if not live:
            break
        for child in live:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(child, signal.SIGKILL)
                killed.add(child)
        if root == os.getpid():
            _reap()
        time.sleep(0.01)
    if root == os.getpid():
        _reap()
    return len(killed)


def _reap() -> None:
    """Collect the exit status of every child that has ended (adopted orphans included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
