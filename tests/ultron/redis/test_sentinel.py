"""Redis Sentinel for real: one master, one replica and three sentinels on loopback.

The master is killed with SIGKILL mid-write; clients from ``connect("redis+sentinel://...")``
ride through the failover, and every write the replica had acknowledged (``WAIT 1``) before
the kill is still there afterwards. The limiter's Lua scripts and a ``JobStore`` keep working
across the failover. :class:`SentinelSetup` is also used by ``test_sentinel_in_flight.py``
(calls in flight when the master dies) and ``tests/flows/test_sentinel_job.py``.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlencode

import pytest
import redis

from ultron.errors import SpecError
from ultron.limiter.resource_limiter import ResourceLimiter
from ultron.master.job_state import JobState, JobStore
from ultron.preflight import check_redis
from ultron.redis.client import connect, connect_once
from ultron.servers.redis_process import find_redis_server
from ultron.trial_records import TrialResult, TrialStatus

SERVICE = "mymaster"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for(what: str, condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if condition():
                return
        except (redis.RedisError, OSError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the Sentinel setup never reached: {what}")
        time.sleep(0.1)


class SentinelSetup:
    """A master, a replica (``--replicaof``) and three sentinels, each its own redis-server.

    The sentinels watch the master as ``mymaster`` with quorum 2, call it down after 1 s
    without an answer and may fail over again after 3 s. Everything binds loopback, on free
    ports, with its files in ``folder``; ``stop`` kills what is left. With ``passwords``
    (the data nodes', the sentinels') every server asks for one; with ``tls`` (the CA, the
    server certificate and its key) every server, sentinels included, speaks TLS only, and
    replication and the sentinels' own connections go over TLS too.
    """

    def __init__(
        self,
        folder: Path,
        *,
        binary: str | None = None,
        passwords: tuple[str, str] | None = None,
        tls: tuple[Path, Path, Path] | None = None,
    ) -> None:
        self.folder = folder
        self.tls = tls
        self.binary = binary or find_redis_server()
        self.password, self.sentinel_password = passwords or (None, None)
        self.master_port = _free_port()
        self.replica_port = _free_port()
        self.sentinel_ports = [_free_port() for _ in range(3)]
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """The ``redis+sentinel://`` URL of the setup's master, database 0."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        auth = f":{self.password}@" if self.password else ""
        query = {"sentinel_password": self.sentinel_password} if self.sentinel_password else {}
        if self.tls:
            query |= {"ssl_cert_reqs": "required", "ssl_ca_certs": str(self.tls[0])}
        scheme = "rediss+sentinel" if self.tls else "redis+sentinel"
        return f"{scheme}://{auth}{hosts}/{SERVICE}/0" + (f"?{urlencode(query)}" if query else "")

    def _tls_settings(self) -> list[tuple[str, str]]:
        if self.tls is None:
            return []
        ca, cert, key = map(str, self.tls)
        return [("tls-cert-file", cert), ("tls-key-file", key), ("tls-ca-cert-file", ca),
                ("tls-auth-clients", "no"), ("tls-replication", "yes")]  # fmt: skip

    def _client(self, port: int, **options: Any) -> redis.Redis:
        sentinel = port in self.sentinel_ports
        password = self.sentinel_password if sentinel else self.password
        if self.tls is not None:
            options |= {"ssl": True, "ssl_ca_certs": str(self.tls[0])}
        return redis.Redis(port=port, password=password, socket_timeout=1, **options)

    def _start(self, name: str, *args: str) -> None:
        folder = self.folder / name
        folder.mkdir(parents=True, exist_ok=True)
        log = (folder / "redis.log").open("wb")
        self.processes[name] = subprocess.Popen(
            [self.binary, *args], cwd=folder, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()

    def _server(self, name: str, port: int, *extra: str) -> None:
        auth = (
            ["--requirepass", self.password, "--masterauth", self.password] if self.password else []
        )
        ports = ["--port", "0", "--tls-port", str(port)] if self.tls else ["--port", str(port)]
        tls = [arg for name, value in self._tls_settings() for arg in (f"--{name}", value)]
        self._start(name, *ports, "--bind", "127.0.0.1", "--dir", ".", "--save", "",
                    "--appendonly", "no", *auth, *tls, *extra)  # fmt: skip

    def start(self) -> SentinelSetup:
        self._server("master", self.master_port)
        self._server(
            "replica", self.replica_port, "--replicaof", "127.0.0.1", str(self.master_port)
        )
        replica = self._client(self.replica_port)
        _wait_for(
            "the replica in sync",
            lambda: replica.info("replication")["master_link_status"] == "up",
        )
        replica.close()
        for index, port in enumerate(self.sentinel_ports):
            folder = self.folder / f"sentinel-{index}"
            folder.mkdir(parents=True, exist_ok=True)
            conf = folder / "sentinel.conf"  # a sentinel rewrites its own configuration
            ports = f"port 0\ntls-port {port}\n" if self.tls else f"port {port}\n"
            conf.write_text(
                f"{ports}bind 127.0.0.1\ndir {folder}\n"
                + "".join(f"{name} {value}\n" for name, value in self._tls_settings())
                + f"sentinel monitor {SERVICE} 127.0.0.1 {self.master_port} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} 1000\n"
                f"sentinel failover-timeout {SERVICE} 3000\n"
                + (f"sentinel auth-pass {SERVICE} {self.password}\n" if self.password else "")
                + (f"requirepass {self.sentinel_password}\n" if self.sentinel_password else "")
            )
            self._start(f"sentinel-{index}", str(conf), "--sentinel")
        for port in self.sentinel_ports:  # each knows the replica and both other sentinels
            sentinel = self._client(port, decode_responses=True)
            _wait_for(
                f"sentinel {port} sees the replica and its peers",
                lambda s=sentinel: (
                    int(s.sentinel_master(SERVICE)["num-slaves"]) == 1
                    and int(s.sentinel_master(SERVICE)["num-other-sentinels"]) == 2
                ),
            )
            sentinel.close()
        return self

    def master_address(self) -> tuple[str, int]:
        """The master the sentinels name now."""
        sentinel = self._client(self.sentinel_ports[0])
        try:
            host, port = sentinel.sentinel_get_master_addr_by_name(SERVICE)
            return str(host.decode() if isinstance(host, bytes) else host), int(port)
        finally:
            sentinel.close()

    def kill_master(self) -> None:
        """SIGKILLs the master: no shutdown, no last write."""
        proc = self.processes["master"]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def wait_for_failover(self, timeout_s: float = 60.0) -> None:
        """Until every sentinel names the replica as master."""

        def promoted() -> bool:
            for port in self.sentinel_ports:
                sentinel = self._client(port)
                try:
                    _, master = sentinel.sentinel_get_master_addr_by_name(SERVICE)
                finally:
                    sentinel.close()
                if int(master) != self.replica_port:
                    return False
            return True

        _wait_for("the replica promoted", promoted, timeout_s)

    def stop(self) -> None:
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


@pytest.fixture(params=["open", "passwords"])
def sentinel_setup(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[SentinelSetup]:
    """The setup without passwords, then with a password on every server."""
    passwords = ("data-pw", "sentinel-pw") if request.param == "passwords" else None
    setup = SentinelSetup(tmp_path / "sentinel", passwords=passwords)
    try:
        yield setup.start()
    finally:
        setup.stop()


def _acknowledged(client: redis.Redis) -> bool:
    """Whether the replica has acknowledged every write so far (``WAIT 1 1000``)."""
    return int(client.execute_command("WAIT", 1, 1000)) >= 1


def test_writes_ride_through_a_failover_and_nothing_acknowledged_is_lost(
    sentinel_setup: SentinelSetup,
) -> None:
    client = connect(sentinel_setup.url, decode_responses=True)
    before = client.connection_pool.get_master_address()  # type: ignore[attr-defined]
    assert int(before[1]) == sentinel_setup.master_port
    acknowledged: dict[str, str] = {}
    written: dict[str, str] = {}
    try:
        for index in range(120):
            if index == 40:
                sentinel_setup.kill_master()
            key, value = f"failover:{index}", uuid.uuid4().hex
            client.set(key, value)  # rides through the failover: retried, never raised
            written[key] = value
            # The replica acknowledges until the kill; the promoted one has no replica left.
            if index < 40 and _acknowledged(client):
                acknowledged[key] = value
        after = client.connection_pool.get_master_address()  # type: ignore[attr-defined]
        assert int(after[1]) == sentinel_setup.replica_port
        assert len(acknowledged) >= 20  # of the 40 before the kill: WAIT gives up after 1 s
        assert {key: client.get(key) for key in acknowledged} == acknowledged
        after_kill = {k: v for k, v in written.items() if int(k.split(":")[1]) >= 40}
        assert {key: client.get(key) for key in after_kill} == after_kill
    finally:
        client.close()


def test_the_limiter_and_the_job_store_keep_their_state_across_a_failover(
    sentinel_setup: SentinelSetup,
) -> None:
    client = connect(sentinel_setup.url)
    namespace = f"sentinel-{uuid.uuid4().hex[:8]}"
    job_id = f"job-{uuid.uuid4().hex[:8]}"
    try:
        limiter = ResourceLimiter(client, max_units=4, namespace=namespace)
        lease = limiter.acquire(job_id, 3, ttl_s=300)
        assert lease is not None
        store = JobStore(client, job_id, namespace=namespace)
        first = _trial(0)
        store.save(JobState(job_id, trials=[first], algorithm={"seed": 1}, next_trial=1), [first])
        assert _acknowledged(client)

        sentinel_setup.kill_master()
        second = _trial(1)  # saved while the master is down: retried until the replica rules
        state = JobState(job_id, trials=[first, second], algorithm={"seed": 2}, next_trial=2)
        store.save(state, [second])
        sentinel_setup.wait_for_failover()

        loaded = JobStore(connect(sentinel_setup.url), job_id, namespace=namespace).load()
        assert loaded is not None
        assert [t.trial_id for t in loaded.trials] == ["0000", "0001"]
        assert loaded.algorithm == {"seed": 2} and loaded.next_trial == 2
        # The scripts are not on the new master: redis-py loads them again (NOSCRIPT).
        holders = limiter.holders()
        assert set(holders) == {job_id} and holders[job_id].lease_id == lease.lease_id
        assert limiter.acquire("another-job", 2) is None  # the 3 units still count
        assert limiter.release(lease) and limiter.in_use() == 0
    finally:
        client.close()


def _trial(number: int) -> TrialResult:
    return TrialResult(f"{number:04d}", {"x": number}, TrialStatus.COMPLETED, score=float(number))


def test_check_redis_asks_the_sentinels(sentinel_setup: SentinelSetup) -> None:
    check_redis(sentinel_setup.url, field="redis_url")
    probe = connect_once(sentinel_setup.url, timeout_s=2.0)
    try:
        assert probe.ping()
    finally:
        probe.close()
    wrong = sentinel_setup.url.replace(f"/{SERVICE}/", "/nosuchmaster/")
    with pytest.raises(SpecError) as raised:
        check_redis(wrong, field="redis_url", timeout_s=3.0)
    assert "monitors no master named 'nosuchmaster'" in str(raised.value)
    assert "mymaster" in str(raised.value)  # what the sentinels do know
    if sentinel_setup.password is None:
        return
    url = sentinel_setup.url
    for bad, said in [
        (url.replace("sentinel_password=sentinel-pw", "sentinel_password=wrong-pw"), "sentinel"),
        (url.replace(":data-pw@", ":wrong-pw@"), "the master of 'mymaster'"),
    ]:
        with pytest.raises(SpecError) as raised:
            check_redis(bad, field="redis_url", timeout_s=3.0)
        message = str(raised.value)
        assert "refused the credentials" in message and said in message, message
        assert "wrong-pw" not in message and "-pw" not in message, message


def test_check_redis_names_sentinels_that_do_not_answer() -> None:
    ports = [_free_port() for _ in range(2)]
    url = f"redis+sentinel://:pw-s3cret@127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/{SERVICE}"
    started = time.monotonic()
    with pytest.raises(SpecError) as raised:
        check_redis(url + "?sentinel_password=other-s3cret", field="REDIS_URL", timeout_s=3.0)
    assert time.monotonic() - started < 10.0
    message = str(raised.value)
    assert all(f"127.0.0.1:{port}" in message for port in ports), message
    assert "refused" in message and "redis+sentinel://" in message
    assert "s3cret" not in message


def test_check_redis_names_a_plain_redis_that_is_no_sentinel(redis_url: str) -> None:
    port = redis_url.rsplit(":", 1)[1].split("/")[0]
    with pytest.raises(SpecError) as raised:
        check_redis(f"redis+sentinel://127.0.0.1:{port}/{SERVICE}", field="redis_url")
    assert "is not a sentinel" in str(raised.value)


def _tls_helpers() -> ModuleType:
    # pytest runs in importlib mode, so test folders are not packages to import from: load the
    # TLS test's helpers (a TLS-capable redis-server, a throwaway CA) by path.
    path = Path(__file__).with_name("test_redis_tls.py")
    spec = importlib.util.spec_from_file_location("_redis_tls_helpers", path)
    assert spec is not None and spec.loader is not None
    if spec.name not in sys.modules:  # its dataclasses look their module up there
        sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[spec.name]


def test_sentinel_over_tls_with_passwords_rides_through_a_failover(tmp_path: Path) -> None:
    helpers = _tls_helpers()
    binary = helpers.find_tls_binary(tmp_path / "bin")
    pki = helpers.make_pki(tmp_path / "pki")
    setup = SentinelSetup(
        tmp_path / "sentinel",
        binary=binary,
        passwords=("data-pw", "sentinel-pw"),
        tls=(pki.ca, pki.server_cert, pki.server_key),
    )
    try:
        setup.start()
        assert setup.url.startswith("rediss+sentinel://")
        check_redis(setup.url, field="redis_url")
        client = connect(setup.url, decode_responses=True)
        try:
            client.set("tls-failover:before", "1")
            assert _acknowledged(client)
            assert client.connection_pool.connection_class.__name__ == ("_SentinelSSLConnection")
            setup.kill_master()
            client.set("tls-failover:after", "2")  # retried until the replica is promoted
            assert client.mget("tls-failover:before", "tls-failover:after") == ["1", "2"]
            master = client.connection_pool.get_master_address()  # type: ignore[attr-defined]
            assert int(master[1]) == setup.replica_port
        finally:
            client.close()
    finally:
        setup.stop()


def test_a_client_gives_up_after_the_retry_budget_when_everything_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Counted in tries (int(budget / 2) + 6 of growing backoff, nested by redis-py inside a
    # sentinel-managed connect), a budget of 3 s took over 7 s; counted in seconds it is 3 s.
    monkeypatch.setenv("ULTRON_REDIS_RETRY_S", "3")
    setup = SentinelSetup(tmp_path / "sentinel").start()
    try:
        client = connect(setup.url)
        assert client.ping()
    finally:
        setup.stop()  # the master, the replica and every sentinel
    started = time.monotonic()
    with pytest.raises(redis.ConnectionError):
        client.ping()
    assert time.monotonic() - started < 3.0 + 3.0  # the budget, and one lookup of the sentinels
    client.close()
