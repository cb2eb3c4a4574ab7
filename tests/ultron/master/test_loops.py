"""The master's loops over simulated trials: what they ask the dispatcher for."""

from __future__ import annotations

from typing import Any

import pytest

from ultron.algorithms.base import Direction
from ultron.algorithms.registry import resolve_strategy
from ultron.algorithms.space import SearchSpace, Uniform
from ultron.master.job_state import JobState
from ultron.master.loops import Master, SearchSettings
from ultron.simulation.benchmark import LearningCurve, SimulatedClock
from ultron.simulation.jobs import MemoryCache, MemoryStore, SimulatedDispatcher
from ultron.trial_records import TrialRequest

SPACE = SearchSpace({"x": Uniform(0.0, 1.0)})


class _Line:
    """One step per trial, no time: the score is x."""

    search_space = SPACE
    direction = Direction.MINIMIZE
    max_resource = 1

    def learning_curve(self, config: dict[str, Any]) -> LearningCurve:
        return LearningCurve((config["x"],), (0.0,))


class _Recording(SimulatedDispatcher):
    """The simulated dispatcher, keeping every request it was given (what is under test)."""

    def __init__(self) -> None:
        super().__init__(_Line(), SimulatedClock())
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
    strategy = resolve_strategy("random")(search_space=SPACE, seed=3, direction=Direction.MINIMIZE)
    dispatcher = _Recording()
    master = Master(
        settings=SearchSettings(num_iterations=6, parallelism=3),
        strategy=strategy,
        cache=MemoryCache(),
        dispatcher=dispatcher,
        store=MemoryStore("job"),
        state=JobState("job"),
        interrupted={"0001": first[1]},
        interrupted_attempts={"0001": 3},
    )
    master.run_batch() if loop == "batch" else master.run_async()
    asked = {(r.trial_id, r.attempt, r.resume) for r in dispatcher.requests}
    assert ("0001", 3, True) in asked
    assert not any(r.trial_id == "0001" and r.attempt != 3 for r in dispatcher.requests)
    assert all(r.attempt == 1 and not r.resume for r in dispatcher.requests if r.trial_id != "0001")
    assert len(master.state.trials) == 6
