"""When the async loop queues a trial behind each busy worker (:func:`queued_ahead`): the
rule alone, over a master of simulated trials (the whole-job behaviour is in
``tests/flows/test_queue_ahead.py``)."""

from __future__ import annotations

import pytest

from tests.ultron.master.simulated import Instant
from ultron.algorithms.base import Direction
from ultron.algorithms.registry import resolve_strategy
from ultron.algorithms.space import SearchSpace, Uniform
from ultron.master.async_loop import QUEUE_AHEAD_BELOW_S, queued_ahead
from ultron.master.job_state import JobState
from ultron.master.loops import Master, SearchSettings
from ultron.simulation.benchmark import SimulatedClock
from ultron.simulation.jobs import MemoryCache, MemoryStore, SimulatedDispatcher
from ultron.trial_records import TrialResult, TrialStatus

SPACE = SearchSpace({"x": Uniform(0.0, 1.0)})


class _OwnWorkers(SimulatedDispatcher):
    """The simulated dispatcher, reporting ``slots`` worker slots of the job's own (a real
    local cluster's figure; the simulated one knows none)."""

    def __init__(self, slots: int | None) -> None:
        super().__init__(Instant(SPACE, key="x"), SimulatedClock())
        self.slots = slots

    def worker_slots(self) -> int | None:
        return self.slots


def _master(
    durations: list[float],
    *,
    slots: int | None = 4,
    parallelism: int = 4,
    queue_ahead: bool = True,
    status: TrialStatus = TrialStatus.COMPLETED,
) -> Master:
    strategy = resolve_strategy("random")(search_space=SPACE, seed=1, direction=Direction.MINIMIZE)
    master = Master(
        settings=SearchSettings(
            num_iterations=100, parallelism=parallelism, queue_ahead=queue_ahead
        ),
        strategy=strategy,
        cache=MemoryCache(),
        dispatcher=_OwnWorkers(slots),
        store=MemoryStore("job"),
        state=JobState("job"),
    )
    for i, duration in enumerate(durations):
        master.state.trials.append(
            TrialResult(f"{i:04d}", {"x": 0.5}, status, score=0.5, duration=duration)
        )
    return master


def test_short_trials_queue_one_behind_each_slot() -> None:
    assert queued_ahead(_master([0.5] * 4)) == 4
    # One-second trials too: on 16 cores at parallelism 16 the way between two trials costs
    # about 3% of one.
    assert queued_ahead(_master([1.0] * 4)) == 4
    # A local cluster capped below parallelism already queues parallelism - slots.
    assert queued_ahead(_master([0.5] * 8, slots=6, parallelism=8)) == 4


@pytest.mark.parametrize(
    "durations",
    [
        [],  # nothing known before the first trials return
        [QUEUE_AHEAD_BELOW_S] * 4,
        [0.2, 0.2, 30.0, 30.0, 30.0],  # the median of the last parallelism trials
    ],
)
def test_no_queue_without_recent_short_trials(durations: list[float]) -> None:
    assert queued_ahead(_master(durations)) == 0


def test_cached_trials_do_not_count_as_short() -> None:
    # A cache hit takes no time on a worker: it says nothing about the trials that run.
    master = _master([30.0] * 4)
    master.state.trials.extend(
        TrialResult(f"c{i}", {"x": 0.1}, TrialStatus.CACHED, score=0.1, duration=0.01)
        for i in range(3)
    )
    assert queued_ahead(master) == 0


@pytest.mark.parametrize(
    ("slots", "queue_ahead"),
    [
        (None, True),  # not the job's own workers (an address, a GPU job): unknown slots
        (8, True),  # more slots than parallelism: a queued trial would run beside them
        (4, False),  # the settings forbid it (a stopper resumes trials as slots free)
    ],
)
def test_no_queue_where_a_queued_trial_could_run_beside_the_others(
    slots: int | None, queue_ahead: bool
) -> None:
    assert queued_ahead(_master([0.5] * 4, slots=slots, queue_ahead=queue_ahead)) == 0
