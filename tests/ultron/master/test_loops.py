"""The master's loops over simulated trials: what they ask the dispatcher for."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from tests.ultron.master.simulated import Instant, simulated_master
from ultron.algorithms.base import Direction
from ultron.algorithms.registry import resolve_strategy
from ultron.algorithms.space import SearchSpace, Uniform
from ultron.errors import JobFailedError
from ultron.master.job_state import JobState
from ultron.master.loops import Master, SearchSettings
from ultron.simulation.benchmark import SimulatedClock
from ultron.simulation.jobs import MemoryStore, SimulatedDispatcher
from ultron.trial_records import TrialRequest, TrialResult, TrialStatus

SPACE = SearchSpace({"x": Uniform(0.0, 1.0)})


class _Recording(SimulatedDispatcher):
    """The simulated dispatcher, keeping every request it was given (what is under test)."""

    def __init__(self) -> None:
        super().__init__(Instant(SPACE, key="x"), SimulatedClock())
        self.requests: list[TrialRequest] = []

    def start(self, *requests: TrialRequest) -> None:
        self.requests.extend(requests)
        super().start(*requests)


@pytest.mark.parametrize("loop", ["batch", "async"])
def test_an_interrupted_trial_runs_again_at_the_attempt_it_was_at(loop: str) -> None:
    # Trial 0001 was at its third attempt (a retry, or a resume after a suspension) when the
    # previous master died: attempt 1's stored answer is not this attempt's, so the trial must
    # be asked for as attempt 3, from its checkpoint.
    strategy = resolve_strategy("random")(search_space=SPACE, seed=3, direction=Direction.MINIMIZE)
    first = strategy.sample_hyperparameter_candidates(3)  # what a batch master samples again
    dispatcher = _Recording()
    master = simulated_master(
        dispatcher,
        num_iterations=6,
        parallelism=3,
        seed=3,
        interrupted={"0001": first[1]},
        interrupted_attempts={"0001": 3},
    )
    master.run_batch() if loop == "batch" else master.run_async()
    asked = {(r.trial_id, r.attempt, r.resume) for r in dispatcher.requests}
    assert ("0001", 3, True) in asked
    assert not any(r.trial_id == "0001" and r.attempt != 3 for r in dispatcher.requests)
    assert all(r.attempt == 1 and not r.resume for r in dispatcher.requests if r.trial_id != "0001")
    assert len(master.state.trials) == 6


class _FlushFails(MemoryStore):
    """A store whose writes of the running record fail from the ``fail_from``-th one on."""

    def __init__(self, fail_from: int) -> None:
        super().__init__("job")
        self.fail_from = fail_from
        self.flushes = 0

    def flush(self) -> None:
        self.flushes += 1
        if self.flushes >= self.fail_from:
            raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")


class _Broken(_Recording):
    """A dispatcher that fails as its first trial is started (the loop's own error)."""

    def start(self, *requests: TrialRequest) -> None:
        raise RuntimeError("the scheduler went away")


def _master(store: MemoryStore, dispatcher: SimulatedDispatcher | None = None) -> Master:
    return simulated_master(
        dispatcher or _Recording(), num_iterations=4, parallelism=2, seed=3, store=store
    )


@pytest.mark.parametrize("loop", ["batch", "async"])
def test_a_failed_last_flush_fails_the_job_with_its_cause(loop: str) -> None:
    counted = _FlushFails(fail_from=10**9)
    master = _master(counted)
    master.run_batch() if loop == "batch" else master.run_async()
    last = counted.flushes  # the loop's own flushes, then the one as it ends
    store = _FlushFails(fail_from=last)
    master = _master(store)
    with pytest.raises(redis.ConnectionError, match="Error 111"):
        master.run_batch() if loop == "batch" else master.run_async()
    assert len(master.state.trials) == 4 and store.flushes == last  # it was the last one


@pytest.mark.parametrize("loop", ["batch", "async"])
def test_a_flush_failing_after_the_loops_error_is_noted_on_it(
    loop: str, caplog: pytest.LogCaptureFixture
) -> None:
    master = _master(_FlushFails(fail_from=1), _Broken())
    with pytest.raises(RuntimeError, match="the scheduler went away") as info:
        master.run_batch() if loop == "batch" else master.run_async()
    assert any("running record afterwards failed too" in n for n in info.value.__notes__)
    assert any(r.exc_info and "Error 111" in str(r.exc_info[1]) for r in caplog.records)


@pytest.mark.parametrize("loop", ["batch", "async"])
@pytest.mark.parametrize("status", [TrialStatus.TIMEOUT, TrialStatus.FAILED])
def test_a_rerun_of_a_failed_job_with_its_budget_spent_fails_again(
    loop: str, status: TrialStatus
) -> None:
    # Both trials of the first run timed out (or returned NaN): the rerun with the printed
    # resume command has no trial left to run, and its table still says the job failed.
    master = _master(MemoryStore("job"))
    master.settings = SearchSettings(num_iterations=2, parallelism=2)
    master.state.trials = [
        TrialResult(f"000{i}", {"x": 0.5}, status, error="ran past trial_timeout=4")
        for i in range(2)
    ]
    with pytest.raises(JobFailedError, match="2 of 2 trials failed"):
        master.run_batch() if loop == "batch" else master.run_async()


@pytest.mark.parametrize("loop", ["batch", "async"])
def test_a_rerun_of_a_completed_job_stays_completed(loop: str) -> None:
    master = _master(MemoryStore("job"))
    master.settings = SearchSettings(num_iterations=2, parallelism=2)
    master.state.trials = [
        TrialResult(f"000{i}", {"x": 0.5}, TrialStatus.COMPLETED, score=0.5) for i in range(2)
    ]
    master.run_batch() if loop == "batch" else master.run_async()
    assert [t.status for t in master.state.trials] == [TrialStatus.COMPLETED] * 2


class _RowsStore(MemoryStore):
    """A store that keeps the ids of the rows it was given, in the order written."""

    def __init__(self) -> None:
        super().__init__("job")
        self.rows: list[str] = []

    def save(
        self, state: JobState, new: Any = (), *, logged: Any = None, first: Any = None
    ) -> None:
        super().save(state, new, logged=logged, first=first)
        self.rows.extend(t.trial_id for t in new)


class _Ordered(_Recording):
    """Notes, at each submit, how many trials had returned and how many rows were written."""

    def __init__(self, store: _RowsStore) -> None:
        super().__init__()
        self.store = store
        self.returned = 0
        self.at_submit: list[tuple[int, int]] = []

    def start(self, *requests: TrialRequest) -> None:
        self.at_submit.append((self.returned, len(self.store.rows)))
        super().start(*requests)

    def wait_one(self, wake: Any = None, timeout: float | None = None) -> Any:
        done = super().wait_one(wake, timeout)
        self.returned += done is not None
        return done


@pytest.mark.parametrize("loop", ["batch", "async"])
def test_the_next_trial_is_submitted_before_the_returned_ones_are_written(loop: str) -> None:
    # Async: the freed worker waits on the master's decision only, the row of the trial that
    # freed it is written after the next submit. Batch: a round's commit is written before the
    # next round is sampled (a resume samples that round again). Every row once, none lost.
    store = _RowsStore()
    dispatcher = _Ordered(store)
    master = _master(store, dispatcher)
    master.settings = SearchSettings(num_iterations=6, parallelism=2)
    master.run_batch() if loop == "batch" else master.run_async()
    later = [(returned, rows) for returned, rows in dispatcher.at_submit if returned]
    if loop == "async":
        assert later and all(rows < returned for returned, rows in later)
    else:
        assert later == [(2, 2), (4, 4)]
    assert sorted(store.rows) == [f"{i:04d}" for i in range(6)]
