"""The embedded Redis server: a real redis-server process, started, restarted and stopped."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlparse

import pytest
import redis

from ultron.errors import UltronError
from ultron.servers.redis_process import EmbeddedRedis


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


def test_bad_port_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(UltronError, match=r"port is 70000; it must be in 1\.\.65535"):
        EmbeddedRedis(tmp_path, port=70000)
