"""The async loop's resumes when a stopper decides before a suspended trial has returned."""

from __future__ import annotations

from tests.ultron.master.simulated import Instant, simulated_master
from ultron.algorithms.base import Direction
from ultron.algorithms.space import LogUniform, SearchSpace
from ultron.algorithms.stoppers.pbt import PBT
from ultron.master.async_loop import _run_commands
from ultron.master.early_stopping import StopperDriver
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


def test_a_trial_suspended_before_it_returned_still_gets_its_exploit() -> None:
    # Population 2, one round at step 2: 0001 reported its boundary and returned; 0000's
    # boundary report was judged too, but 0000 still runs (it hears the suspension with its next
    # report). The round is decided then; 0000's exploit must wait for 0000's return, not be
    # dropped (which left it suspended for good and ended it stopped after 0001 completed).
    pbt = PBT(max_resource=4, interval=2, population=2, direction="maximize", search_space=SPACE)
    driver = StopperDriver(pbt, None, "job", metric="accuracy")
    dispatcher = _Lagging()
    master = simulated_master(
        dispatcher, num_iterations=2, parallelism=2, strategy="grid", seed=0, driver=driver
    )
    configs = {"0000": {"lr": 0.1}, "0001": {"lr": 1.0}}
    for trial_id, config in configs.items():
        driver.start_trial(trial_id, config)
    for step in (1, 2):
        for trial_id, config in configs.items():
            driver.feed({"trial_id": trial_id, "step": step, "accuracy": step * config["lr"]})

    def returns(trial_id: str) -> None:
        dispatcher.running.discard(trial_id)
        row = TrialResult(trial_id, configs[trial_id], TrialStatus.COMPLETED, score=1.0)
        assert master._judge(row) is None  # suspended

    dispatcher.running = {"0000"}
    returns("0001")
    assert _run_commands(master, 1, can_start_new=False) == []
    returns("0000")
    assert _run_commands(master, 2, can_start_new=False) == []
    started = {(r.trial_id, r.exploit_from) for r in master._to_start}
    assert started == {("0000", "0001"), ("0001", None)}
    assert not master._suspended
