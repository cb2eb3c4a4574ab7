"""Short trials in the async loop wait queued behind the job's busy workers
(:func:`ultron.master.async_loop.queued_ahead`), and the batch loop's rounds in slots on them
(:mod:`ultron.master.slots`): never more than ``parallelism`` of them run at once, every
trial runs once, and one lost with its worker before it started does not spend a retry."""

from __future__ import annotations

import json
import os
import signal
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

import ultron
from tests.flows.dask_processes import wait_for
from tests.flows.elastic import most_at_once
from ultron.master import async_loop
from ultron.master.dispatcher import TrialDispatcher
from ultron.master.slots import Slots
from ultron.redis import keys
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
    _short_trials_once(tmp_path, redis_url, trials=16, loop="async")
    # Once the first trials were back (0.3 s: short), one waited behind each of the 2 workers.
    assert max(submitted) == 4, submitted


@pytest.fixture
def given(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The requests given to slots, in order, as the job runs (instrumentation)."""
    requests: list[Any] = []
    take = Slots.take

    def counted(self: Slots, new: list[Any]) -> Any:
        pairs, rest = take(self, new)
        requests.extend(request for request, _ in pairs)
        return pairs, rest

    monkeypatch.setattr(Slots, "take", counted)
    return requests


def test_rounds_of_short_trials_start_in_slots_and_never_run_beside_each_other(
    tmp_path: Path, redis_url: str, given: list[Any]
) -> None:
    # The batch loop's rounds cannot queue (each is sampled from the last one's results): their
    # trials run in slots on the workers (ultron.master.slots) instead.
    result = _short_trials_once(tmp_path, redis_url, trials=10, loop="batch")
    assert all(t.attempts == 1 for t in result.trials)
    # The first round's first durations make the loop keep slots from the second round on
    # (trials 0002 and after); the first round is submitted as tasks.
    in_slots = sorted(int(r.trial_id) for r in given)
    assert in_slots == list(range(2, 10)), in_slots


def test_rounds_of_trials_that_are_not_short_run_as_tasks_and_no_slot_takes_one(
    tmp_path: Path, redis_url: str, given: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before the first trial returns, the batch loop keeps slots for the next round; the first
    # durations say the trials are not short (the rule's threshold lowered under 0.3 s), so
    # the slots leave before they take a request, and every round is submitted as tasks.
    monkeypatch.setattr(async_loop, "QUEUE_AHEAD_BELOW_S", 0.1)
    result = _short_trials_once(tmp_path, redis_url, trials=6, loop="batch")
    assert all(t.attempts == 1 for t in result.trials)
    assert given == []


def test_a_trial_in_a_slot_whose_worker_is_lost_is_retried_and_the_rounds_go_on(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch, given: list[Any]
) -> None:
    # Batch loop, P=1, retries: 1. The worker dies while the first trial given to a slot
    # trains its first epoch: that attempt crashes, its retry resumes from the checkpoint, new
    # slots come on the restarted worker and the later rounds run in them.
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("TOY_CALLS_FILE", str(calls))
    killed: dict[str, Any] = {}

    def log() -> list[dict[str, Any]]:
        return (
            [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
        )

    def kill_the_worker() -> None:
        def in_a_slot() -> dict[str, Any] | None:
            first = given[0].hyperparameters["x"] if given else None
            return next((e for e in log() if e["x"] == first), None)

        wait_for(lambda: in_a_slot() is not None, "the first epoch of a trial in a slot")
        killed.update(in_a_slot() or {})
        os.kill(killed["worker_pid"], signal.SIGKILL)

    result = _killed_once(kill_the_worker, tmp_path, redis_url, loop="batch", retries=1)
    assert killed, "no worker was killed"
    assert [t.status for t in result.trials] == [TrialStatus.COMPLETED] * 6
    assert sorted(t.score for t in result.trials) == [float(x) for x in range(6)]
    x = killed["x"]
    assert [t.attempts for t in result.trials if t.score == x] == [2]
    # The retry went on from the checkpoint, and later rounds ran in slots again.
    assert [e["epoch"] for e in log() if e["x"] == x and e["resume"]] in ([1, 2], [2])
    xs = [r.hyperparameters["x"] for r in given]
    assert len(xs) > xs.index(x) + 1, xs


def _killed_once(kill: Callable[[], None], tmp_path: Path, redis_url: str, **spec: Any) -> Any:
    """A job of 6 trials of 3 epochs of 0.15 s at parallelism 1 (``spec``: the loop, the
    retries, the job id), with ``kill`` running beside it."""
    job_id = spec.pop("job_id", None)
    killer = threading.Thread(target=kill, daemon=True)
    killer.start()
    result = ultron.run(
        {
            "name": "queue-lost",
            "code": str(TOY),
            "model": "toy_model:Epochs",
            "search_space": {"x": [float(x) for x in range(6)], "epochs": [3], "epoch_s": [0.15]},
            "strategy": "grid",
            "num_iterations": 6,
            "parallelism": 1,
            "objective": {"metric": "loss"},
            "storage": str(tmp_path / "runs"),
            "redis_url": redis_url,
            "cache": False,
            **spec,
        },
        job_id=job_id,
    )
    killer.join(timeout=5)
    return result


def _short_trials_once(tmp_path: Path, redis_url: str, *, trials: int, loop: str) -> Any:
    """A job of ``trials`` trials of 0.3 s at parallelism 2; checks that each completed with
    its own score and that no more than 2 ran at once."""
    result = ultron.run(
        {
            "name": "queue-ahead",
            "code": str(TOY),
            "model": "toy_model:Timed",
            "search_space": {"x": [float(x) for x in range(trials)], "sleep": [0.3]},
            "strategy": "grid",
            "loop": loop,
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
    spans = [(t.metrics["start"], t.metrics["end"]) for t in result.trials]
    assert most_at_once(spans, 0.0, float("inf")) == 2
    return result


def test_a_trial_queued_on_a_lost_worker_runs_without_spending_a_retry(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # retries: 0. The worker dies while a trial runs and the next one waits behind it: the one
    # that ran is crashed (no retry left); the one that waited never started, so it is
    # submitted again as if nothing happened, and completes.
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("TOY_CALLS_FILE", str(calls))
    client = redis.Redis.from_url(redis_url)
    job_id = f"queue-lost-{uuid.uuid4().hex[:8]}"
    running = keys.job_run(job_id, "running")
    killed: dict[str, Any] = {}

    def log() -> list[dict[str, Any]]:
        return (
            [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
        )

    def kill_the_worker() -> None:
        # The moment: a trial (the third or later: the first ones' durations make the loop
        # queue) has trained its first epoch of three, and another waits behind it (two in the
        # running record; P=1).
        def one_running_one_queued() -> bool:
            entries = log()
            return len({e["x"] for e in entries}) >= 3 and client.hlen(running) == 2

        wait_for(one_running_one_queued, "a trial running and one queued behind it")
        killed.update(log()[-1])
        os.kill(killed["worker_pid"], signal.SIGKILL)

    result = _killed_once(
        kill_the_worker, tmp_path, redis_url, loop="async", retries=0, job_id=job_id
    )
    assert killed, "no worker was killed"
    # The one running then crashed (it started: no retry left); the one that waited was
    # submitted again, as attempt 2, and completed.
    crashed = [t for t in result.trials if t.status is TrialStatus.CRASHED]
    completed = [t for t in result.trials if t.status is TrialStatus.COMPLETED]
    assert len(crashed) == 1 and len(completed) == 5, [(t.status, t.error) for t in result.trials]
    assert crashed[0].attempts == 1 and "KilledWorker" in (crashed[0].error or "")
    assert [t.attempts for t in completed].count(2) == 1
    assert {e["x"] for e in log()} == {float(x) for x in range(6)}
