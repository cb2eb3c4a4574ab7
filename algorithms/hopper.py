"""Cerebro's randomized scheduler for model hopper parallelism (MOP), as a pure state machine.

The data set is split into ``partitions`` fixed parts, one per worker. Every model trains one
sub-epoch at a time on one partition; a model has finished an epoch when it has visited every
partition once, and a partition serves one model at a time. :meth:`HopperScheduler.assign`
pairs idle models with idle partitions they have not yet visited this epoch, picking at random
(Cerebro, section 4.2: the randomized scheduler reaches near-optimal makespans), so no worker
waits while some model could use it. The caller runs each :class:`Hop` and reports back with
:meth:`~HopperScheduler.complete`, or :meth:`~HopperScheduler.release` when the hop was lost
(its worker died): the model then runs that partition again from its last checkpoint.

Every completed hop is recorded in order, so the visiting order of each model in each epoch is
known (:meth:`~HopperScheduler.order`) and a sequential run over the same order can be replayed.
The state round-trips through :meth:`~HopperScheduler.state_dict` (a resumed job goes on where it
stopped, with the same random generator).

Example:
    >>> scheduler = HopperScheduler(["a", "b"], partitions=2, epochs=1, seed=0)
    >>> hops = scheduler.assign()
    >>> sorted(h.partition for h in hops)
    [0, 1]
    >>> for hop in hops:
    ...     _ = scheduler.complete(hop)
    >>> for hop in scheduler.assign():
    ...     _ = scheduler.complete(hop)
    >>> scheduler.finished, [sorted(o) for o in scheduler.order("a")]
    (True, [[0, 1]])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = ["Hop", "HopperScheduler"]


@dataclass(frozen=True)
class Hop:
    """One sub-epoch: ``model`` trains ``epoch``'s visit number ``step`` on ``partition``.

    Attributes:
        model: the model's (configuration's) id.
        partition: the partition it trains on.
        epoch: the epoch, from 0.
        step: the sub-epochs this model completed before this one (all epochs); its checkpoint
            after this hop is number ``step + 1``.
    """

    model: str
    partition: int
    epoch: int
    step: int


class HopperScheduler:
    """Which model trains on which partition next (Cerebro's randomized scheduler).

    Calls: :meth:`assign` for the idle pairs, then :meth:`complete` or :meth:`release` for each
    hop it gave, in any order; :meth:`stop` at any time. Only the caller changes the state.

    Args:
        models: the models' ids.
        partitions: how many partitions (workers) the data set is split into.
        epochs: how many epochs each model trains.
        seed: seeds the random choices.
    """

    def __init__(
        self, models: Sequence[str], *, partitions: int, epochs: int, seed: int = 0
    ) -> None:
        if partitions < 1:
            raise ValueError(f"partitions is {partitions}; it must be at least 1")
        if epochs < 1:
            raise ValueError(f"epochs is {epochs}; it must be at least 1")
        if len(set(models)) != len(models):
            raise ValueError(f"model ids repeat in {list(models)}; each must be unique")
        self.models = list(models)
        self.partitions = partitions
        self.epochs = epochs
        self._rng = np.random.default_rng(seed)
        self._log: list[Hop] = []
        self._running: dict[str, Hop] = {}  # model -> its running hop
        self._stopped: set[str] = set()

    def _visited(self, model: str, epoch: int) -> set[int]:
        return {h.partition for h in self._log if h.model == model and h.epoch == epoch}

    def steps_done(self, model: str) -> int:
        """How many sub-epochs ``model`` has completed."""
        return sum(1 for h in self._log if h.model == model)

    def epoch_of(self, model: str) -> int:
        """The epoch ``model`` is in (``epochs`` once it trained them all)."""
        return self.steps_done(model) // self.partitions

    def done(self, model: str) -> bool:
        """Whether ``model`` has nothing left to train (all epochs, or stopped)."""
        return model in self._stopped or self.epoch_of(model) >= self.epochs

    @property
    def finished(self) -> bool:
        """Whether every model is done and no hop runs."""
        return not self._running and all(self.done(m) for m in self.models)

    @property
    def running(self) -> list[Hop]:
        """The hops handed out and not yet completed or released."""
        return list(self._running.values())

    def assign(self) -> list[Hop]:
        """New hops for the idle partitions, each to a random idle model that still needs it."""
        busy = {h.partition for h in self._running.values()}
        idle_models = [m for m in self.models if m not in self._running and not self.done(m)]
        hops = []
        for index in self._rng.permutation(len(idle_models)):
            model = idle_models[int(index)]
            epoch = self.epoch_of(model)
            free = sorted(set(range(self.partitions)) - busy - self._visited(model, epoch))
            if not free:
                continue
            partition = free[int(self._rng.integers(len(free)))]
            hop = Hop(model, partition, epoch, self.steps_done(model))
            busy.add(partition)
            self._running[model] = hop
            hops.append(hop)
        return hops

    def complete(self, hop: Hop) -> bool:
        """Record ``hop`` as trained; returns whether it ended its model's epoch.

        Raises:
            ValueError: ``hop`` is not running (completed twice, or never assigned).
        """
        if self._running.get(hop.model) != hop:
            raise ValueError(f"{hop} is not running; it was completed or released already")
        del self._running[hop.model]
        self._log.append(hop)
        return self.steps_done(hop.model) % self.partitions == 0

    def release(self, hop: Hop) -> None:
        """Give back a hop that did not finish: the model trains that partition again later."""
        if self._running.get(hop.model) == hop:
            del self._running[hop.model]

    def stop(self, model: str) -> None:
        """Train ``model`` no further (a stopper's decision); a running hop still completes."""
        self._stopped.add(model)

    def order(self, model: str) -> list[list[int]]:
        """The partitions ``model`` visited, in order, one list per epoch begun."""
        epochs: list[list[int]] = []
        for hop in self._log:
            if hop.model == model:
                if hop.epoch == len(epochs):
                    epochs.append([])
                epochs[hop.epoch].append(hop.partition)
        return epochs

    @property
    def log(self) -> list[Hop]:
        """Every completed hop, in completion order."""
        return list(self._log)

    def state_dict(self) -> dict[str, Any]:
        """The completed hops, the stopped models and the generator (running hops are lost:
        after a restart they run again)."""
        return {
            "log": [asdict(h) for h in self._log],
            "stopped": sorted(self._stopped),
            "rng": self._rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from what :meth:`state_dict` returned."""
        self._log = [Hop(**h) for h in state["log"]]
        self._stopped = set(state["stopped"])
        self._running = {}
        self._rng.bit_generator.state = state["rng"]
