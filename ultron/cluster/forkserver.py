"""A warm start for the local cluster's worker processes: a multiprocessing forkserver.

Dask starts each worker of a ``LocalCluster`` in a fresh interpreter (``spawn``) that imports
``distributed`` and, at its first trial, ultron's trial runner (Redis, pydantic, fsspec): on 2
cores about 1.1 s before the cluster answers and 0.7 s more before the first trial starts. A
forkserver that imported both once forks each worker in milliseconds (0.2 s for the cluster,
0.02 s for the first task: ``benchmarks/first_trial.py``).

:func:`start` launches the forkserver as the job's local cluster starts, at the first trial the
score cache cannot answer (:mod:`ultron.cluster.lazy`): a job whose every trial the cache answers
starts none and imports no ``distributed``. Its imports run while the job's process starts the
cluster's scheduler.
:func:`worker_start_method` then makes the local cluster fork its workers from it, but only
while that gives the workers what a spawned worker would have. A forked worker inherits the
forkserver's process state from when it started, not the job's now:

- the environment: the forkserver starts with the variables Dask's nanny sets in every worker
  (``OMP_NUM_THREADS=1``, ``MALLOC_TRIM_THRESHOLD_``, ``PYTHONHASHSEED``, ...), set in this
  process first as the nanny would set them a moment later; any other change since makes the
  next cluster spawn its workers;
- the umask, resource limits, CPU affinity and niceness: a change since also means spawning;
- SIGINT and SIGHUP: blocked in the forkserver, so its workers ignore Ctrl-C and a closed
  terminal's hangup like the workers a job starts inside
  :func:`ultron.master.cancel.handling_signals` (only the job's process hears them).

The working directory and ``sys.path`` travel with each worker's start, as with ``spawn``. The
forkserver runs no user code; :func:`stop` ends it with the job (``ultron.run``).

This is Dask's own way to start workers (``distributed.worker.multiprocessing-method``) with
multiprocessing's own forkserver and its preload list; nothing here speaks the forkserver's
protocol. ``ULTRON_SPAWN_WORKERS=1`` spawns every worker (the baseline).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.forkserver
import os
import resource
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["nanny_settings", "restoring_environ", "start", "stop", "warm", "worker_start_method"]

logger = logging.getLogger(__name__)

# What the forkserver imports once, so that no worker imports it again.
PRELOAD = ["distributed", "ultron.worker.runner"]

_lock = threading.Lock()
_started: dict[str, Any] | None = None  # this process's state when our forkserver started


def start() -> None:
    """Launch the forkserver that local workers fork from; its imports run in the background.
    Does nothing when a forkserver already runs in this process: one started by other code
    may have another state, so the workers are then spawned."""
    global _started
    with _lock:
        if _started is not None:
            return
        server = multiprocessing.forkserver._forkserver  # the process's one forkserver
        if getattr(server, "_forkserver_pid", None) is not None:
            return
        from multiprocessing import resource_tracker

        # Not `import distributed` here: this process imports it (for the cluster's scheduler)
        # while the forkserver imports it for the workers, on another core.
        _distributed_defaults()
        os.environ.update(_nanny_environ())
        multiprocessing.get_context("forkserver").set_forkserver_preload(PRELOAD)
        # The tracker unblocks SIGINT in the thread that starts it: started first, it cannot.
        # SIGHUP, blocked before, it keeps blocked (it ignores SIGINT itself).
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
        try:
            resource_tracker.ensure_running()
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGHUP})
            multiprocessing.forkserver.ensure_running()
        except (OSError, ValueError) as exc:  # workers are spawned: slower, never wrong
            logger.warning("no forkserver for the local workers, they are spawned: %s", exc)
            return
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        _started = _process_state()


def stop() -> None:
    """Stop our forkserver as the job ends: an idle one would hold its memory in a long-lived
    process (a notebook), and nothing else this process starts should fork from it. Workers
    already forked are not touched. The next job starts a forkserver of its own."""
    global _started
    with _lock:
        if _started is None:
            return
        _started = None
        # CPython's own way to stop it (closing its "alive" pipe, then waiting for it).
        stop_server = getattr(multiprocessing.forkserver._forkserver, "_stop", None)
        if stop_server is not None:
            with contextlib.suppress(OSError):  # it is gone already: nothing left to stop
                stop_server()


def warm() -> bool:
    """Whether local workers may fork from our forkserver: it runs, and this process's state
    is the one it started with, but for the variables each worker's nanny sets anyway."""
    if _started is None:
        return False
    now = _process_state()
    if {k: v for k, v in now.items() if k != "environ"} != {
        k: v for k, v in _started.items() if k != "environ"
    }:
        return False
    before, after = _started["environ"], now["environ"]
    changed = {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}
    return not changed - _set_by_nanny()


def _process_state() -> dict[str, Any]:
    """What a forked worker inherits from the forkserver instead of from this process."""
    umask = os.umask(0o022)
    os.umask(umask)
    limits = {
        name: resource.getrlimit(getattr(resource, name))
        for name in dir(resource)
        if name.startswith("RLIMIT_")
    }
    return {
        "environ": dict(os.environ),
        "umask": umask,
        "limits": limits,
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
    }


def _distributed_defaults() -> None:
    """Dask's configuration with ``distributed``'s defaults (its ``distributed.yaml``), loaded
    as ``import distributed`` loads them (``dask.config.update_defaults``, which leaves the
    user's own settings on top), without importing ``distributed``. Loaded again by that
    import, they are the same."""
    import importlib.util

    import dask.config
    import yaml

    found = importlib.util.find_spec("distributed")
    folders = found.submodule_search_locations if found is not None else None
    if not folders:  # not installed: the cluster's start fails with its own error
        return
    with open(os.path.join(next(iter(folders)), "distributed.yaml"), encoding="utf-8") as file:
        dask.config.update_defaults(yaml.safe_load(file))


def _nanny_environ() -> dict[str, str]:
    """The variables a Dask nanny sets in this process before it starts a worker (its
    ``pre-spawn-environ``; ``PYTHONHASHSEED`` 6640 unless set), valued as the nanny does."""
    import dask

    wanted = dask.config.get("distributed.nanny.pre-spawn-environ", default=None) or {}
    environ = {k: os.environ.get(k, str(v)) for k, v in wanted.items() if v is not None}
    if environ.get("PYTHONHASHSEED") in (None, "0"):  # the nanny's rule, whatever is set here
        environ["PYTHONHASHSEED"] = "6640"
    return environ


def nanny_settings() -> dict[str, str]:
    """What a Dask nanny sets in its worker's environment (``distributed.nanny``'s
    ``pre-spawn-environ`` and ``environ``), as this process's Dask config says (none where
    ``distributed``'s defaults are not loaded)."""
    import dask

    settings: dict[str, str] = {}
    for key in ("distributed.nanny.pre-spawn-environ", "distributed.nanny.environ"):
        values = dask.config.get(key, default=None) or {}
        settings.update({name: str(v) for name, v in values.items() if v is not None})
    return settings


def _set_by_nanny() -> set[str]:
    """Variables a Dask nanny sets in its worker as the worker starts (and in this process, as
    it starts the first), and one Dask sets here that does not change what a worker computes:
    ``__DASK_PARENT_PID`` (it only lets children retitle their processes)."""
    return {"PYTHONHASHSEED", "__DASK_PARENT_PID", *nanny_settings()}


@contextlib.contextmanager
def restoring_environ() -> Iterator[None]:
    """Give this process back, after the job run within it, the variables Dask set in it.

    Dask's nannies (and :func:`start`) set theirs (``MALLOC_TRIM_THRESHOLD_``,
    ``OMP_NUM_THREADS=1``, ...) in the process that runs the nanny as they start local
    workers (see ``distributed.nanny.Nanny``). A program that calls ``ultron.run`` and then
    starts processes of its own would otherwise hand them Dask's: a PyTorch training with that
    trim threshold ran 1.9 times as long (:mod:`ultron.worker.threads`).
    """
    before = dict(os.environ)
    try:
        yield
    finally:
        after = dict(os.environ)
        changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
        if changed:  # else Dask's config need not be read
            for name in changed & _set_by_nanny():
                if name in before:
                    os.environ[name] = before[name]
                else:
                    os.environ.pop(name, None)


@contextlib.contextmanager
def worker_start_method() -> Iterator[str]:
    """Within it, Dask starts worker processes from our forkserver when :func:`warm`, else
    with ``spawn``; yields the method. A worker a nanny restarts later is spawned."""
    import dask
    import distributed.utils

    method = "forkserver" if warm() else "spawn"
    if method == "forkserver":
        # Dask would otherwise import its optional packages here (numpy, pandas, ...) for a
        # preload list of its own, which only a forkserver that is not yet running would use.
        distributed.utils._forkserver_preload_set = True
    with dask.config.set({"distributed.worker.multiprocessing-method": method}):
        yield method
