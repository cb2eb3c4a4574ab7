"""What the master's loops (:mod:`ultron.master.loops`) drive: a dispatcher, a store, a cache.

Each has a real implementation (Dask, Redis) and one for simulation and tests
(:mod:`ultron.simulation`): the loops see only these interfaces.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ultron.algorithms.space import Config
from ultron.master.job_state import JobState
from ultron.trial_records import TrialRequest, TrialResult

__all__ = ["Cache", "Dispatcher", "Elastic", "OnResult", "Store"]

OnResult = Callable[[JobState, int, "TrialResult | None"], None]


class Dispatcher(Protocol):
    """Runs trials: :class:`~ultron.master.TrialDispatcher` on Dask, or a simulated one."""

    @property
    def in_flight(self) -> int: ...

    def request(
        self, trial_id: str, config: Config, *, attempt: int = 1, resume: bool = False
    ) -> TrialRequest: ...

    def start(self, *requests: TrialRequest) -> None: ...

    def worker_slots(self) -> int | None:
        """Trials the job's own workers run at once, where a trial submitted beyond them waits
        for one of them; None where other trials may take a free worker."""

    def has_ready(self) -> bool:
        """Whether :meth:`wait_one` has a trial to return at once."""

    def reserve(self, count: int) -> None:
        """Keep ``count`` trials' places waiting on the workers for requests not sampled yet,
        which the next :meth:`start` fills first (where :meth:`worker_slots` is not None)."""

    def settle(self) -> None:
        """The search is over: give back what waits, let what ends end."""

    def wait_one(
        self, wake: Callable[[], bool] | None = None, timeout: float | None = None
    ) -> tuple[TrialResult, list[dict[str, Any]]] | None:
        """The next trial that is finally done, and its learning curve; ``None`` as soon as
        ``wake`` (asked now and then while waiting) returns True, or after ``timeout`` seconds
        (of the dispatcher's clock)."""

    def request_stop(self, reason: str, grace_s: float) -> list[str]:
        """Ask the running trials to stop (each returns ``stopped`` at the latest ``grace_s``
        seconds later) and retry none from now on; returns their ids."""


class Elastic(Protocol):
    """Changes the job's parallelism while it runs: :class:`~ultron.master.scaler.Scaler`."""

    def wake(self) -> bool:
        """Whether the loop should stop waiting and dispatch (cheap, asked often)."""

    def poll(self, in_flight: int) -> int:
        """Apply what was asked, with ``in_flight`` trials running; trials that may run now."""


class Store(Protocol):
    """Keeps the job's state: :class:`~ultron.master.job_state.JobStore` on Redis, or in memory."""

    def save(
        self,
        state: JobState,
        new: Sequence[TrialResult] = (),
        *,
        logged: Sequence[list[Any]] | None = None,
        first: Callable[[Any], None] | None = None,
    ) -> None: ...

    def flush(self) -> None:
        """Write what the dispatcher deferred (the running record) now."""


class Cache(Protocol):
    """Scores by configuration: :class:`~ultron.master.score_cache.ScoreCache`, or in memory.

    A cache is made for one computation (code base, data, model class, job seed, objective
    metric, ``cache`` setting). ``get_many`` answers each configuration about to be launched as
    trial ``trial_ids[i]`` of ``job_id`` with a stored entry whose ``score`` is the job's
    metric (:func:`~ultron.master.score_cache.answer`), or ``None``; ``put`` stores a completed
    trial.
    """

    def get_many(
        self, configs: Sequence[Config], *, job_id: str, trial_ids: Sequence[str]
    ) -> list[dict[str, Any] | None]: ...

    def put(self, config: Config, entry: dict[str, Any], *, pipe: Any = None) -> None:
        """Store ``entry`` for ``config``; with ``pipe``, queued in that Redis pipeline."""
