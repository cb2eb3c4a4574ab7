"""The watcher of ``ultron cancel`` requests: it rides a Redis outage, a bug is logged, and a
request belongs to the run it was sent to."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator

import pytest
import redis

from ultron.master.cancel import CANCEL, request_cancel, watching_requests
from ultron.master.heartbeat import MasterLease
from ultron.redis import keys


class _Seen(logging.Handler):
    """Sets an event when the cancel module logs a record containing ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.event = threading.Event()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.records.append(record)
            self.event.set()


@pytest.fixture
def logged() -> Iterator[list[_Seen]]:
    handlers: list[_Seen] = []
    log = logging.getLogger("ultron.master.cancel")
    yield handlers
    for handler in handlers:
        log.removeHandler(handler)
    CANCEL.reset()


def _watch_log(handlers: list[_Seen], text: str) -> _Seen:
    seen = _Seen(text)
    logging.getLogger("ultron.master.cancel").addHandler(seen)
    handlers.append(seen)
    return seen


def test_a_bug_in_the_watcher_is_logged_with_its_traceback(
    redis_url: str, logged: list[_Seen]
) -> None:
    client = redis.Redis.from_url(redis_url)
    client.set_response_callback("GET", lambda response, **options: 1 / 0)  # a bug
    broke = _watch_log(logged, "the watcher of `ultron cancel` requests broke")
    with watching_requests(client, f"bug-{uuid.uuid4().hex[:6]}", token="t", every_s=0.01):
        assert broke.event.wait(30)
    (record,) = broke.records
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert isinstance(record.exc_info[1], ZeroDivisionError)
    assert not CANCEL.requested


def test_the_watcher_rides_a_redis_outage_then_cancels(redis_url: str, logged: list[_Seen]) -> None:
    job_id = f"outage-{uuid.uuid4().hex[:6]}"
    client = redis.Redis(host="127.0.0.1", port=1)  # nothing listens there: Redis is away
    away = _watch_log(logged, "cannot read cancel requests for now")
    cancelled = _watch_log(logged, "cancelled on request")
    real = redis.Redis.from_url(redis_url)
    lease = MasterLease(real, job_id, ttl_s=30.0)
    assert lease.take()
    with watching_requests(client, job_id, token=lease.token, every_s=0.01):
        assert away.event.wait(30)
        client.connection_pool = real.connection_pool  # Redis is back
        request_cancel(real, job_id)
        assert cancelled.event.wait(30)
    assert CANCEL.requested and len(away.records) == 1  # one warning for the outage
    real.delete(keys.job_cancel(job_id))
    lease.release()


def test_a_request_to_a_dead_run_does_not_cancel_the_next_one(
    redis_url: str, logged: list[_Seen]
) -> None:
    """Issue 31 item 5: the run that was asked died; the next run of the job ignores it."""
    client = redis.Redis.from_url(redis_url)
    job_id = f"dead-{uuid.uuid4().hex[:6]}"
    dead = MasterLease(client, job_id, ttl_s=30.0)
    assert dead.take()
    assert request_cancel(client, job_id)  # sent to the run holding the lease, which dies
    client.delete(keys.job_master(job_id))  # its lease expired
    assert not request_cancel(client, job_id)  # no run holds it now: nothing is asked
    polled = _watch_log(logged, "cancelled on request")
    resumed = MasterLease(client, job_id, ttl_s=30.0)
    assert resumed.take()
    with watching_requests(client, job_id, token=resumed.token, every_s=0.01):
        # The dead run's request is still there; the watcher reads it many times meanwhile.
        assert client.exists(keys.job_cancel(job_id))
        assert not polled.event.wait(0.5)  # a window is the point here: no cancel in it
        assert request_cancel(client, job_id)  # one sent to this run cancels it
        assert polled.event.wait(30)
    assert CANCEL.requested
    client.delete(keys.job_cancel(job_id))
    resumed.release()
