"""A warm start for the local cluster's worker processes: a multiprocessing forkserver.

Dask starts each worker of a ``LocalCluster`` in a fresh interpreter (``spawn``) that imports
``distributed`` and, at its first trial, ultron's trial runner (Redis, pydantic, fsspec): on 2
cores about 1.1 s before the cluster answers and 0.7 s more before the first trial starts. A
forkserver that imported both once forks each worker in milliseconds (0.2 s for the cluster,
0.02 s for the first task: ``benchmarks/first_trial.py``).

:func:`start` launches the forkserver as a job starts (``ultron.run``, the CLI, the flow); its
imports run in the background while Prefect starts the flow. :func:`worker_start_method` then
makes the local cluster fork its workers from it, but only while that is exactly what a fresh
worker would be: a forked worker inherits the forkserver's environment, so when this process's
``os.environ`` differs in any way from the one the forkserver started with, workers are spawned
as before. The forkserver runs no user code and ends with this process.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import multiprocessing
import multiprocessing.forkserver
import os
import sys
import threading
from collections.abc import Iterator

__all__ = ["start", "warm", "worker_start_method"]

logger = logging.getLogger(__name__)

# What the forkserver imports once, so that no worker imports it again.
PRELOAD = ["distributed", "ultron.worker.runner"]

_lock = threading.Lock()
_environ: dict[str, str] | None = None  # os.environ when our forkserver started


def start() -> None:
    """Launch the forkserver that local workers fork from, and import ``distributed`` here in a
    thread (the cluster's scheduler runs in this process: 0.9-1.2 s on 2 cores); returns at
    once. Does nothing when a forkserver already runs in this process: one started by other
    code may have another environment, so the workers are then spawned."""
    global _environ
    with _lock:
        if _environ is not None:
            return
        if "distributed" not in sys.modules:  # Python's import locks make a racing import wait
            threading.Thread(
                target=importlib.import_module, args=("distributed",), daemon=True
            ).start()
        server = multiprocessing.forkserver._forkserver  # the process's one forkserver
        if getattr(server, "_forkserver_pid", None) is not None:
            return
        multiprocessing.get_context("forkserver").set_forkserver_preload(PRELOAD)
        environ = dict(os.environ)
        try:
            multiprocessing.forkserver.ensure_running()
        except (OSError, ValueError) as exc:  # workers are spawned: slower, never wrong
            logger.debug("no forkserver for the local workers: %s", exc)
            return
        _environ = environ


def warm() -> bool:
    """Whether local workers may fork from our forkserver: it runs, and its environment is this
    process's, but for the variables each worker's nanny sets in the worker anyway."""
    if _environ is None:
        return False
    now = dict(os.environ)
    changed = {key for key in _environ.keys() | now.keys() if _environ.get(key) != now.get(key)}
    return not changed - _set_by_nanny()


def _set_by_nanny() -> set[str]:
    """Variables a Dask nanny sets in its worker as the worker starts (and in this process, as
    it starts the first), and two Dask sets here that do not change what a worker computes:
    ``PYTHONHASHSEED`` (forked workers share the forkserver's seed as spawned ones share the
    nanny's) and ``__DASK_PARENT_PID`` (it only lets children retitle their processes)."""
    import dask

    names = {"PYTHONHASHSEED", "__DASK_PARENT_PID"}
    for key in ("distributed.nanny.pre-spawn-environ", "distributed.nanny.environ"):
        names.update(dask.config.get(key, default=None) or {})
    return names


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
