"""Short trials in the async loop wait queued behind the job's busy workers
(:func:`ultron.master.async_loop.queued_ahead`): never more than ``parallelism`` of them run at
once, and every queued trial runs once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import ultron
from tests.flows.elastic import most_at_once
from ultron.master.dispatcher import TrialDispatcher
from ultron.trial_records import TrialStatus

TOY = Path(__file__).parents[1] / "data" / "toy"

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


def test_short_trials_queue_behind_busy_workers_and_never_run_beside_them(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    submitted: list[int] = []  # the trials in flight after each submit (instrumentation)
    start = TrialDispatcher.start

    def counted(self: TrialDispatcher, *requests: Any) -> None:
        start(self, *requests)
        submitted.append(self.in_flight)

    monkeypatch.setattr(TrialDispatcher, "start", counted)
    trials = 16
    result = ultron.run(
        {
            "name": "queue-ahead",
            "code": str(TOY),
            "model": "toy_model:Timed",
            "search_space": {"x": [float(x) for x in range(trials)], "sleep": [0.3]},
            "strategy": "grid",
            "loop": "async",
            "num_iterations": trials,
            "parallelism": 2,
            "objective": {"metric": "loss"},
            "storage": str(tmp_path / "runs"),
            "redis_url": redis_url,
            "cache": False,
        }
    )
    assert [t.status for t in result.trials] == [TrialStatus.COMPLETED] * trials
    assert sorted(t.score for t in result.trials) == [float(x) for x in range(trials)]
    # Once the first trials were back (0.3 s: short), one waited behind each of the 2 workers.
    assert max(submitted) == 4, submitted
    spans = [(t.metrics["start"], t.metrics["end"]) for t in result.trials]
    assert most_at_once(spans, 0.0, float("inf")) == 2
