"""One quick look at the services a job needs, so that a wrong address fails in seconds.

Clients inside a job ride out outages: Redis commands retry for ``ULTRON_REDIS_RETRY_S``
(120 s by default) and object stores retry their requests. That is right for a server that
restarts mid-job, and wrong for an address that never worked: the job would sit at
"starting" for minutes and say nothing. So before a job starts, :func:`check_redis` and
:func:`check_storage` try once, with short timeouts and no retry, and raise a
:class:`~ultron.errors.SpecError` that names the field, the URL (password masked), why it
failed (refused, timed out, unknown host, authentication, not Redis, missing bucket) and the
fix. Each check is bounded as a whole, host name lookup included.
"""

from __future__ import annotations

import errno
import functools
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

import redis
from redis.sentinel import SentinelConnectionPool

from ultron.errors import ConfigIssue, ServiceUnreachableError, SpecError
from ultron.redis.client import connect_once, is_sentinel_url, parse_sentinel_url
from ultron.secrets import mask_url

__all__ = ["check_redis", "check_storage", "mask_url"]

_T = TypeVar("_T")


def _problem(
    field: str, value: str, rule: str, fix: str, *, unreachable: str | None = None
) -> SpecError:
    """The error naming ``field``; ``unreachable``: the service there (``Redis``, ``the
    storage``) did not answer."""
    # An upper-case field is an environment variable (REDIS_URL), any other a spec field.
    source = "the environment" if field.isupper() else "job spec"
    issues = [ConfigIssue(field, value, rule, fix)]
    if unreachable is not None:
        return ServiceUnreachableError(issues, source, service=unreachable)
    return SpecError(issues, source)


class _NoAnswer(Exception):
    """The work did not finish within its time."""


def _within(timeout_s: float, work: Callable[[], _T]) -> _T:
    """``work()``, run in a daemon thread so that a hung lookup cannot hold the caller longer.

    Raises:
        _NoAnswer: it did not finish in time (the thread is left to end on its own).
    """
    box: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            box.append((True, work()))
        except BaseException as exc:  # handed to the caller
            box.append((False, exc))

    thread = threading.Thread(target=run, name="ultron-reachability", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not box:
        raise _NoAnswer
    ok, value = box[0]
    if not ok:
        raise value
    return value


def check_redis(url: str, *, field: str, timeout_s: float = 5.0) -> None:
    """PINGs ``url`` once, with no retry, and raises at once if no Redis answers.

    A server that answers ``LOADING`` (it is reading its append-only file) passes: clients
    wait for it. For a Sentinel URL (``redis+sentinel://``) the sentinels are asked, in turn,
    for the master of the URL's service (each within a share of ``timeout_s``), and the master
    they name must answer PING.

    Args:
        url: the Redis URL to check.
        field: where the URL came from, named in the error: ``redis_url`` (the job spec) or
            ``REDIS_URL`` (the environment).
        timeout_s: bound on the connect and on the reply; the whole check, host name lookup
            included, ends within ``timeout_s`` plus one second.

    Raises:
        SpecError: naming the field, the URL with its password masked, the reason and the fix.

    Example:
        >>> check_redis(redis_url, field="redis_url")
    """
    sentinel = is_sentinel_url(url)
    if sentinel:
        form = "redis+sentinel://[:password@]host1:port1,host2:port2/service_name/db"
        lead = "it must name sentinels that know its master, and the master must answer PING"
        work: Callable[[], str | None] = functools.partial(_ping_sentinel, url, timeout_s)
    else:
        form = "redis://[:password@]host:port/db"
        lead = "it must lead to a Redis server that answers PING"
        host, port = _host_port(url, default_port=6379)
        work = functools.partial(_ping, url, timeout_s, host, port)
    try:
        reason = _within(timeout_s + 1.0, work)
    except _NoAnswer:
        reason = f"no answer came within {timeout_s:g} s (the host name lookup or the connect hung)"
    if reason is None:
        return
    leave_out = (
        "unset REDIS_URL" if field.isupper() else f"leave {field} out"
    ) + " to use the embedded server"
    where = "the sentinels and the master" if sentinel else "Redis there"
    raise _problem(
        field,
        mask_url(url),
        f"{lead} within {timeout_s:g} s, but {reason}",
        f"start {where} or correct {field} ({form}), or {leave_out}",
        unreachable="Redis",
    )


def _host_port(url: str, *, default_port: int) -> tuple[str, int | str]:
    try:
        parts = urlsplit(url)
        return parts.hostname or "localhost", parts.port or default_port
    except ValueError:
        return "?", "?"


def _ping(url: str, timeout_s: float, host: str, port: int | str) -> str | None:
    """Why ``url`` answers no PING, or None when it does."""
    try:
        client = connect_once(url, timeout_s=timeout_s)
    except ValueError as exc:  # redis-py cannot read the URL
        return f"the URL cannot be read ({exc})"
    try:
        return _answer(client, timeout_s, host, f"{host}:{port}")
    finally:
        client.close()


def _ping_sentinel(url: str, timeout_s: float) -> str | None:
    """Why the sentinels of ``url`` name no master that answers PING, or None when they do."""
    try:
        address = parse_sentinel_url(url)
    except ValueError as exc:
        return f"the URL cannot be read ({exc})"
    # A share each, so that one sentinel that hangs leaves time to ask the others.
    share = max(0.5, timeout_s / (len(address.sentinels) + 1))
    client = connect_once(url, timeout_s=share)
    pool = cast(SentinelConnectionPool, client.connection_pool)
    try:
        problems = []
        for sentinel in list(pool.sentinel_manager.sentinels):
            host, port = (sentinel.connection_pool.connection_kwargs[k] for k in ("host", "port"))
            problem = _master_named(sentinel, address.service_name, host, f"{host}:{port}")
            if problem is None:
                master = pool.get_master_address()
                where = f"{master[0]}:{master[1]} (the master of {address.service_name!r})"
                return _answer(client, share, str(master[0]), where)
            problems.append(problem)
        return "no sentinel named a master: " + "; ".join(problems)
    except redis.RedisError as exc:  # the master changed between the two questions
        return f"asking the sentinels failed ({type(exc).__name__}: {str(exc)[:120]})"
    finally:
        client.close()


def _master_named(sentinel: redis.Redis, service: str, host: str, where: str) -> str | None:
    """Why ``sentinel`` names no live master for ``service``, or None when it does."""
    try:
        masters = cast(dict[str, dict[str, Any]], sentinel.sentinel_masters())
    except redis.AuthenticationError:
        return f"{where} refused the credentials (set ?sentinel_password= for sentinels)"
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        return _connection_reason(exc, where, host)
    except redis.ResponseError as exc:
        return f"{where} is not a sentinel ({str(exc)[:80]})"
    state = masters.get(service)
    if state is None:
        known = ", ".join(sorted(masters)) or "none"
        return f"{where} monitors no master named {service!r} (it knows: {known})"
    if not state["is_master"] or state["is_sdown"] or state["is_odown"]:
        return f"{where} reports the master of {service!r} down"
    return None


def _answer(client: redis.Redis, timeout_s: float, host: str, where: str) -> str | None:
    """Why ``client`` gets no answer to PING from ``where``, or None when it does."""
    try:
        client.ping()
    except redis.BusyLoadingError:
        return None
    except redis.AuthenticationError:
        return (
            f"the server at {where} refused the credentials (authentication failed: a wrong "
            "or missing password, or a wrong user)"
        )
    except redis.TimeoutError:
        return (
            f"{where} did not answer within {timeout_s:g} s (timed out: a firewall, an "
            "unroutable address or a server that hangs)"
        )
    except redis.ConnectionError as exc:
        return _connection_reason(exc, where, host)
    except redis.ResponseError as exc:
        return f"the server at {where} answered PING with an error: {exc}"
    except redis.RedisError as exc:  # InvalidResponse and the like: not a Redis server
        return (
            f"the server at {where} is not a Redis server: it does not speak the Redis "
            f"protocol ({type(exc).__name__}: {str(exc)[:80]}); use rediss:// only for TLS"
        )
    return None


def _connection_reason(exc: BaseException, where: str, host: str) -> str:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, socket.gaierror):
            return f"the host name {host!r} could not be resolved (DNS: {cause.strerror})"
        if isinstance(cause, ConnectionRefusedError):
            return f"nothing listens on {where} (connection refused)"
        if isinstance(cause, TimeoutError | socket.timeout):
            return f"{where} did not answer in time (timed out)"
        if isinstance(cause, OSError) and cause.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
            return f"{where} cannot be reached from this machine ({cause.strerror})"
        cause = cause.__cause__ or cause.__context__
    text = str(exc)
    if "reset by peer" in text:  # a TLS server resets a client that speaks plain Redis
        return (
            f"the server at {where} reset the connection: it wants TLS (rediss://) or is not "
            "a Redis server"
        )
    if "closed by server" in text or "protocol" in text.lower() or "ssl" in text.lower():
        return (
            f"the server at {where} is not a Redis server, or one that wants TLS (rediss://): "
            f"{text[:80]}"
        )
    return f"connecting to {where} failed ({text[:120]})"


def check_storage(
    url: str,
    *,
    field: str = "storage",
    timeout_s: float = 10.0,
    storage_options: dict[str, Any] | None = None,
) -> None:
    """Checks that results can go to ``url`` before a job starts; creates nothing.

    A folder must exist and be writable, or its nearest existing parent must be a writable
    folder (the job creates the rest). For a URL (``s3://bucket/prefix``, any fsspec
    filesystem) the path or the nearest thing above it (the bucket) must exist; the look-up
    runs in a thread and is given up after ``timeout_s``, so an endpoint that does not answer
    fails in seconds, not after the client's retries.

    Args:
        url: the spec's ``storage``: a folder, ``file://`` URL or fsspec URL.
        field: the field named in the error.
        timeout_s: bound on the look-up of a URL.
        storage_options: passed to the fsspec filesystem (e.g. ``client_kwargs``).

    Raises:
        SpecError: naming the field, the URL with its password masked, the reason and the fix.

    Example:
        >>> import tempfile
        >>> check_storage(tempfile.mkdtemp() + "/runs")
    """
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in ("", "file", "local"):
        _check_folder(url.split("://", 1)[-1], field=field, given=url)
    else:
        _check_remote(url, scheme, field=field, timeout_s=timeout_s, options=storage_options)


def _check_folder(path_text: str, *, field: str, given: str) -> None:
    path = Path(path_text).expanduser().resolve()
    existing = path
    while not existing.exists():
        existing = existing.parent
    where = "it" if existing == path else f"its nearest existing parent {existing}"
    if not existing.is_dir():
        raise _problem(
            field,
            given,
            f"it must be a folder, or a path where one can be made, but {where} is a file",
            f"point {field} at a folder, or move the file {existing} away",
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise _problem(
            field,
            given,
            f"this user must be able to write the folder, but {where} is not writable",
            f"point {field} at a folder you may write, or give this user write access to "
            f"{existing}",
        )


def _check_remote(
    url: str, scheme: str, *, field: str, timeout_s: float, options: dict[str, Any] | None
) -> None:
    shown = mask_url(url)
    import fsspec  # lazily: only URLs need it

    try:
        fs, root = fsspec.core.url_to_fs(url, **(options or {}))
    except ImportError as exc:
        extra = (
            "pip install 'ultron-automl[s3]'"
            if scheme in ("s3", "s3a")
            else "install the package the message names"
        )
        raise _problem(
            field,
            shown,
            f"{scheme}:// needs a filesystem package that is not installed ({exc})",
            f"{extra}, or point {field} at a folder",
        ) from exc
    except (ValueError, TypeError) as exc:
        rule, fix = f"it must be a readable URL ({exc})", "write e.g. s3://bucket/prefix"
        raise _problem(field, shown, rule, fix) from exc
    try:
        found = _within(timeout_s, lambda: _nearest_existing(fs, str(root)))
    except _NoAnswer:
        rule = f"its storage must answer within {timeout_s:g} s, but none came (timed out)"
        fix = "check the endpoint (AWS_ENDPOINT_URL, or client_kwargs.endpoint_url), the "
        fix += "network and the credentials"
        raise _problem(field, shown, rule, fix, unreachable="the storage") from None
    except PermissionError as exc:
        rule = f"these credentials must be allowed to read it, but access was denied ({exc})"
        fix = "use credentials with access, or another bucket"
        raise _problem(field, shown, rule, fix) from None
    except Exception as exc:
        rule = f"it must be reachable, but looking at it failed ({type(exc).__name__}: {exc})"
        fix = f"check the endpoint, the network and the credentials, or correct {field}"
        raise _problem(field, shown, rule[:400], fix, unreachable="the storage") from None
    if found is None:
        top = str(root).strip("/").split("/", 1)[0]
        raise _problem(
            field,
            shown,
            f"it or something above it must exist, but nothing does (is the bucket {top!r} "
            "missing?)",
            f"create the bucket {top!r}, or correct {field}",
        )


def _nearest_existing(fs: Any, root: str) -> str | None:
    """The path or its nearest existing parent in ``fs``; None when none exists."""
    path = root.rstrip("/")
    while path:
        try:
            fs.info(path)
            return path
        except FileNotFoundError:
            parent = path.rpartition("/")[0]
            path = parent if parent != path else ""
    return None
