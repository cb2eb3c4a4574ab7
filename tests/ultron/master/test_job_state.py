"""The job's state and its stored spec, on a real Redis server."""

from __future__ import annotations

import json
import uuid

import redis

from ultron.master.job_state import JobState, JobStatus, JobStore
from ultron.spec.job import JobSpec
from ultron.trial_records import TrialResult, TrialStatus


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


def _spec(**fields: object) -> JobSpec:
    base = {"code": "/work/code", "model": "pkg.train:Model", "search_space": {"x": [1, 2]}}
    return JobSpec.model_validate({**base, **fields}, context={"check_paths": False})


def test_the_first_spec_and_code_hash_are_stored_and_never_overwritten(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    store = JobStore(client, f"job-{uuid.uuid4().hex}")
    assert store.stored_spec() is None
    first = _spec(num_iterations=4)
    assert store.save_spec(first, code_hash="c0de") is True
    assert store.save_spec(_spec(num_iterations=9, seed=1), code_hash="beef") is False
    stored = store.stored_spec()
    assert stored is not None
    assert stored.spec == first.model_dump(mode="json")  # our field names, as JSON
    assert stored.code_hash == "c0de"
    saved = client.hgetall(store.key)
    assert json.loads(saved[b"spec"])["num_iterations"] == 4 and saved[b"code_hash"] == b"c0de"


def test_the_stored_spec_outlives_state_updates_and_finalize(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    store = JobStore(client, f"job-{uuid.uuid4().hex}")
    store.save_spec(_spec(), code_hash="c0de")
    loaded = store.load()  # a job with a stored spec and nothing else is a new job's state
    assert loaded is not None and loaded.trials == [] and loaded.next_trial == 0
    state = JobState(store.job_id, next_trial=1)
    state.trials.append(_trial(0))
    store.save(state, state.trials)
    store.mark_running({"0001": {"attempt": 1}})
    store.set_status(JobStatus.COMPLETED)
    store.clear_transient()
    stored = store.stored_spec()
    assert stored is not None and stored.code_hash == "c0de" and stored.spec["seed"] == 0
    assert store.trial_count() == 1


def test_stored_spec_reads_a_decoding_client_too(redis_url: str) -> None:
    store = JobStore(redis.Redis.from_url(redis_url, decode_responses=True), f"j-{uuid.uuid4()}")
    store.save_spec(_spec(), code_hash="c0de")
    stored = store.stored_spec()
    assert stored is not None and stored.code_hash == "c0de" and stored.spec["model"]


def test_a_resumed_job_clears_the_stop_flags_an_earlier_goal_left_and_keeps_a_stoppers(
    redis_url: str,
) -> None:
    # The earlier master reached its goal (or was cancelled), flagged its running trials and
    # died before finalize: the next run's trials of those ids must start. A stopper's flag is
    # the stopper's, read at the trial's next report.
    client = redis.Redis.from_url(redis_url)
    store = JobStore(client, f"stops-{uuid.uuid4().hex[:8]}")
    goal = {"decision": "time budget", "at": 1.0, "grace": 30.0, "job": True}
    client.set(store.transient("stop", "0001"), json.dumps(goal))
    client.set(store.transient("stop", "0002"), json.dumps({"decision": "stop", "at": 1.0}))
    assert store.clear_job_stops(["0001", "0002", "0003"]) == ["0001"]
    assert not client.exists(store.transient("stop", "0001"))
    assert client.exists(store.transient("stop", "0002"))
    assert store.clear_job_stops([]) == []
