"""The embedded Redis of ULTRON_HOME keeps to its owner: a Unix socket in a 0700 folder, a
password, no TCP port unless asked for, and no CONFIG or MODULE for anyone."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import redis

from ultron.servers.home_redis import RedisServer, running_redis, start_redis, stop_redis

# Run as another user, who knows the password too and still gets nothing. Plain sockets: the
# interpreter's own files may be out of that user's reach, so nothing is imported after setuid.
_INTRUDER = r"""
import json, os, pwd, socket, sys

path, password, home = sys.argv[1], sys.argv[2], sys.argv[3]
nobody = pwd.getpwnam("nobody")
os.setgid(nobody.pw_gid)
os.setuid(nobody.pw_uid)
seen = {"uid": os.getuid(), "home": sorted(os.listdir(home))}
try:
    open(os.path.join(home, "redis", "password")).read()
    seen["password"] = "read"
except PermissionError:
    seen["password"] = "refused"
sock = socket.socket(socket.AF_UNIX)
try:
    sock.connect(path)
    sock.sendall(f"AUTH {password}\r\nSET probe stolen\r\n".encode())
    seen["reply"] = sock.recv(100).decode()
except PermissionError as exc:
    seen["connect"] = str(exc)
print(json.dumps(seen))
"""


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """An ULTRON_HOME that every user may enter (0755, outside pytest's 0700 folder): only the
    server's own folder keeps others out."""
    home = Path(tempfile.mkdtemp(prefix="ultron-home-", dir="/tmp"))
    home.chmod(0o755)
    try:
        yield home
    finally:
        stop_redis(home)
        shutil.rmtree(home)


@pytest.fixture
def server(home: Path) -> RedisServer:
    server = start_redis(home)
    client = redis.Redis.from_url(server.url)
    client.set("probe", "original")
    client.close()
    return server


def _probe(server: RedisServer) -> bytes | None:
    client = redis.Redis.from_url(server.url)
    try:
        value: bytes | None = client.get("probe")
        return value
    finally:
        client.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a process as another user")
def test_another_user_cannot_open_the_socket_nor_read_the_password(
    home: Path, server: RedisServer
) -> None:
    password = (home / "redis" / "password").read_text()
    done = subprocess.run(
        [sys.executable, "-c", _INTRUDER, str(server.socket), password, str(home)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["uid"] != 0 and "redis" in seen["home"]  # it could look into ULTRON_HOME
    assert seen["password"] == "refused"
    assert "Permission denied" in seen["connect"], seen
    assert "reply" not in seen
    assert _probe(server) == b"original"


def test_a_client_without_the_password_is_refused(server: RedisServer) -> None:
    for url in (f"unix://{server.socket}", f"unix://:wrong-password@{server.socket}"):
        client = redis.Redis.from_url(url)
        with pytest.raises(redis.AuthenticationError):
            client.set("probe", "overwritten")
        with pytest.raises(redis.AuthenticationError):
            client.get("probe")
        client.close()
    assert _probe(server) == b"original"


def test_config_and_module_are_refused(server: RedisServer) -> None:
    client = redis.Redis.from_url(server.url)
    with pytest.raises(redis.ResponseError, match="unknown command"):
        client.config_set("dir", "/tmp")
    with pytest.raises(redis.ResponseError, match="unknown command"):
        client.execute_command("MODULE", "LOAD", "/tmp/evil.so")
    assert client.ping() is True
    client.close()


def test_it_listens_on_its_socket_only_and_keeps_its_files_private(
    home: Path, server: RedisServer
) -> None:
    folder = home / "redis"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for name in ("password", "redis.conf"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600, name
    assert stat.S_ISSOCK(server.socket.stat().st_mode)
    assert stat.S_IMODE(server.socket.stat().st_mode) & 0o077 == 0
    assert psutil.Process(server.pid).net_connections(kind="inet") == []
    assert server.address is None and server.url.startswith("unix://:")
    assert (folder / "redis.pid").read_text().strip() == str(server.pid)


def test_a_tcp_address_is_used_when_asked_for_with_the_password(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("ULTRON_REDIS_ADDRESS", f"127.0.0.1:{port}")
    server = start_redis(home)
    assert server.address == f"127.0.0.1:{port}"
    assert server.url.startswith("redis://:") and server.url.endswith(f"@127.0.0.1:{port}/0")
    assert redis.Redis.from_url(server.url).set("probe", "tcp") is True
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(host="127.0.0.1", port=port).get("probe")
    assert running_redis(home) == server


def test_stop_leaves_no_server_and_no_socket(home: Path, server: RedisServer) -> None:
    assert stop_redis(home) == server.pid
    assert not psutil.pid_exists(server.pid) or (
        psutil.Process(server.pid).status() == psutil.STATUS_ZOMBIE
    )
    assert not server.socket.exists() and not (home / "redis" / "redis.pid").exists()
    assert running_redis(home) is None
    assert stop_redis(home) is None
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(server.url).ping()
    # The append-only file kept the data for the next start.
    assert _probe(start_redis(home)) == b"original"
