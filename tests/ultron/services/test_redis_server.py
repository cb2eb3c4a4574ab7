"""The embedded Redis server: a real redis-server child process, found again by pid."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest
import redis

from ultron.errors import UltronError
from ultron.services.redis_server import EmbeddedRedis, ensure_embedded_redis


def _pid_of(url: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return int(client.info("server")["process_id"])
    finally:
        client.close()


def test_start_ping_pid_and_stop(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path, appendonly=False)
    url = server.start()
    assert re.fullmatch(r"redis://127\.0\.0\.1:\d+/0", url)
    assert server.url == url and server.start() == url  # starting twice is a no-op
    assert redis.Redis.from_url(url).ping() is True
    assert _pid_of(url) == server.pid
    assert (tmp_path / "redis.log").exists()
    server.stop()
    assert server.pid is None
    with pytest.raises(UltronError, match="not running"):
        _ = server.url
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(url).ping()
    server.stop()  # idempotent


def test_data_survives_restart_with_appendonly(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path) as server:
        redis.Redis.from_url(server.url).set("kept", "yes")
    assert (tmp_path / "appendonly.aof").exists() or (tmp_path / "appendonlydir").exists()
    with EmbeddedRedis(tmp_path) as server:
        assert redis.Redis.from_url(server.url).get("kept") == b"yes"


def test_port_served_by_someone_else_is_refused(tmp_path: Path, redis_url: str) -> None:
    taken = urlparse(redis_url).port
    assert taken is not None
    server = EmbeddedRedis(tmp_path, port=taken, start_timeout_s=5)
    with pytest.raises(UltronError, match="did not start"):
        server.start()
    assert server.pid is None
    assert redis.Redis.from_url(redis_url).ping() is True  # the other server is untouched


def test_ensure_reuses_a_live_server(tmp_path: Path) -> None:
    url, server = ensure_embedded_redis(tmp_path, appendonly=False)
    assert server is not None
    try:
        state = json.loads((tmp_path / "redis.json").read_text())
        assert state == {"url": url, "pid": server.pid}
        assert ensure_embedded_redis(tmp_path) == (url, None)
    finally:
        server.stop()
    assert not (tmp_path / "redis.json").exists()
    url2, server2 = ensure_embedded_redis(tmp_path, appendonly=False)
    assert server2 is not None
    try:
        assert json.loads((tmp_path / "redis.json").read_text())["url"] == url2
    finally:
        server2.stop()


def test_ensure_ignores_a_server_with_another_pid(tmp_path: Path, redis_url: str) -> None:
    # redis.json names a live server, but not the one it recorded: the port was reused.
    stale = {"url": redis_url, "pid": _pid_of(redis_url) + 1}
    (tmp_path / "redis.json").write_text(json.dumps(stale))
    url, server = ensure_embedded_redis(tmp_path, appendonly=False)
    assert server is not None
    try:
        assert url != redis_url and _pid_of(url) == server.pid
    finally:
        server.stop()


def test_ensure_replaces_a_killed_server(tmp_path: Path) -> None:
    _, first = ensure_embedded_redis(tmp_path, appendonly=False)
    assert first is not None and first.pid is not None
    os.kill(first.pid, signal.SIGKILL)
    url2, second = ensure_embedded_redis(tmp_path, appendonly=False)
    assert second is not None
    try:
        assert _pid_of(url2) == second.pid
        first.stop()  # reaps the dead child; must not remove the new server's redis.json
        assert json.loads((tmp_path / "redis.json").read_text())["pid"] == second.pid
    finally:
        second.stop()


def test_concurrent_callers_start_one_server(tmp_path: Path) -> None:
    callers = 6
    barrier = threading.Barrier(callers)
    results: list[tuple[str, EmbeddedRedis | None]] = []

    def call() -> None:
        barrier.wait()
        results.append(ensure_embedded_redis(tmp_path, appendonly=False))

    threads = [threading.Thread(target=call) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    owners = [server for _, server in results if server is not None]
    try:
        assert len(results) == callers
        assert len(owners) == 1
        assert {url for url, _ in results} == {owners[0].url}
    finally:
        for server in owners:
            server.stop()


def test_bad_port_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(UltronError, match=r"port is 70000; it must be in 1\.\.65535"):
        EmbeddedRedis(tmp_path, port=70000)
