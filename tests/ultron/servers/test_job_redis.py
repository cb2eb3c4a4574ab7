"""job_redis across processes: one embedded server per ULTRON_HOME, up until it is stopped.

Each user is a separate Python process that enters ``job_redis`` as a job does and is driven
through its stdin; servers are found by their working folder (a redis-server changes into its
``dir``), so a test sees every server of the folder, whoever started it.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from ultron.errors import SpecError
from ultron.servers.home_redis import stop_redis
from ultron.servers.job_redis import job_redis
from ultron.spec.job import JobSpec

# job_redis reads only redis_url: a spec built without validation is enough, and keeps the
# user processes free of a code base.
_USER = r"""
import json, sys
import redis
from ultron.servers.job_redis import job_redis
from ultron.spec.job import JobSpec

print("imported", flush=True)
sys.stdin.readline()  # "go"
with job_redis(JobSpec.model_construct(redis_url=None)) as url:
    client = redis.Redis.from_url(url)
    print(json.dumps({"url": url, "pid": client.info("server")["process_id"]}), flush=True)
    for line in sys.stdin:
        words = line.split()
        if words[0] == "set":
            client.set(words[1], words[2])
            print("ok", flush=True)
        elif words[0] == "get":
            print((client.get(words[1]) or b"-").decode(), flush=True)
        else:
            break
    client.close()
print("released", flush=True)
"""


class _User:
    """A separate Python process that uses the embedded Redis of ``home`` through job_redis."""

    def __init__(self, home: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
        env["ULTRON_HOME"] = str(home)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _USER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        assert self.line() == "imported"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.strip())

    def line(self, timeout_s: float = 120.0) -> str:
        try:
            return self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(
                f"user pid {self.proc.pid} said nothing in {timeout_s} s"
            ) from None

    def say(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def enter(self) -> dict[str, Any]:
        """Lets it enter job_redis; returns the URL and server pid it got."""
        self.say("go")
        return dict(json.loads(self.line()))

    def ask(self, text: str) -> str:
        self.say(text)
        return self.line()

    def leave(self) -> None:
        self.say("exit")
        assert self.line() == "released"
        assert self.proc.wait(timeout=60) == 0

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=60)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


@pytest.fixture
def home(tmp_path: Path, reap_redis_servers: Callable[[Path], list[int]]) -> Iterator[Path]:
    """An ULTRON_HOME for the test's user processes; its server is stopped after the test."""
    yield tmp_path
    stop_redis(tmp_path)
    left = reap_redis_servers(tmp_path / "redis")
    assert left == [], f"redis-server(s) {left} left running in {tmp_path / 'redis'}"


@contextlib.contextmanager
def _users(home: Path, count: int) -> Iterator[list[_User]]:
    users = [_User(home) for _ in range(count)]
    try:
        yield users
    finally:
        for user in users:
            user.close()


@pytest.mark.slow
def test_the_server_outlives_its_starter_and_serves_the_next_job_until_stopped(
    home: Path, redis_servers: Callable[[Path], list[int]]
) -> None:
    with _users(home, 2) as (first, second):
        got_first = first.enter()
        assert first.ask("set kept yes") == "ok"
        first.leave()  # the process that started the server ends
        assert redis_servers(home / "redis") == [got_first["pid"]]
        assert second.enter() == got_first  # the next job reuses it
        assert second.ask("get kept") == "yes"
        second.leave()
    assert redis_servers(home / "redis") == [got_first["pid"]]  # up until stopped
    assert stop_redis(home) == got_first["pid"]
    assert redis_servers(home / "redis") == []
    assert not (home / "redis" / "redis.sock").exists()
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(got_first["url"]).ping()


@pytest.mark.slow
def test_a_killed_starter_leaves_the_server_to_the_next_job(
    home: Path, redis_servers: Callable[[Path], list[int]]
) -> None:
    with _users(home, 2) as (starter, later):
        got = starter.enter()
        assert starter.ask("set kept yes") == "ok"
        starter.kill()  # SIGKILL: no cleanup at all
        # The server lives on (a daemon, in a session of its own) and the next job reuses it.
        assert redis.Redis.from_url(got["url"]).ping() is True
        assert later.enter() == got
        assert later.ask("get kept") == "yes"
        later.leave()
    assert redis_servers(home / "redis") == [got["pid"]]


@pytest.mark.slow
def test_three_concurrent_starts_give_one_server(
    home: Path, redis_servers: Callable[[Path], list[int]]
) -> None:
    with _users(home, 3) as users:
        for user in users:  # all three are imported and waiting: start them together
            user.say("go")
        got = [json.loads(user.line()) for user in users]
        assert len({(g["url"], g["pid"]) for g in got}) == 1
        assert redis_servers(home / "redis") == [got[0]["pid"]]
        for user in users:
            user.leave()
    log = (home / "redis" / "redis.log").read_text()
    assert log.count("Redis is starting") == 1, log


@pytest.mark.slow
def test_a_mute_server_is_waited_for_not_replaced(
    home: Path, redis_servers: Callable[[Path], list[int]]
) -> None:
    """A live server that does not answer for a while (loading, busy; here SIGSTOP) is waited
    for: a second server over its append-only file would corrupt it."""
    with _users(home, 2) as (first, second):
        got = first.enter()
        os.kill(got["pid"], signal.SIGSTOP)
        try:
            second.say("go")
            with pytest.raises(AssertionError, match="said nothing"):
                second.line(timeout_s=3.0)  # still waiting for the mute server
            assert redis_servers(home / "redis") == [got["pid"]]
        finally:
            os.kill(got["pid"], signal.SIGCONT)
        assert json.loads(second.line()) == got
        assert redis_servers(home / "redis") == [got["pid"]]
        first.leave()
        second.leave()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_wrong_spec_url_fails_fast_naming_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    url = f"redis://:hunter2@127.0.0.1:{_closed_port()}/0"
    started = time.monotonic()
    with pytest.raises(SpecError) as raised, job_redis(JobSpec.model_construct(redis_url=url)):
        pytest.fail("job_redis yielded a URL nothing listens on")
    assert time.monotonic() - started < 10  # the acceptance rule: seconds, not minutes
    message = str(raised.value)
    assert "redis_url is 'redis://:****@127.0.0.1:" in message and "connection refused" in message
    assert "hunter2" not in message and "Fix:" in message


def test_a_wrong_environment_url_names_redis_url_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", f"redis://:hunter2@127.0.0.1:{_closed_port()}/0")
    with pytest.raises(SpecError) as raised, job_redis(JobSpec.model_construct(redis_url=None)):
        pytest.fail("job_redis yielded a URL nothing listens on")
    message = str(raised.value)
    assert message.startswith("Redis is unreachable:")
    assert "REDIS_URL is 'redis://:****@" in message and "unset REDIS_URL" in message
    assert "hunter2" not in message


def test_a_given_url_that_answers_is_yielded(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    with job_redis(JobSpec.model_construct(redis_url=redis_url)) as url:
        assert url == redis_url
