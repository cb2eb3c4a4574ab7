"""The job's lease and heartbeat (one master per job) and the ``lost`` state, on a real Redis."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from ultron.errors import JobBusyError
from ultron.master.heartbeat import MasterLease, effective_status, holding_the_job
from ultron.master.job_state import JobStatus
from ultron.master.overview import overview
from ultron.redis import keys


@pytest.fixture
def job_id(redis_client: redis.Redis) -> Iterator[str]:
    name = f"beat-{uuid.uuid4().hex[:8]}"
    yield name
    redis_client.delete(keys.job(name), keys.job_master(name))


def test_take_renew_and_compare_and_delete(redis_client: redis.Redis, job_id: str) -> None:
    first = MasterLease(redis_client, job_id, ttl_s=30.0)
    second = MasterLease(redis_client, job_id, ttl_s=30.0)
    assert first.take() and not second.take()
    assert first.take()  # taking it again is holding it
    assert first.renew() and not second.renew()
    assert redis_client.hget(keys.job(job_id), "heartbeat") is not None
    assert not second.release()  # compare and delete: not another master's lease
    assert first.holder() == first.token
    assert first.release() and first.holder() is None
    assert second.take()
    second.release()


def test_a_lease_lost_is_not_renewed_and_one_expired_is_taken_back(
    redis_client: redis.Redis, job_id: str
) -> None:
    lease = MasterLease(redis_client, job_id, ttl_s=30.0)
    assert lease.take()
    redis_client.delete(lease.key)  # it expired (the master stalled), nobody took it
    assert lease.renew() and lease.holder() == lease.token
    redis_client.set(lease.key, "elsewhere/1/other")  # another master took it over
    assert not lease.renew()
    assert redis_client.get(lease.key) == "elsewhere/1/other"  # left as it is


def test_the_lease_expires_without_its_heartbeat(redis_client: redis.Redis, job_id: str) -> None:
    lease = MasterLease(redis_client, job_id, ttl_s=0.5)
    assert lease.take()
    assert 0 < redis_client.pttl(lease.key) <= 500  # Redis expires it; nothing of ours runs


def test_a_dead_holder_of_this_machine_is_taken_over_at_once(
    redis_client: redis.Redis, job_id: str
) -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead = MasterLease(redis_client, job_id, ttl_s=60.0)
    dead.token = f"{dead.token.split('/')[0]}/{gone.stdout.strip()}/dead"
    assert dead.take()
    heir = MasterLease(redis_client, job_id, ttl_s=60.0)
    heir.wait_to_take(0.0)  # no waiting for the 60 s lease: its process is gone
    assert heir.holder() == heir.token
    heir.release()


def test_a_live_holder_refuses_a_second_master(redis_client: redis.Redis, job_id: str) -> None:
    live = MasterLease(redis_client, job_id, ttl_s=60.0)
    live.token = f"another-host/{os.getpid()}/live"  # not ours to judge: only its TTL
    assert live.take()
    with pytest.raises(JobBusyError, match=f"job {job_id} is running in another process"):
        MasterLease(redis_client, job_id, ttl_s=60.0).wait_to_take(0.3, poll_s=0.05)
    assert live.holder() == live.token
    live.release()


def test_the_heartbeat_keeps_the_job_running_and_its_end_shows_lost(
    redis_client: redis.Redis, job_id: str
) -> None:
    redis_client.hset(keys.job(job_id), mapping={"status": "running", "updated": "1"})
    with holding_the_job(redis_client, job_id, heartbeat_s=0.1) as lease:
        first = float(redis_client.hget(keys.job(job_id), "heartbeat") or 0)
        deadline = time.monotonic() + 30
        while float(redis_client.hget(keys.job(job_id), "heartbeat") or 0) == first:
            assert time.monotonic() < deadline, "the heartbeat was never renewed"
            time.sleep(0.05)
        assert lease.holder() == lease.token
        assert overview(redis_client, job_id).status == "running"
    assert MasterLease(redis_client, job_id, ttl_s=1).holder() is None  # given back
    shown = overview(redis_client, job_id)
    assert shown.status == "lost" and shown.heartbeat is not None and shown.heartbeat > first


def test_a_master_whose_lease_was_taken_stops(redis_client: redis.Redis, job_id: str) -> None:
    told = threading.Event()
    with holding_the_job(
        redis_client, job_id, heartbeat_s=0.05, on_lost=lambda message: told.set()
    ) as lease:
        redis_client.set(lease.key, "another-host/1/heir")
        assert told.wait(30)
    assert redis_client.get(lease.key) == "another-host/1/heir"  # not released by the loser


@pytest.mark.parametrize(
    ("stored", "held", "shown"),
    [
        ("running", False, "lost"),
        ("queued", False, "lost"),
        ("preparing", False, "lost"),
        ("running", True, "running"),
        ("queued", True, "queued"),
        ("completed", False, "completed"),
        ("failed", False, "failed"),
        ("cancelled", False, "cancelled"),
    ],
)
def test_lost_is_derived_from_an_active_state_without_a_lease(
    stored: str, held: bool, shown: str
) -> None:
    assert effective_status(stored, held) == shown
    assert JobStatus(shown)  # one of the named states
