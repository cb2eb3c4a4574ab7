"""Quick, clear connection errors: real servers, real closed ports, real S3 (moto's server).

The acceptance rule is "a wrong address fails within 10 s": tests bound the error path's
duration by that rule, as an outcome, not as a speed measurement.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ultron.errors import SpecError
from ultron.preflight import check_redis, check_storage, mask_url
from ultron.servers.redis_process import EmbeddedRedis, find_redis_server

_PASSWORD = "hunter2-secret"
_RULE_S = 10.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _fails_within(seconds: float = _RULE_S) -> Iterator[list[str]]:
    """Expects a SpecError within ``seconds``; yields a list that receives its message."""
    message: list[str] = []
    started = time.monotonic()
    with pytest.raises(SpecError) as raised:
        yield message
    assert time.monotonic() - started < seconds
    message.append(str(raised.value))


@pytest.fixture(scope="module")
def password_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """Port of a real redis-server started with ``--requirepass``."""
    port = _free_port()
    folder = tmp_path_factory.mktemp("auth-redis")
    proc = subprocess.Popen(
        [find_redis_server(), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder),
         "--save", "", "--appendonly", "no", "--requirepass", _PASSWORD],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_closed_port_is_refused_naming_the_field() -> None:
    url = f"redis://:{_PASSWORD}@127.0.0.1:{_free_port()}/0"
    with _fails_within() as message:
        check_redis(url, field="redis_url")
    text = message[0]
    assert text.startswith("Redis is unreachable:\n  - redis_url is ")
    assert "redis_url is 'redis://:****@127.0.0.1:" in text
    assert "(connection refused)" in text and "Fix: start Redis there or correct redis_url" in text
    assert _PASSWORD not in text


@pytest.mark.parametrize("host", ["10.255.255.1", "203.0.113.1"])
def test_an_unroutable_address_fails_within_the_rule(host: str) -> None:
    # What comes back depends on the network (a timeout, "unreachable", or a proxy that answers
    # something else); that it comes in seconds, naming the field, does not.
    with _fails_within() as message:
        check_redis(f"redis://{host}:6379/0", field="redis_url", timeout_s=3.0)
    assert f"redis_url is 'redis://{host}:6379/0'" in message[0]


def test_an_unknown_host_names_the_lookup() -> None:
    with _fails_within() as message:
        check_redis("redis://no-such-host.invalid:6379/0", field="REDIS_URL", timeout_s=3.0)
    text = message[0]
    assert text.startswith("Redis is unreachable:\n  - REDIS_URL is ")
    assert "REDIS_URL is 'redis://no-such-host.invalid:6379/0'" in text
    assert "could not be resolved (DNS" in text or "host name lookup or the connect hung" in text
    assert "unset REDIS_URL" in text


@pytest.mark.parametrize(
    "credentials", [":wrong-password@", "alice:wrong-password@", ""], ids=["wrong", "user", "none"]
)
def test_a_wrong_password_is_an_authentication_failure(
    password_redis: int, credentials: str
) -> None:
    url = f"redis://{credentials}127.0.0.1:{password_redis}/0"
    with _fails_within() as message:
        check_redis(url, field="redis_url")
    text = message[0]
    assert "authentication failed" in text
    assert "wrong-password" not in text and _PASSWORD not in text


def test_the_right_password_passes(password_redis: int) -> None:
    check_redis(f"redis://:{_PASSWORD}@127.0.0.1:{password_redis}/0", field="redis_url")


def test_a_server_that_does_not_answer_times_out(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path, appendonly=False) as server:
        assert server.pid is not None
        os.kill(server.pid, signal.SIGSTOP)  # it accepts connections but never answers
        try:
            with _fails_within() as message:
                check_redis(server.url, field="redis_url", timeout_s=1.0)
        finally:
            os.kill(server.pid, signal.SIGCONT)
    assert "did not answer within 1 s (timed out" in message[0]


def test_a_server_that_is_not_redis_is_named() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    port = server.server_port
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with _fails_within() as message:
            check_redis(f"redis://127.0.0.1:{port}/0", field="redis_url")
    finally:
        server.shutdown()
        server.server_close()
    assert f"the server at 127.0.0.1:{port} is not a Redis server" in message[0]


def test_a_live_server_passes(redis_url: str) -> None:
    check_redis(redis_url, field="redis_url")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@h:6379/0", "redis://:****@h:6379/0"),
        ("redis://alice:pw@h:6379/0", "redis://alice:****@h:6379/0"),
        ("rediss://h:6379/0?password=pw&db=1", "rediss://h:6379/0?password=****&db=1"),
        ("redis://h:6379/0", "redis://h:6379/0"),
        ("unix:///run/redis.sock?db=0", "unix:///run/redis.sock?db=0"),
        ("unix:///run/redis.sock?db=0&password=pw", "unix:///run/redis.sock?db=0&password=****"),
    ],
)
def test_mask_url_hides_passwords(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_a_local_folder_to_be_made_passes_and_nothing_is_created(tmp_path: Path) -> None:
    target = tmp_path / "runs" / "deeper"
    check_storage(str(target))
    check_storage(f"file://{target}")
    assert list(tmp_path.iterdir()) == []


def test_a_local_path_under_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x")
    with _fails_within() as message:
        check_storage(str(tmp_path / "a-file" / "runs"))
    assert f"its nearest existing parent {tmp_path / 'a-file'} is a file" in message[0]
    assert message[0].startswith("job spec has 1 problem(s):\n  - storage is ")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write any folder")
def test_a_folder_without_write_access_is_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        with _fails_within() as message:
            check_storage(str(locked / "runs"))
    finally:
        locked.chmod(0o700)
    assert "is not writable" in message[0]


def test_a_bucket_that_exists_passes(s3_url: str, tmp_path: Path) -> None:
    check_storage(f"{s3_url}/{tmp_path.name}/runs")  # the prefix need not exist yet
    check_storage(s3_url)


def test_a_missing_bucket_is_named(s3_endpoint: str) -> None:
    with _fails_within() as message:
        check_storage("s3://no-such-bucket-here/runs")
    assert "is the bucket 'no-such-bucket-here' missing?" in message[0]


def test_an_endpoint_that_does_not_answer_fails_within_the_timeout(s3_endpoint: str) -> None:
    # An endpoint that takes the connection and never answers: a port nobody listens on would
    # refuse at once, and botocore's retries of a refused connection may end before 3 s or not.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes the connects; nothing ever reads or replies
        port = silent.getsockname()[1]
        options: dict[str, Any] = {"client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}"}}
        with _fails_within() as message:
            check_storage("s3://ultron-test/runs", timeout_s=3.0, storage_options=options)
    assert "storage is 's3://ultron-test/runs'" in message[0]
    assert "within 3 s" in message[0] and "endpoint" in message[0]
