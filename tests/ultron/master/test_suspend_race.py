"""The async loop's resumes when a stopper decides before a suspended trial has returned."""

from __future__ import annotations

import uuid

import redis

from tests.ultron.master.simulated import Instant, simulated_master
from ultron.algorithms.base import Direction
from ultron.algorithms.space import LogUniform, SearchSpace
from ultron.algorithms.stoppers.pbt import PBT
from ultron.master.async_loop import _run_commands
from ultron.master.early_stopping import StopperDriver
from ultron.master.job_state import JobState, JobStore
from ultron.master.loops import Master
from ultron.simulation.benchmark import SimulatedClock
from ultron.simulation.jobs import SimulatedDispatcher
from ultron.trial_records import TrialResult, TrialStatus

SPACE = SearchSpace({"lr": LogUniform(0.01, 1.0)})


class _Lagging(SimulatedDispatcher):
    """The simulated dispatcher with the trials the test says are still running.

    A stand-in for the real one (Dask and a worker): what is under test is a trial whose
    boundary report the master judged while the trial itself ran on (it hears the decision at
    its next report), which the simulated dispatcher never shows: it honours a decision at once.
    """

    def __init__(self) -> None:
        super().__init__(
            Instant(SPACE, key="lr", direction=Direction.MAXIMIZE, max_resource=4),
            SimulatedClock(),
        )
        self.running: set[str] = set()

    @property
    def in_flight(self) -> int:
        return len(self.running)


CONFIGS = {"0000": {"lr": 0.1}, "0001": {"lr": 1.0}}


def _pbt_master(
    store: JobStore | None = None, state: JobState | None = None
) -> tuple[Master, _Lagging]:
    """A master of population 2 with one round at step 2, from ``state`` where given."""
    pbt = PBT(max_resource=4, interval=2, population=2, direction="maximize", search_space=SPACE)
    driver = StopperDriver(pbt, None, "job", metric="accuracy")
    if state is not None and state.stopper:
        driver.load_state_dict(state.stopper)  # as the search loop does on a resume
    dispatcher = _Lagging()
    master = simulated_master(
        dispatcher, num_iterations=2, parallelism=2, strategy="grid", seed=0, driver=driver,
        store=store, state=state,
    )  # fmt: skip
    return master, dispatcher


def _boundary_reports(master: Master) -> None:
    """Both trials start and report steps 1 and 2 (the round's boundary)."""
    driver = master.driver
    assert driver is not None
    for trial_id, config in CONFIGS.items():
        driver.start_trial(trial_id, config)
    for step in (1, 2):
        for trial_id, config in CONFIGS.items():
            driver.feed({"trial_id": trial_id, "step": step, "accuracy": step * config["lr"]})


def _returns(master: Master, dispatcher: _Lagging, trial_id: str) -> None:
    """The trial returns, and is judged suspended."""
    dispatcher.running.discard(trial_id)
    row = TrialResult(trial_id, CONFIGS[trial_id], TrialStatus.COMPLETED, score=1.0)
    assert master.driver is not None
    assert master.suspensions.judge(master.driver, row) is None


def test_a_trial_suspended_before_it_returned_still_gets_its_exploit() -> None:
    # 0001 reported its boundary and returned; 0000's boundary report was judged too, but 0000
    # still runs (it hears the suspension with its next report). The round is decided then;
    # 0000's exploit must wait for 0000's return, not be dropped (which left it suspended for
    # good and ended it stopped after 0001 completed).
    master, dispatcher = _pbt_master()
    _boundary_reports(master)
    dispatcher.running = {"0000"}
    _returns(master, dispatcher, "0001")
    assert _run_commands(master, 1, can_start_new=False) == []
    _returns(master, dispatcher, "0000")
    assert _run_commands(master, 2, can_start_new=False) == []
    started = {(r.trial_id, r.exploit_from) for r in master._to_start}
    assert started == {("0000", "0001"), ("0001", None)}
    assert not master.suspensions.trials


def _round_decided_while_0000_runs(redis_url: str) -> tuple[JobStore, Master]:
    """A master with a job store in Redis: both trials reported the round's boundary, 0001
    returned suspended, 0000 still runs."""
    store = JobStore(redis.Redis.from_url(redis_url), f"restart-{uuid.uuid4().hex[:8]}")
    master, dispatcher = _pbt_master(store, JobState(store.job_id))
    _boundary_reports(master)
    dispatcher.running = {"0000"}
    _returns(master, dispatcher, "0001")
    return store, master


def test_a_restarted_master_honours_the_resume_its_predecessor_held(redis_url: str) -> None:
    # As above, 0000's exploit is decided while 0000 still runs, and the master saves the job's
    # state; then it dies. The next master loads that state from Redis, 0000 runs again from
    # its checkpoint (an interrupted trial) and returns suspended: it gets the held exploit.
    store, master = _round_decided_while_0000_runs(redis_url)
    assert _run_commands(master, 1, can_start_new=False) == []
    assert set(master.suspensions.held) == {"0000"}
    master._checkpoint()

    restarted, dispatcher = _pbt_master(store, store.load())
    assert restarted.driver is not None
    restarted.driver.start_trial("0000", CONFIGS["0000"])  # relaunched, from its checkpoint
    _returns(restarted, dispatcher, "0000")
    assert _run_commands(restarted, 1, can_start_new=False) == []
    assert [(r.trial_id, r.exploit_from, r.resume) for r in restarted._to_start] == [
        ("0000", "0001", True)
    ]
    # 0001 returned suspended before the restart: kept, its resume waits for a free slot.
    assert set(restarted.suspensions.trials) == {"0001"} and not restarted.suspensions.held


def test_a_restarted_master_keeps_the_trials_that_returned_suspended(redis_url: str) -> None:
    # 0001 returned suspended (no row yet, no longer running) when the master saved the job's
    # state and died. The next master must still hold it: the round's resume for 0001 starts it
    # again with its last result's attempts, instead of waiting for a return that never comes.
    store, master = _round_decided_while_0000_runs(redis_url)
    master._checkpoint()

    restarted, dispatcher = _pbt_master(store, store.load())
    assert restarted.suspensions.trials == master.suspensions.trials
    assert restarted.driver is not None
    restarted.driver.start_trial("0000", CONFIGS["0000"])  # relaunched, from its checkpoint
    _returns(restarted, dispatcher, "0000")
    assert _run_commands(restarted, 2, can_start_new=False) == []
    started = {(r.trial_id, r.exploit_from, r.attempt) for r in restarted._to_start}
    assert started == {("0000", "0001", 2), ("0001", None, 2)}
    assert not restarted.suspensions.trials and not restarted.suspensions.held
