"""Calls in flight when the Sentinel master dies, and what a retry may send twice.

A transaction (``JobStore.flush``), a Lua script (the limiter's), a pipeline with a blocking pop
and a subscription are each waiting on the master when it is SIGKILLed: the retry reconnects
through the sentinels to the promoted replica, where the call is applied once. redis-py's own
Sentinel connection reconnected a retried call to the dead master's address until the retry
budget ran out (``Error 111 connecting to ...``). A write is held in flight by pausing the
master's writes (``CLIENT PAUSE ... WRITE``) before it is sent.

A retried transaction may have been applied before its reply was lost: the job store's are
sent twice here and must leave what one leaves.
"""

from __future__ import annotations

import importlib.util
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import redis
from redis.client import Pipeline

from ultron.limiter.resource_limiter import ResourceLimiter
from ultron.master.job_state import JobState, JobStore
from ultron.redis.client import connect
from ultron.trial_records import TrialResult, TrialStatus


def _sentinel_module() -> ModuleType:
    # pytest runs in importlib mode, so test folders are not packages to import from: load the
    # Sentinel setup from the test that defines it, by path.
    path = Path(__file__).with_name("test_sentinel.py")
    spec = importlib.util.spec_from_file_location("_sentinel_setup", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_setup = _sentinel_module()
SentinelSetup = _setup.SentinelSetup
_wait_for = _setup._wait_for


def _blocked_on_master(setup: Any, clients: int = 1) -> Callable[[], bool]:
    """Whether ``clients`` clients are blocked on the master (a pop, or a paused write)."""
    control = setup._client(setup.master_port)
    return lambda: int(control.info("clients")["blocked_clients"]) >= clients


def _in_flight(setup: Any, call: Callable[[], Any]) -> Any:
    """Runs ``call`` in a thread, kills the master once the call waits on it, returns its result.

    The master pauses writes (``CLIENT PAUSE ... WRITE``) first, so a write is in flight (sent,
    unanswered) when the master dies; a blocking pop blocks by itself.
    """
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as error:  # handed to the test
            outcome["error"] = error

    setup._client(setup.master_port).execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    _wait_for("the call blocked on the master", _blocked_on_master(setup))
    setup.kill_master()
    thread.join(60)
    assert not thread.is_alive(), "the call never came back"
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


@pytest.fixture
def short_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """20 s of retries: a failover takes 2-5 s; a client stuck on the dead master fails."""
    monkeypatch.setenv("ULTRON_REDIS_RETRY_S", "20")


@pytest.mark.usefixtures("short_budget")
def test_a_transaction_in_flight_when_the_master_dies_is_applied_on_the_new_master(
    tmp_path: Path,
) -> None:
    setup = SentinelSetup(tmp_path / "sentinel").start()
    client = connect(setup.url)
    try:
        store = JobStore(client, "job-in-flight", namespace="in-flight")
        store.mark_running({"0000": {"attempt": 1}}, defer=True)
        _in_flight(setup, store.flush)  # JobStore.flush: one MULTI/EXEC
        assert store.running() == {"0000": {"attempt": 1}}
        assert client.connection_pool.get_master_address()[1] == setup.replica_port  # type: ignore[attr-defined]
    finally:
        client.close()
        setup.stop()


@pytest.mark.usefixtures("short_budget")
def test_a_script_in_flight_when_the_master_dies_runs_on_the_new_master(tmp_path: Path) -> None:
    setup = SentinelSetup(tmp_path / "sentinel").start()
    client = connect(setup.url)
    try:
        limiter = ResourceLimiter(client, max_units=4, namespace="in-flight")
        assert limiter.in_use() == 0  # the script is loaded on the master that dies
        lease = _in_flight(setup, lambda: limiter.acquire("job-a", 3, ttl_s=300))
        assert lease is not None and limiter.holders()["job-a"].lease_id == lease.lease_id
        assert limiter.acquire("job-b", 2) is None  # the 3 units count on the new master
    finally:
        client.close()
        setup.stop()


@pytest.mark.usefixtures("short_budget")
def test_a_blocking_pop_and_a_pipeline_in_flight_ride_a_failover(tmp_path: Path) -> None:
    setup = SentinelSetup(tmp_path / "sentinel").start()
    client = connect(setup.url)
    pusher = connect(setup.url)
    try:
        pipe = client.pipeline(transaction=False)
        pipe.set("in-flight:before", "1")
        pipe.blpop(["in-flight:queue"], timeout=30)
        outcome: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: outcome.update(value=pipe.execute()))
        thread.start()
        _wait_for("the pop blocked on the master", _blocked_on_master(setup))
        setup.kill_master()
        setup.wait_for_failover()
        # Sent again to the new master, the pop blocks there until this push.
        _wait_for("the pop blocked on the new master", lambda: _blocked_on(setup, pusher))
        pusher.rpush("in-flight:queue", "item")
        thread.join(60)
        assert outcome.get("value") == [True, (b"in-flight:queue", b"item")]
    finally:
        client.close()
        pusher.close()
        setup.stop()


@pytest.mark.usefixtures("short_budget")
def test_a_subscriber_resubscribes_on_the_new_master(tmp_path: Path) -> None:
    """The limiter's waiting jobs listen on a channel: after a failover they hear the new one."""
    setup = SentinelSetup(tmp_path / "sentinel").start()
    client, publisher = connect(setup.url), connect(setup.url)
    events = client.pubsub(ignore_subscribe_messages=True)
    try:
        events.subscribe("in-flight:events")
        assert events.get_message(timeout=0.1) is None
        setup.kill_master()
        setup.wait_for_failover()
        heard: list[Any] = []

        def listening() -> bool:  # get_message reconnects through the sentinels, resubscribed
            if (message := events.get_message(timeout=0.1)) is not None:
                heard.append(message["data"])
            subscribers = dict(publisher.pubsub_numsub("in-flight:events"))
            return bool(subscribers[b"in-flight:events"] >= 1)

        _wait_for("the subscriber back on the new master", listening)
        assert publisher.publish("in-flight:events", "news") == 1
        _wait_for("the news heard", lambda: listening() and heard == [b"news"])
    finally:
        events.close()
        client.close()
        publisher.close()
        setup.stop()


def _blocked_on(setup: Any, client: redis.Redis) -> bool:
    return bool(int(client.info("clients")["blocked_clients"]) >= 1)


class _ReplayingRedis(redis.Redis):
    """Sends every transaction twice: what a retry after a lost reply does to one applied."""

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Pipeline:
        return _ReplayingPipeline(
            self.connection_pool, self.response_callbacks, transaction, shard_hint
        )


class _ReplayingPipeline(Pipeline):
    def execute(self, raise_on_error: bool = True) -> list[Any]:
        stack = list(self.command_stack)
        super().execute(raise_on_error)  # applied; its reply "lost"
        self.command_stack = stack
        return super().execute(raise_on_error)


def test_the_job_stores_transactions_may_be_sent_twice(redis_url: str) -> None:
    store = JobStore(_ReplayingRedis.from_url(redis_url), f"job-{uuid.uuid4().hex[:8]}")
    state = JobState(store.job_id, algorithm={"seed": 1})
    first = _trial(0)
    state.trials.append(first)
    store.save(state, [first])
    for number in (1, 2):  # two strategy calls, each appended to the log by its own save
        state.strategy_log.append(["sample", number])
        state.trials.append(_trial(number))
        store.save(state, state.trials[-1:], logged=state.strategy_log[-1:])
    store.mark_running({"0003": {"attempt": 1}, "0004": {"attempt": 1}})
    store.mark_done("0003")

    loaded = store.load()
    assert loaded is not None
    assert loaded.strategy_log == [["sample", 1], ["sample", 2]]  # each call once
    assert [t.trial_id for t in loaded.trials] == ["0000", "0001", "0002"]
    assert loaded.algorithm == {"seed": 1} and store.running() == {"0004": {"attempt": 1}}
    state.algorithm, state.strategy_log = {"seed": 2}, []
    store.save(state)  # a snapshot empties the log, however often it is sent
    assert store.load() == JobState(store.job_id, trials=loaded.trials, algorithm={"seed": 2})


def _trial(number: int) -> TrialResult:
    return TrialResult(f"{number:04d}", {"x": number}, TrialStatus.COMPLETED, score=float(number))
