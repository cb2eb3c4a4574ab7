"""A trial that ran out of memory: telling a failed allocation apart, and saying why in words.

A trial process holds itself to ``resources.memory`` and, with a fractional ``resources.gpu``,
to its share of the GPU's memory (:mod:`ultron.worker.isolation`,
:mod:`ultron.worker.gpu_memory`): an allocation beyond them is refused, and the trial ends
``out_of_memory`` (not ``failed``) with a message that names the limit that refused it and the
fix. The trial process (:mod:`ultron.worker.process`) asks :func:`is_out_of_memory` of whatever
``score`` raised.

Example:
    >>> is_out_of_memory(MemoryError()), is_out_of_memory(ValueError("bad"))
    (True, False)
    >>> said = memory_error(MemoryError(), 2**30, None)
    >>> "resources.memory allows (1073741824 bytes = 1024 MiB)" in said, "Fix: raise" in said
    (True, True)
"""

from __future__ import annotations

import errno

from ultron.worker.gpu_memory import is_gpu_out_of_memory
from ultron.worker.return_values import brief

__all__ = ["is_out_of_memory", "memory_error"]


def is_out_of_memory(exc: BaseException) -> bool:
    """A failed allocation: Python's and numpy's MemoryError, an ENOMEM from the system (a
    fork, an mmap), torch's CPU allocator (a RuntimeError), or a GPU's
    (:func:`~ultron.worker.gpu_memory.is_gpu_out_of_memory`)."""
    if isinstance(exc, MemoryError) or is_gpu_out_of_memory(exc):
        return True
    if isinstance(exc, OSError):
        return exc.errno == errno.ENOMEM
    text = str(exc) if isinstance(exc, RuntimeError) else ""
    return "can't allocate memory" in text or "Cannot allocate memory" in text


def memory_error(exc: BaseException, limit: int | None, gpu_fraction: float | None) -> str:
    """What the trial's failed allocation means and how to fix it, for the trial's row.

    Args:
        exc: the error, one that :func:`is_out_of_memory` recognises.
        limit: the trial process's ``resources.memory`` in bytes (``None``: none set).
        gpu_fraction: its share of a GPU's memory (a fractional ``resources.gpu``; ``None``:
            whole GPUs or none).
    """
    detail = f"{type(exc).__name__}: {brief(str(exc)) if str(exc) else 'allocation failed'}"
    if is_gpu_out_of_memory(exc):
        return _gpu_memory_error(detail, gpu_fraction)
    if limit is None:
        return (
            f"the trial ran out of memory ({detail}); no resources.memory is set, so the "
            "machine's memory was the limit. Fix: set resources.memory to what a trial needs "
            "and run fewer trials at once, or make the model use less (a smaller batch or model)"
        )
    return (
        f"the trial needed more memory than resources.memory allows ({limit} bytes = "
        f"{limit / 2**20:.0f} MiB) and its allocation was refused ({detail}); a trial process "
        "may hold at most resources.memory. Fix: raise resources.memory in the job spec, or "
        "make the model use less (a smaller batch or model)"
    )


def _gpu_memory_error(detail: str, fraction: float | None) -> str:
    if fraction is None:
        return (
            f"the trial ran out of GPU memory ({detail}); it had its GPU(s) to itself. Fix: "
            "make the model use less (a smaller batch or model), or run on GPUs with more memory"
        )
    return (
        f"the trial needed more GPU memory than its share allows ({detail}); with "
        f"resources.gpu {fraction:g} a trial may hold {fraction:.0%} of its GPU's memory, so "
        "that the trials sharing the GPU keep theirs. Fix: raise resources.gpu (a larger share, "
        "or 1 for a GPU of its own), or make the model use less (a smaller batch or model)"
    )
