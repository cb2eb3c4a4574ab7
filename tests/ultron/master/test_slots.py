"""The dispatcher's slots (tasks on the workers that run the trials pushed to them: the batch
loop's rounds) and the answers it reads from the workers' notices.

A real ``TrialDispatcher`` on a real Dask cluster (in-process workers, real trial processes)
and the session's real Redis.
"""

from __future__ import annotations

import json
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from distributed import Client

from tests.ultron.master.real_dispatcher import in_process_cluster, real_dispatcher
from ultron.master.dispatcher import TrialDispatcher
from ultron.master.slots import Slots
from ultron.redis import keys
from ultron.trial_records import TrialStatus

TOY = Path(__file__).parents[2] / "data" / "toy"


_MADE: list[TrialDispatcher] = []


@pytest.fixture
def two_workers() -> Iterator[Client]:
    with in_process_cluster(2) as client:
        yield client
        while _MADE:  # slots a failed test left waiting would hold their workers' close
            _MADE.pop().settle()


def _dispatcher(client: Client, tmp_path: Path, redis_url: str) -> TrialDispatcher:
    dispatcher = real_dispatcher(
        client, tmp_path, redis_url, code=TOY, model="toy_model:Timed", objective={"metric": "loss"}
    )
    _MADE.append(dispatcher)
    return dispatcher


def _request(dispatcher: TrialDispatcher, trial_id: str, x: float, sleep: float = 0.3) -> Any:
    return dispatcher.request(trial_id, {"x": x, "sleep": sleep})


def _keys_of(dispatcher: TrialDispatcher, *trial_ids: str) -> list[str]:
    return [str(k) for k, r in dispatcher._pending.items() if r.trial_id in trial_ids]


def _until_started(dispatcher: TrialDispatcher, count: int) -> list[Any]:
    """Wait (reading the notices) until ``count`` slots have started; returns them."""
    while len(dispatcher._slots.free) < count:
        assert dispatcher.wait_one(timeout=0.05) is None
    return list(dispatcher._slots.free)


def _all_results(dispatcher: TrialDispatcher) -> dict[str, Any]:
    results = {}
    while dispatcher.in_flight:
        result, _ = dispatcher.wait_one()
        results[result.trial_id] = result
    return results


def test_a_round_given_to_waiting_slots_runs_there_once_with_its_own_scores(
    tmp_path: Path, two_workers: Client, redis_url: str
) -> None:
    dispatcher = _dispatcher(two_workers, tmp_path, redis_url)
    dispatcher.start(_request(dispatcher, "0001", 1.0), _request(dispatcher, "0002", 2.0))
    dispatcher.reserve(2)  # submitted while the master waits for the round, one per worker
    first = _all_results(dispatcher)
    _until_started(dispatcher, 2)  # each once the trial ahead of it on its worker returned

    dispatcher.start(_request(dispatcher, "0003", 3.0), _request(dispatcher, "0004", 4.0))
    ran_in = _keys_of(dispatcher, "0003", "0004")
    second = _all_results(dispatcher)

    assert all(key.startswith("slot-") for key in ran_in) and len(ran_in) == 2, ran_in
    assert len(dispatcher._slots.free) == 2  # the same two, free again for the next round
    assert {str(f.key) for f in dispatcher._slots.free} == set(ran_in)
    results = {**first, **second}
    assert {t: r.status for t, r in results.items()} == {
        t: TrialStatus.COMPLETED for t in ("0001", "0002", "0003", "0004")
    }
    # Each its own configuration's score, each attempt once.
    assert {t: r.score for t, r in results.items()} == {
        "0001": 1.0,
        "0002": 2.0,
        "0003": 3.0,
        "0004": 4.0,
    }
    assert all(r.attempts == 1 for r in results.values())
    slots = list(dispatcher._slots.free)
    dispatcher.settle()  # they leave, each returning the last answer it gave
    assert sorted(s.result(timeout=30)["trial_id"] for s in slots) == ["0003", "0004"]


def test_slots_not_needed_leave_and_free_their_workers(
    tmp_path: Path, two_workers: Client, redis_url: str
) -> None:
    dispatcher = _dispatcher(two_workers, tmp_path, redis_url)
    dispatcher.reserve(2)
    slots = _until_started(dispatcher, 2)  # nothing runs: the wait adds them

    dispatcher.start(_request(dispatcher, "0001", 1.0))  # one candidate only
    dispatcher.reserve(0)  # the round is the last: the other slot leaves unrun
    assert [s.result(timeout=30) for s in slots if s.key not in dispatcher._pending] == [None]

    # Both workers take trials again: two submitted normally run beside the one in the slot.
    dispatcher.start(_request(dispatcher, "0002", 2.0), _request(dispatcher, "0003", 3.0))
    assert all(k.startswith("trial-") for k in _keys_of(dispatcher, "0002", "0003"))
    results = _all_results(dispatcher)
    assert {t: r.score for t, r in results.items()} == {"0001": 1.0, "0002": 2.0, "0003": 3.0}
    dispatcher.settle()
    assert all(s.done() for s in slots)


def test_a_slot_that_ended_gets_no_request(
    tmp_path: Path, two_workers: Client, redis_url: str
) -> None:
    dispatcher = _dispatcher(two_workers, tmp_path, redis_url)
    dispatcher.reserve(1)
    (slot,) = _until_started(dispatcher, 1)
    two_workers.cancel([slot])  # as a lost worker ends it: done, and nobody waits there

    dispatcher.start(_request(dispatcher, "0001", 1.0, sleep=0.0))
    assert _keys_of(dispatcher, "0001")[0].startswith("trial-")
    result, _ = dispatcher.wait_one(timeout=60)
    assert (result.status, result.score) == (TrialStatus.COMPLETED, 1.0)


def test_a_stale_notice_is_never_taken_for_the_trials_answer(
    tmp_path: Path, two_workers: Client, redis_url: str
) -> None:
    dispatcher = _dispatcher(two_workers, tmp_path, redis_url)
    dispatcher.start(_request(dispatcher, "0001", 1.0, sleep=0.5))
    # Pushed here, not by a worker: the notices a real run leaves behind are of an earlier
    # master's attempts (the same trial id and attempt, another configuration) and of attempts
    # told already; each must be passed over, never read as this attempt's answer.
    stale = {"trial_id": "0001", "hyperparameters": {"x": 9.0, "sleep": 0.5}}
    stale |= {"status": "completed", "score": 9.0, "attempts": 1}
    notices = keys.trial_notices(dispatcher.store.job_id, namespace=dispatcher.store.namespace)
    dispatcher.store.client.rpush(notices, f"0001:1\n{json.dumps(stale)}", "0999:1\n{}")

    result, _ = dispatcher.wait_one(timeout=60)
    assert (result.trial_id, result.status, result.score) == ("0001", TrialStatus.COMPLETED, 1.0)
    assert result.hyperparameters == {"x": 1.0, "sleep": 0.5}


class _Task:
    """A slot's future as ``Slots.stuck`` sees it: only whether it is done (no cluster: the
    rule is the bookkeeping alone)."""

    def __init__(self, key: str) -> None:
        self.key = key

    def done(self) -> bool:
        return False


def test_requests_waiting_only_for_slots_that_never_started_are_given_up_on() -> None:
    store = types.SimpleNamespace(client=None, job_id="job", namespace=keys.NAMESPACE)
    slots = Slots(store, "redis://unused")
    slots.waiting["slot-job-a"] = _Task("slot-job-a")
    slots.backlog.append(object())  # type: ignore[arg-type]
    # Behind a running trial a slot waits to start: never stuck, however long.
    assert not any(slots.stuck(running=True) for _ in range(10))
    # Nothing running and no slot started, five checks in a row: stuck.
    assert [slots.stuck(running=False) for _ in range(5)] == [False] * 4 + [True]
    # A slot that starts ends it.
    slots.started("slot-job-a")
    assert not slots.stuck(running=False)
