"""The async loop's resumes when a stopper decides before a suspended trial has returned."""

from __future__ import annotations

from typing import Any

from ultron.algorithms.base import Direction
from ultron.algorithms.registry import resolve_strategy
from ultron.algorithms.space import LogUniform, SearchSpace
from ultron.algorithms.stoppers.pbt import PBT
from ultron.master.async_loop import _run_commands
from ultron.master.early_stopping import StopperDriver
from ultron.master.job_state import JobState
from ultron.master.loops import Master, SearchSettings
from ultron.simulation.benchmark import LearningCurve, SimulatedClock
from ultron.simulation.jobs import MemoryCache, MemoryStore, SimulatedDispatcher
from ultron.trial_records import TrialResult, TrialStatus

SPACE = SearchSpace({"lr": LogUniform(0.01, 1.0)})


class _Unused:
    """The simulated dispatcher's benchmark; no trial is run through it here."""

    search_space = SPACE
    direction = Direction.MAXIMIZE
    max_resource = 4

    def learning_curve(self, config: dict[str, Any]) -> LearningCurve:
        raise AssertionError("not run")


class _Lagging(SimulatedDispatcher):
    """The simulated dispatcher with the trials the test says are still running.

    A stand-in for the real one (Dask and a worker): what is under test is a trial whose
    boundary report the master judged while the trial itself ran on (it hears the decision at
    its next report), which the simulated dispatcher never shows: it honours a decision at once.
    """

    def __init__(self) -> None:
        super().__init__(_Unused(), SimulatedClock())
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
    strategy = resolve_strategy("grid")(search_space=SPACE, seed=0, direction=Direction.MAXIMIZE)
    master = Master(
        settings=SearchSettings(num_iterations=2, parallelism=2),
        strategy=strategy,
        cache=MemoryCache(),
        dispatcher=dispatcher,
        store=MemoryStore("job"),
        state=JobState("job"),
        driver=driver,
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
