"""The job's state and the score cache, on a real Redis server."""

from __future__ import annotations

import uuid

import redis

from ultron.master.job_state import JobState, JobStatus, JobStore
from ultron.master.score_cache import ScoreCache
from ultron.worker.trial import TrialResult, TrialStatus


def _trial(i: int, status: TrialStatus = TrialStatus.COMPLETED) -> TrialResult:
    return TrialResult(f"{i:04d}", {"x": i}, status, score=float(i), metrics={"loss": float(i)})


def test_state_round_trip_writes_only_new_rows(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    store = JobStore(client, f"job-{uuid.uuid4().hex}")
    assert store.load() is None
    state = JobState(store.job_id, algorithm={"rng": {"state": 1}}, next_trial=2)
    first = [_trial(0), _trial(1, TrialStatus.FAILED)]
    state.trials.extend(first)
    state.curves = {"0000": [{"step": 0, "loss": 1.0}]}
    store.save(state, first)
    state.trials.append(_trial(2))
    state.next_trial = 3
    store.save(state, state.trials[-1:])
    loaded = store.load()
    assert loaded is not None
    assert loaded.trials == state.trials
    assert loaded.trials[1].status is TrialStatus.FAILED
    assert loaded.algorithm == {"rng": {"state": 1}} and loaded.next_trial == 3
    assert loaded.curves == {"0000": [{"step": 0, "loss": 1.0}]}
    assert loaded.status is JobStatus.RUNNING


def test_transient_keys_are_cleared_and_persistent_ones_stay(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    store = JobStore(client, f"job-{uuid.uuid4().hex}")
    store.save(JobState(store.job_id), [_trial(0)])
    store.mark_running({"0001": {"attempt": 1}})
    client.rpush(store.transient("reports", "0001"), "{}")
    assert store.running() == {"0001": {"attempt": 1}}
    assert store.clear_transient() == 2
    assert store.transient_keys() == []
    assert client.exists(store.key, store.trials_key) == 2


def test_score_cache_answers_equal_configurations(redis_url: str) -> None:
    cache = ScoreCache(redis.Redis.from_url(redis_url), code_hash=uuid.uuid4().hex)
    cache.put({"b": 2, "a": 1.5}, {"score": 0.25, "metrics": {}})
    hits = cache.get_many([{"a": 1.5, "b": 2}, {"a": 1.5, "b": 3}])
    assert hits == [{"score": 0.25, "metrics": {}}, None]  # key order does not matter
    assert len(cache) == 1
    other = ScoreCache(redis.Redis.from_url(redis_url), code_hash=uuid.uuid4().hex)
    assert other.get_many([{"a": 1.5, "b": 2}]) == [None]  # another code base, another cache


def test_score_cache_of_other_data_is_another_cache(redis_url: str) -> None:
    code = uuid.uuid4().hex
    client = redis.Redis.from_url(redis_url)
    ScoreCache(client, code_hash=code, data_hash="aaaa").put({"a": 1}, {"score": 1.0})
    assert ScoreCache(client, code_hash=code, data_hash="aaaa").get_many([{"a": 1}]) != [None]
    assert ScoreCache(client, code_hash=code, data_hash="bbbb").get_many([{"a": 1}]) == [None]
    assert ScoreCache(client, code_hash=code).get_many([{"a": 1}]) == [None]
