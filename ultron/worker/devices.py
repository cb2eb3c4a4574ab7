"""Which GPUs each trial of a Dask worker uses: concrete devices with room for its share.

Dask counts a worker's ``GPU`` resource as an amount, not as devices: a worker advertising
``GPU=2`` runs four trials of ``gpu: 0.5`` at once and does not say which GPU each one gets.
The worker process's :class:`GpuBook` does. A fraction goes to the emptiest GPU with room for
it (trials spread over the GPUs: none idles while another holds two), whole GPUs go to free
ones, and the trial process sees only its own in ``CUDA_VISIBLE_DEVICES`` (:func:`trial_gpus`,
read by :mod:`ultron.worker.runner`). Trials of one share always fit where Dask let them in; a
trial whose share fits on no GPU yet (jobs of other shares left gaps) waits for room.

The worker's GPUs are :func:`ultron.cluster.gpus.visible_gpus`: ``CUDA_VISIBLE_DEVICES`` of
a local worker, which the local cluster pins, or ``ULTRON_GPUS``, NVML, ``nvidia-smi``.

Example:
    >>> book = GpuBook(["0", "1"])
    >>> [book.claim(0.5).devices for _ in range(3)]
    [('0',), ('1',), ('0',)]
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, TypeVar

from ultron.cluster.gpus import visible_gpus
from ultron.errors import UltronError

__all__ = ["GpuBook", "GpuClaim", "gpu_environ", "on_claimed_gpus", "trial_gpus"]

logger = logging.getLogger(__name__)

Run = TypeVar("Run", bound=Callable[..., Any])


@dataclass(frozen=True)
class GpuClaim:
    """GPUs one trial holds: ``devices``, and ``share`` of each (1 for whole GPUs)."""

    devices: tuple[str, ...]
    share: Fraction


class GpuBook:
    """The GPUs of one worker process and how much of each its running trials hold.

    Thread-safe: each trial runs in a thread of the worker. Shares are exact fractions.

    Args:
        devices: GPU ids, as ``CUDA_VISIBLE_DEVICES`` names them.
    """

    def __init__(self, devices: Sequence[str]) -> None:
        self.devices = tuple(devices)
        self._used = {device: Fraction(0) for device in self.devices}
        self._changed = threading.Condition()

    def claim(self, amount: float, *, timeout: float | None = None) -> GpuClaim:
        """Take ``amount`` GPUs (a fraction of one, or whole ones), waiting until they fit.

        Raises:
            UltronError: this worker has too few GPUs for ``amount`` ever to fit.
            TimeoutError: nothing fit within ``timeout`` seconds.
        """
        share = Fraction(amount).limit_denominator(1 << 20)
        if share <= 0 or max(Fraction(1), share) > len(self.devices):
            raise UltronError(
                f"a trial asks for {amount:g} GPUs and this worker has {len(self.devices)} "
                f"({', '.join(self.devices) or 'none found'}). Fix: start the worker with as "
                "many GPUs as its GPU resource says (CUDA_VISIBLE_DEVICES or ULTRON_GPUS)"
            )
        with self._changed:
            picked = self._pick(share)
            while picked is None:
                if not self._changed.wait(timeout):
                    raise TimeoutError(f"no GPU had room for {amount:g} GPUs")
                picked = self._pick(share)
            claim = GpuClaim(picked, min(share, Fraction(1)))
            for device in picked:
                self._used[device] += claim.share
        return claim

    def _pick(self, share: Fraction) -> tuple[str, ...] | None:
        if share < 1:
            fits = [d for d in self.devices if self._used[d] + share <= 1]
            # min keeps the first of equals: ties go in order.
            return (min(fits, key=self._used.__getitem__),) if fits else None
        free = [d for d in self.devices if self._used[d] == 0]
        return tuple(free[: int(share)]) if len(free) >= share else None

    def release(self, claim: GpuClaim) -> None:
        """Give back what ``claim`` holds; waiting trials try again."""
        with self._changed:
            for device in claim.devices:
                self._used[device] -= claim.share
            self._changed.notify_all()

    def in_use(self) -> dict[str, Fraction]:
        """Share of each GPU that running trials hold."""
        with self._changed:
            return dict(self._used)


_book: GpuBook | None = None
_book_lock = threading.Lock()
_current = threading.local()  # the CUDA_VISIBLE_DEVICES of the trial this thread runs


def _worker_book() -> GpuBook:
    """This process's book, made on first use (the GPUs do not change while a worker lives)."""
    global _book
    with _book_lock:
        if _book is None:
            devices, source = visible_gpus()
            logger.info("GPUs for trials: %s (%s)", devices, source)
            _book = GpuBook(devices)
        return _book


def _task_gpu_amount() -> float:
    """The GPU amount Dask reserved for the task this thread runs; 0 outside a Dask task."""
    try:
        from distributed import get_worker
        from distributed.worker import thread_state

        worker = get_worker()
    except (ImportError, ValueError):  # not in a Dask worker (a direct call)
        return 0.0
    key = getattr(thread_state, "key", None)
    task = worker.state.tasks.get(key) if key is not None else None
    # None, not {}, for a task that asked for no resources (as on dask-jobqueue's workers).
    restrictions = (task.resource_restrictions if task is not None else None) or {}
    return float(restrictions.get("GPU", 0))


def trial_gpus() -> str | None:
    """``CUDA_VISIBLE_DEVICES`` for the trial this thread runs; None keeps the worker's own."""
    visible: str | None = getattr(_current, "visible", None)
    return visible


def gpu_environ(gpus: str | None) -> dict[str, str]:
    """The environment that shows a trial process ``gpus`` (nothing for None)."""
    return {} if gpus is None else {"CUDA_VISIBLE_DEVICES": gpus}


@functools.cache
def _warn_no_gpus() -> None:
    logger.warning(
        "trials ask for GPUs and this worker found none (set CUDA_VISIBLE_DEVICES or "
        "ULTRON_GPUS): they run with the worker's environment as it is"
    )


def on_claimed_gpus(run: Run) -> Run:
    """Wrap a Dask task function: it runs holding GPUs of this worker for the amount Dask
    reserved, and :func:`trial_gpus` names them to the trial process it starts."""

    @functools.wraps(run)
    def claimed(*args: Any, **kwargs: Any) -> Any:
        amount = _task_gpu_amount()
        book = _worker_book() if amount > 0 else None
        if book is None or not book.devices:
            if book is not None:
                _warn_no_gpus()
            return run(*args, **kwargs)
        claim = book.claim(amount)
        visible = ",".join(claim.devices)
        # A local worker is pinned to just these GPUs: its warm processes already see them.
        _current.visible = None if visible == os.environ.get("CUDA_VISIBLE_DEVICES") else visible
        try:
            return run(*args, **kwargs)
        finally:
            _current.visible = None
            book.release(claim)

    return claimed  # type: ignore[return-value]
