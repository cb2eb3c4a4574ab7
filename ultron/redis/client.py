"""Redis clients: one that rides out a restart or a failover, one that tries once.

Every ultron process (master, Dask workers, trial processes) connects through :func:`connect`:
commands that fail because the server is down or restarting are retried with exponential
backoff for up to ``ULTRON_REDIS_RETRY_S`` seconds (default 120), so a Redis that is killed and
restarted mid-job (with its append-only file) costs the job a pause, not its life.

That patience is wrong for a question such as "does a server answer at this address?", which
:func:`connect_once` asks: short timeouts and no retry, so a wrong address fails in seconds
(see :mod:`ultron.preflight`).

Both read the same URLs, so one string travels to every process:

- ``redis://[[user]:password@]host:port/db``: a password (``requirepass``) or an ACL user;
- ``rediss://...?ssl_cert_reqs=required&ssl_ca_certs=/path/ca.pem``: TLS, with redis-py's
  ``ssl_*`` options (``ssl_certfile`` and ``ssl_keyfile`` for a client certificate);
- ``unix:///path/redis.sock``;
- ``redis+sentinel://[[user]:password@]host1:port1,host2:port2/service_name/db``: Redis
  Sentinel (see :func:`parse_sentinel_url`). The client asks the sentinels for the master of
  ``service_name`` whenever it connects, so a job rides through a failover: commands fail
  while the master is down and succeed once the sentinels have promoted a replica.

Every call rides the retry and, on Sentinel, the lookup: plain and blocking commands,
pipelines and transactions (``MULTI``/``EXEC``), Lua scripts (``EVALSHA``; redis-py loads a
script again on a new master's ``NOSCRIPT``) and pub/sub (resubscribed on reconnect). A retried
call may have been applied before its reply was lost, so what a job sends must be idempotent
(see :meth:`ultron.master.job_state.JobStore.save`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast
from urllib.parse import parse_qs, unquote

import redis
from redis.backoff import AbstractBackoff, ExponentialBackoff, NoBackoff
from redis.connection import URL_QUERY_ARGUMENT_PARSERS, SSLConnection
from redis.exceptions import BusyLoadingError, ConnectionError, TimeoutError
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelManagedConnection

from ultron.settings import settings

__all__ = [
    "SENTINEL_SCHEMES",
    "SentinelAddress",
    "connect",
    "connect_once",
    "is_sentinel_url",
    "parse_sentinel_url",
]

_T = TypeVar("_T")

SENTINEL_SCHEMES = ("redis+sentinel://", "rediss+sentinel://")
"""URL schemes of Redis Sentinel; ``rediss+sentinel`` speaks TLS to sentinels and master."""

_SENTINEL_PORT = 26379
# TLS options redis-py takes as strings (the typed ones are in URL_QUERY_ARGUMENT_PARSERS).
_SSL_TEXT = frozenset(
    {"ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile",
     "ssl_password", "ssl_ciphers"}
)  # fmt: skip
_SENTINEL_AUTH = {"sentinel_password": "password", "sentinel_username": "username"}
# A sentinel that does not answer is skipped for the next: keep its wait short.
_SENTINEL_TIMEOUT_S = 2.0
_SENTINEL_FORM = "redis+sentinel://[[user]:password@]host1:port1,host2:port2/service_name/db"


class _RetryWithin(Retry):
    """Retries with backoff, and gives up once failures have lasted ``budget_s`` seconds.

    A count of tries with growing backoff overshoots a short budget, and redis-py nests
    retries (a command's retry wraps the reconnect's, and a sentinel-managed connect retries
    its own master lookup), which multiplies a count: a wall-clock budget bounds the wait by
    ``ULTRON_REDIS_RETRY_S`` however deep the nesting.
    """

    def __init__(self, backoff: AbstractBackoff, retries: int, *, budget_s: float) -> None:
        super().__init__(backoff, retries)
        self.budget_s = budget_s

    def call_with_retry(
        self,
        do: Callable[[], _T],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> _T:
        self._backoff.reset()
        failures = 0
        first_failure: float | None = None
        while True:
            try:
                return do()
            except self._supported_errors as error:
                if is_retryable and not is_retryable(error):
                    raise
                failures += 1
                if with_failure_count:
                    fail(error, failures)
                else:
                    fail(error)
                now = time.monotonic()
                first_failure = now if first_failure is None else first_failure
                left = self.budget_s - (now - first_failure)
                if failures > self._retries or left <= 0:
                    raise
                time.sleep(min(self._backoff.compute(failures), left))


def _patient_retry() -> Retry:
    budget_s = settings().redis_retry_s
    backoff = ExponentialBackoff(cap=2.0, base=0.05)
    retries = max(1, int(budget_s / 2.0) + 6)  # the backoff reaches its 2 s cap in ~6 tries
    return _RetryWithin(backoff, retries, budget_s=budget_s)


def connect(url: str, **kwargs: Any) -> redis.Redis:
    """A client of ``url`` that retries through connection failures and failovers.

    Args:
        url: ``redis://``, ``rediss://``, ``unix://`` or ``redis+sentinel://`` (see the module
            docstring); options in the URL win over ``kwargs``.
        **kwargs: more redis-py client options, e.g. ``decode_responses=True``.

    Raises:
        ValueError: the URL cannot be read.
    """
    options: dict[str, Any] = {
        "retry": _patient_retry(),
        "retry_on_error": [ConnectionError, TimeoutError, BusyLoadingError],
        "socket_connect_timeout": 5,
        "health_check_interval": 30,
        **kwargs,
    }
    if is_sentinel_url(url):
        return _sentinel_master(url, sentinel_timeout_s=_SENTINEL_TIMEOUT_S, **options)
    return redis.Redis.from_url(url, **options)


def connect_once(url: str, *, timeout_s: float) -> redis.Redis:
    """A client of ``url`` that gives up after ``timeout_s`` per connect or reply, never retrying.

    redis-py retries three times by default; a probe must not. The host name lookup is not
    bounded by the timeouts: callers that must bound it run the probe in a thread. For a
    Sentinel URL each sentinel is asked once, within ``timeout_s``, and the master once.
    """
    options: dict[str, Any] = {
        "retry": Retry(NoBackoff(), 0),
        "socket_connect_timeout": timeout_s,
        "socket_timeout": timeout_s,
    }
    if is_sentinel_url(url):
        return _sentinel_master(url, sentinel_timeout_s=timeout_s, **options)
    return redis.Redis.from_url(url, **options)


def is_sentinel_url(url: str) -> bool:
    """Whether ``url`` names Redis Sentinel (``redis+sentinel://`` or ``rediss+sentinel://``)."""
    return url.lower().startswith(SENTINEL_SCHEMES)


@dataclass(frozen=True)
class SentinelAddress:
    """What a Sentinel URL names: the sentinels, the service, and how to talk to both.

    Attributes:
        sentinels: ``(host, port)`` of each sentinel, in the URL's order.
        service_name: the name the sentinels monitor the master under (``sentinel monitor``).
        master_options: redis-py options for the master: ``db``, ``username``, ``password``,
            TLS (``ssl`` and ``ssl_*``) and the URL's other query options.
        sentinel_options: redis-py options for the sentinels: ``?sentinel_username=`` and
            ``?sentinel_password=`` (sentinels keep their own credentials), and TLS.
    """

    sentinels: tuple[tuple[str, int], ...]
    service_name: str
    master_options: dict[str, Any] = field(default_factory=dict)
    sentinel_options: dict[str, Any] = field(default_factory=dict)


def parse_sentinel_url(url: str) -> SentinelAddress:
    """Reads ``redis+sentinel://[[user]:password@]host1:port1,.../service_name/db?options``.

    The user and password are the master's (and its replicas'); sentinels that want their
    own take ``?sentinel_password=...`` (and ``?sentinel_username=...``). A port left out is
    26379; ``db`` left out is 0. ``rediss+sentinel://`` speaks TLS to the sentinels and the
    master, with the ``ssl_*`` options of ``rediss://``. Other options are redis-py's URL
    options (``socket_timeout``, ...).

    Raises:
        ValueError: naming the part that cannot be read, the rule and the form to write; the
            password is never repeated.

    Example:
        >>> address = parse_sentinel_url("redis+sentinel://:pw@10.0.0.1,10.0.0.2:5000/mymaster/2")
        >>> address.sentinels, address.service_name, address.master_options["db"]
        ((('10.0.0.1', 26379), ('10.0.0.2', 5000)), 'mymaster', 2)
    """
    scheme, _, rest = url.partition("://")
    if not is_sentinel_url(url):
        raise ValueError(f"a Sentinel URL starts with redis+sentinel://; write {_SENTINEL_FORM}")
    rest, _, query = rest.partition("?")
    rest = rest.partition("#")[0]
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    master: dict[str, Any] = {}
    if at:
        user, colon, password = userinfo.partition(":")
        if user:
            master["username"] = unquote(user)
        if colon and password:
            master["password"] = unquote(password)
    sentinels = tuple(_sentinel_host(part) for part in hosts.split(","))
    names = [unquote(piece) for piece in path.split("/") if piece]
    if not names or len(names) > 2:
        raise ValueError(
            f"a Sentinel URL's path must be /service_name or /service_name/db, but it is "
            f"{'/' + path!r}; write {_SENTINEL_FORM} with the name of `sentinel monitor`"
        )
    master["db"] = _integer("db", names[1]) if len(names) == 2 else 0
    sentinel: dict[str, Any] = {}
    for name, values in parse_qs(query, keep_blank_values=True).items():
        _query_option(name, values[-1], master, sentinel)
    if scheme.lower() == "rediss+sentinel":
        master["ssl"] = True
        sentinel.update({"ssl": True}, **{k: v for k, v in master.items() if k in _SSL_TEXT})
    return SentinelAddress(sentinels, names[0], master, sentinel)


def _sentinel_host(part: str) -> tuple[str, int]:
    if part.startswith("["):  # [ipv6]:port
        host, _, port = part[1:].partition("]")
        port = port.removeprefix(":")
    else:
        host, _, port = part.partition(":")
    if not host:
        raise ValueError(
            f"every sentinel in a Sentinel URL must be host:port, but one is {part!r} (empty "
            f"host); write {_SENTINEL_FORM}"
        )
    number = _integer("sentinel port", port) if port else _SENTINEL_PORT
    if not 0 < number < 65536:
        raise ValueError(f"a Sentinel URL's port must be 1..65535, but {part!r} has {number}")
    return unquote(host), number


def _integer(what: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(
            f"a Sentinel URL's {what} must be a whole number, but it is {text!r}; write "
            f"{_SENTINEL_FORM}"
        ) from None


def _query_option(name: str, value: str, master: dict[str, Any], sentinel: dict[str, Any]) -> None:
    if name in _SENTINEL_AUTH:
        sentinel[_SENTINEL_AUTH[name]] = value
    elif name in _SSL_TEXT:
        master[name] = value
    elif name in URL_QUERY_ARGUMENT_PARSERS:
        try:
            master[name] = cast(Callable[[str], Any], URL_QUERY_ARGUMENT_PARSERS[name])(value)
        except (TypeError, ValueError):
            raise ValueError(
                f"the Sentinel URL option {name} cannot be read ({value!r}); correct it"
            ) from None
    else:
        known = sorted({*_SENTINEL_AUTH, *_SSL_TEXT, *URL_QUERY_ARGUMENT_PARSERS})
        raise ValueError(
            f"a Sentinel URL takes the options {', '.join(known)}, but it has {name!r}; remove "
            "it or correct its name"
        )


class _SentinelMaster(redis.Redis):
    """The master's client; closing it also closes its clients of the sentinels."""

    def close(self) -> None:
        try:
            super().close()
        finally:
            manager = getattr(self.connection_pool, "sentinel_manager", None)
            if manager is not None:
                manager.close()


class _SentinelConnection(SentinelManagedConnection):
    """A connection to the master that asks the sentinels for its address at every connect.

    redis-py's own asks them only when a connection is taken from the pool; a command or
    pipeline that a retry reconnects (``send_packed_command``) would reconnect to the address
    it had, the dead master's, until the retry budget ran out. Here each socket connect follows
    a lookup, once: the retry around the call tries again, and so asks the sentinels again.
    """

    def _connect_retry(self) -> None:
        if not self.connection_pool.is_master:
            super()._connect_retry()
            return
        self.connect_check_health(check_health=self.connection_pool.check_connection)

    def connect_check_health(
        self, check_health: bool = True, retry_socket_connect: bool = True
    ) -> None:
        if self._sock:
            return
        if self.connection_pool.is_master:
            self.host, self.port = self.connection_pool.get_master_address()
        super().connect_check_health(check_health=check_health, retry_socket_connect=False)


class _SentinelSSLConnection(_SentinelConnection, SSLConnection):
    """:class:`_SentinelConnection` over TLS."""


def _sentinel_master(url: str, *, sentinel_timeout_s: float, **options: Any) -> redis.Redis:
    """A client of the master the sentinels of ``url`` name, found anew at each connect."""
    address = parse_sentinel_url(url)
    sentinel_options: dict[str, Any] = {
        "socket_connect_timeout": sentinel_timeout_s,
        "socket_timeout": sentinel_timeout_s,
        # One try per sentinel: the master's connect retries the whole lookup.
        "retry": Retry(NoBackoff(), 0),
        **address.sentinel_options,
    }
    manager = Sentinel(list(address.sentinels), sentinel_kwargs=sentinel_options)
    master = {**options, **address.master_options}
    tls = master.pop("ssl", False)
    return manager.master_for(
        address.service_name,
        redis_class=_SentinelMaster,
        connection_class=_SentinelSSLConnection if tls else _SentinelConnection,
        **master,
    )
