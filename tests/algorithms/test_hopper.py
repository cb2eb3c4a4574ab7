"""Cerebro's randomized scheduler (:mod:`ultron.algorithms.hopper`), without a cluster."""

from __future__ import annotations

import numpy as np
import pytest

from ultron.algorithms.hopper import Hop, HopperScheduler


def _drive(scheduler: HopperScheduler, *, seed: int = 0, lose_every: int = 0) -> int:
    """Complete the running hops in a random order (losing every ``lose_every``-th);
    returns the rounds in which a partition sat idle while an idle model still needed it."""
    rng = np.random.default_rng(seed)
    idle_rounds, count = 0, 0
    while not scheduler.finished:
        scheduler.assign()
        running = scheduler.running
        busy = {h.partition for h in running}
        for model in set(scheduler.models) - {h.model for h in running}:
            if scheduler.done(model):
                continue
            order, epoch = scheduler.order(model), scheduler.epoch_of(model)
            seen = set(order[epoch]) if epoch < len(order) else set()
            idle_rounds += bool(set(range(scheduler.partitions)) - busy - seen)
        hop = running[int(rng.integers(len(running)))]
        count += 1
        if lose_every and count % lose_every == 0:
            scheduler.release(hop)
        else:
            scheduler.complete(hop)
    return idle_rounds


def test_every_model_visits_every_partition_exactly_once_per_epoch() -> None:
    scheduler = HopperScheduler([f"m{i}" for i in range(6)], partitions=3, epochs=3, seed=1)
    assert _drive(scheduler, lose_every=5) == 0  # no partition idles while a model needs it
    for model in scheduler.models:
        order = scheduler.order(model)
        assert [sorted(epoch) for epoch in order] == [[0, 1, 2]] * 3
        assert [h.step for h in scheduler.log if h.model == model] == list(range(9))


def test_a_partition_serves_one_model_at_a_time_and_none_idles_needlessly() -> None:
    scheduler = HopperScheduler([f"m{i}" for i in range(8)], partitions=4, epochs=2, seed=2)
    hops = scheduler.assign()
    assert sorted(h.partition for h in hops) == [0, 1, 2, 3]
    assert len({h.model for h in hops}) == 4
    assert scheduler.assign() == []  # every partition is busy


def test_a_released_hop_runs_again_from_the_same_step() -> None:
    scheduler = HopperScheduler(["a"], partitions=2, epochs=1, seed=0)
    (hop,) = scheduler.assign()
    scheduler.release(hop)
    (again,) = scheduler.assign()
    assert again.step == hop.step == 0
    with pytest.raises(ValueError, match="not running"):
        scheduler.complete(hop if hop != again else Hop("a", 1 - again.partition, 0, 0))


def test_a_stopped_model_gets_no_more_hops() -> None:
    scheduler = HopperScheduler(["a", "b"], partitions=2, epochs=3, seed=0)
    for hop in scheduler.assign():
        scheduler.complete(hop)
    scheduler.stop("a")
    assert all(h.model == "b" for h in scheduler.assign())
    assert scheduler.done("a") and not scheduler.done("b")


def test_a_state_round_trip_gives_the_same_next_hops() -> None:
    first = HopperScheduler([f"m{i}" for i in range(5)], partitions=3, epochs=2, seed=4)
    for hop in first.assign()[:2]:
        first.complete(hop)
    for hop in first.running:
        first.release(hop)
    state = first.state_dict()
    second = HopperScheduler([f"m{i}" for i in range(5)], partitions=3, epochs=2, seed=99)
    second.load_state_dict(state)
    assert second.assign() == first.assign()


def test_bad_arguments_name_the_rule() -> None:
    with pytest.raises(ValueError, match=r"partitions is 0; it must be at least 1"):
        HopperScheduler(["a"], partitions=0, epochs=1)
    with pytest.raises(ValueError, match="model ids repeat"):
        HopperScheduler(["a", "a"], partitions=1, epochs=1)
