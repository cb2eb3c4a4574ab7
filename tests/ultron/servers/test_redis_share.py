"""Sharing the embedded Redis server: one per data folder, found by pid, stopped by its last use."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ultron.errors import UltronError
from ultron.servers.redis_share import EmbeddedRedisUse, ensure_embedded_redis


def _pid_of(url: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return int(client.info("server")["process_id"])
    finally:
        client.close()


@pytest.fixture
def folder(tmp_path: Path, reap_redis_servers: Callable[[Path], list[int]]) -> Iterator[Path]:
    """The data folder of a test's embedded server; no server of it outlives the test."""
    yield tmp_path
    left = reap_redis_servers(tmp_path)
    assert left == [], f"redis-server(s) {left} left running in {tmp_path}"


def test_ensure_reuses_a_live_server_and_the_last_use_stops_it(
    folder: Path, redis_servers: Callable[[Path], list[int]]
) -> None:
    first = ensure_embedded_redis(folder, appendonly=False)
    assert first.started
    state = json.loads((folder / "redis.json").read_text())
    assert state == {"url": first.url, "pid": first.pid} and _pid_of(first.url) == first.pid
    second = ensure_embedded_redis(folder)
    assert (second.url, second.pid, second.started) == (first.url, first.pid, False)
    assert first.release() is False  # the starter leaves first: the server stays
    assert redis.Redis.from_url(second.url).ping() is True
    assert (folder / "redis.json").exists()
    assert first.release() is False  # idempotent
    assert second.release() is True
    assert not (folder / "redis.json").exists()
    assert redis_servers(folder) == []
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(first.url).ping()
    third = ensure_embedded_redis(folder, appendonly=False)
    try:
        assert third.started and json.loads((folder / "redis.json").read_text())["pid"] == third.pid
    finally:
        third.release()


def test_ensure_ignores_a_server_with_another_pid(folder: Path, redis_url: str) -> None:
    # redis.json names a live server, but not the one it recorded: the port was reused.
    stale = {"url": redis_url, "pid": _pid_of(redis_url) + 1}
    (folder / "redis.json").write_text(json.dumps(stale))
    with ensure_embedded_redis(folder, appendonly=False) as use:
        assert use.started and use.url != redis_url and _pid_of(use.url) == use.pid
    assert redis.Redis.from_url(redis_url).ping() is True  # the other server is untouched


def test_ensure_replaces_a_killed_server_on_its_port(
    folder: Path, redis_servers: Callable[[Path], list[int]]
) -> None:
    first = ensure_embedded_redis(folder, appendonly=False)
    os.kill(first.pid, signal.SIGKILL)
    second = ensure_embedded_redis(folder, appendonly=False)
    assert second.started and second.pid != first.pid and _pid_of(second.url) == second.pid
    # Same port: clients of the jobs still running reconnect to the URL they know.
    assert second.url == first.url
    assert json.loads((folder / "redis.json").read_text())["pid"] == second.pid
    assert first.release() is False
    assert second.release() is True
    assert redis_servers(folder) == []


def test_concurrent_callers_start_one_server(
    folder: Path, redis_servers: Callable[[Path], list[int]]
) -> None:
    callers = 6
    barrier = threading.Barrier(callers)
    uses: list[EmbeddedRedisUse] = []

    def call() -> None:
        barrier.wait()
        uses.append(ensure_embedded_redis(folder, appendonly=False))

    threads = [threading.Thread(target=call) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    try:
        assert len(uses) == callers
        assert sum(use.started for use in uses) == 1
        assert len({(use.url, use.pid) for use in uses}) == 1
        assert len(redis_servers(folder)) == 1
    finally:
        stopped = [use.release() for use in uses]
    assert stopped == [False] * (callers - 1) + [True]


def test_a_mute_server_is_not_replaced(
    folder: Path, redis_servers: Callable[[Path], list[int]]
) -> None:
    """A server that does not answer (here: stopped by SIGSTOP) but lives is never doubled."""
    use = ensure_embedded_redis(folder, appendonly=False)
    os.kill(use.pid, signal.SIGSTOP)
    try:
        with pytest.raises(UltronError) as raised:
            ensure_embedded_redis(folder, start_timeout_s=1.0)
        message = str(raised.value)
        assert f"pid {use.pid}" in message and "did not answer PING within 1 s" in message
        assert f"kill {use.pid}" in message and "not replaced while it runs" in message
        assert redis_servers(folder) == [use.pid]
    finally:
        os.kill(use.pid, signal.SIGCONT)
    assert use.release() is True  # the failed call left no use behind
    assert redis_servers(folder) == []


def test_a_loading_server_is_waited_for_not_replaced(
    folder: Path, redis_servers: Callable[[Path], list[int]]
) -> None:
    """A server reloading its append-only file answers LOADING or nothing for seconds."""
    use = ensure_embedded_redis(folder)
    client = redis.Redis.from_url(use.url)
    pipe = client.pipeline(transaction=False)
    for i in range(20_000):
        pipe.set(f"k{i}", os.urandom(100))  # random: the file must not compress
    pipe.execute()
    client.bgrewriteaof()  # an RDB preamble: key-load-delay applies to it
    while any(
        client.info("persistence")[k] for k in ("aof_rewrite_in_progress", "aof_rewrite_scheduled")
    ):
        time.sleep(0.05)
    client.config_set("key-load-delay", 150)  # microseconds per key: ~3 s of loading
    loaded: list[object] = []
    reload = threading.Thread(
        target=lambda: loaded.append(
            redis.Redis.from_url(use.url, socket_timeout=120).execute_command("DEBUG", "LOADAOF")
        )
    )
    reload.start()
    try:
        time.sleep(0.3)  # the reload has begun: PING goes unanswered now
        with pytest.raises((redis.TimeoutError, redis.BusyLoadingError)):
            redis.Redis.from_url(use.url, socket_timeout=0.5, retry=Retry(NoBackoff(), 0)).ping()
        second = ensure_embedded_redis(folder)
        assert (second.url, second.pid, second.started) == (use.url, use.pid, False)
        assert redis_servers(folder) == [use.pid]
        assert client.dbsize() == 20_000
    finally:
        reload.join(timeout=120)
        client.close()
    assert loaded == [b"OK"]
    assert second.release() is False
    assert use.release() is True


def test_an_unrecorded_server_is_adopted_not_doubled(
    folder: Path, redis_servers: Callable[[Path], list[int]]
) -> None:
    """redis.json lost while its server runs (the old bug): the server is found, not doubled."""
    use = ensure_embedded_redis(folder, appendonly=False)
    (folder / "redis.json").unlink()
    second = ensure_embedded_redis(folder)
    assert (second.url, second.pid, second.started) == (use.url, use.pid, False)
    assert json.loads((folder / "redis.json").read_text()) == {"url": use.url, "pid": use.pid}
    assert redis_servers(folder) == [use.pid]
    assert use.release() is False
    assert second.release() is True
