"""A trial process's allocator and thread settings: the trial's own, not those Dask set for its
worker.

A Dask nanny sets variables in its worker's environment before it starts it (Dask's
``distributed.nanny.pre-spawn-environ``, and ``distributed.nanny.environ`` inside the worker):
``MALLOC_TRIM_THRESHOLD_=65536``, so that the worker hands freed memory back to the system at
once, and ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and ``OPENBLAS_NUM_THREADS`` of 1. They suit
a Dask worker, which holds a job's data and shares its machine with other workers. A trial
process started by that worker inherits them, and they do not suit it:

- with that trim threshold glibc trims the heap on nearly every free of a large block, and a
  training loop allocates and frees tensors every step: PyTorch training of the scaling
  benchmark's small CNN took 1.9 times as long (0.43 s against 0.22 s for 4 epochs, 2 cores,
  ``benchmarks/RESULTS.md``, "Scaling");
- with one thread, PyTorch, NumPy's BLAS and MKL use one core whatever ``resources.cpu`` the
  trial holds.

:func:`compute_environ` gives the trial its own: the trim threshold as the system's default,
and the thread variables at the trial's ``resources.cpu`` (whole cores, at least one:
``Resources.threads``), as Ray does for its tasks. A value a user set in the worker's
environment that differs from Dask's is the user's and stays, as Dask keeps it (it sets only
what is not set); one equal to Dask's cannot be told from it, and a model that wants fewer
threads than its ``cpu`` says so itself (``torch.set_num_threads``).
"""

from __future__ import annotations

from collections.abc import Mapping

from ultron.cluster.forkserver import nanny_settings
from ultron.spec.sections import THREAD_VARIABLES

__all__ = ["compute_environ"]

_ALLOCATOR = ("MALLOC_TRIM_THRESHOLD_",)


def compute_environ(
    environ: Mapping[str, str], threads: int, set_by_dask: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``environ`` (a worker's) as a trial process that may use ``threads`` cores gets it.

    Dask's allocator setting is left out and the thread variables are ``threads``, where they
    are absent or hold Dask's value (``set_by_dask``: default
    :func:`~ultron.cluster.forkserver.nanny_settings`); a value
    of the user's, one that differs from Dask's, stays.

    Example:
        >>> dask = {"MALLOC_TRIM_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
        >>> worker = {"PATH": "/bin", **dask, "MKL_NUM_THREADS": "6"}
        >>> sorted(compute_environ(worker, 4, dask).items())  # doctest: +NORMALIZE_WHITESPACE
        [('MKL_NUM_THREADS', '6'), ('OMP_NUM_THREADS', '4'), ('OPENBLAS_NUM_THREADS', '4'),
         ('PATH', '/bin')]
    """
    dask = nanny_settings() if set_by_dask is None else set_by_dask
    env = {
        name: value
        for name, value in environ.items()
        if not (name in _ALLOCATOR and dask.get(name) == value)
    }
    for name in THREAD_VARIABLES:
        if name not in env or dask.get(name) == env[name]:
            env[name] = str(threads)
    return env
