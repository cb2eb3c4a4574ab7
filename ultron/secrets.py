"""The secrets of a job, and keeping them out of everything it writes.

A job's secrets are the Redis password (in the spec's ``redis_url`` or ``REDIS_URL``) and the
object store's credentials, which come from the environment: ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``, and any variable whose name ends in ``_PASSWORD``, ``_SECRET``,
``_TOKEN`` or ``_KEY`` with a value of 8 characters or more (shorter ones would mask common
words), plus the password of any URL in the environment. :func:`redact` replaces each of them
with ``****``, and the password of any ``scheme://user:password@host`` URL too, known or not.

In the flow process :func:`install_redaction` makes every log record pass through
:func:`redact`: its message and arguments, its exception text and stack. Specs that are written
somewhere (``best.json``, Prefect artifacts, the spec stored in Redis) are written as
:func:`redacted_spec`. A trial process gets the secrets only when it needs them
(:func:`trial_environ`).

Example:
    >>> install_redaction({"redis_url": "redis://:hunter2-pw@db.example:6379/0"})
    >>> redact("connecting with hunter2-pw to redis://:hunter2-pw@db.example:6379/0")
    'connecting with **** to redis://:****@db.example:6379/0'
    >>> redact("ftp://alice:unknown-pw@files.example/data")
    'ftp://alice:****@files.example/data'
"""

from __future__ import annotations

import logging
import os
import re
import threading
import traceback
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

if TYPE_CHECKING:
    from ultron.spec.job import JobSpec

__all__ = [
    "MASK",
    "SECRET_QUERY_KEYS",
    "RedactingFilter",
    "add_secrets",
    "conceal",
    "env_secrets",
    "install_redaction",
    "job_secrets",
    "known_secrets",
    "mask_url",
    "redact",
    "redacted_spec",
    "reveal",
    "trial_environ",
    "url_password",
]

MASK = "****"
OBJECT_STORE_SECRETS = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
"""Environment variables that hold object-store credentials whatever their length."""
_SECRET_SUFFIXES = ("_PASSWORD", "_SECRET", "_TOKEN", "_KEY")
_MIN_NAMED = 8  # a *_KEY of "true" or "testing" is no secret, and masking it mangles words
_MIN_ANY = 4  # a password of 1-3 characters would turn every log line to stars
_STORES = ("AWS_", "GOOGLE_", "AZURE_")
_LOGGERS = ("", "prefect", "distributed", "ultron")
# scheme://user:password@host: the password ends at the last "@" before the host's "/".
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)(?P<pw>[^\s/]*)@")

SECRET_QUERY_KEYS = frozenset(
    {
        "password",
        "sentinel_password",
        "ssl_password",
        "secret",
        "secret_access_key",
        "token",
        "key",
    }
)
"""URL query keys whose values are secrets (the one list: :func:`mask_url` masks them in what
is stored, :func:`redact` in what is logged, and a spec's are registered as known secrets)."""
# ?token=... in any URL of a text: the value ends at the next "&", "#", quote or whitespace.
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&](?:" + "|".join(sorted(map(re.escape, SECRET_QUERY_KEYS))) + r")=)"
    r"(?P<value>[^&#\s'\"]+)",
    re.IGNORECASE,
)

_lock = threading.Lock()
_registered: set[str] = set()
_pattern: re.Pattern[str] | None = None


def url_password(url: str) -> str | None:
    """The password in ``url`` (user part or a ``password=`` query) as written, or None.

    Example:
        >>> url_password("redis://:s3cret@host:6379/0"), url_password("s3://bucket/x")
        ('s3cret', None)
    """
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return None
    if password:
        return password
    for pair in parts.query.split("&"):
        name, _, value = pair.partition("=")
        if name.lower() == "password" and value:
            return value
    return None


def _passwords(url: str) -> set[str]:
    """Every password of ``url`` (its user part, and the values of its
    :data:`SECRET_QUERY_KEYS`), as written there and decoded (``%40`` and ``@``)."""
    found = {url_password(url)}
    try:
        query = urlsplit(url).query
    except ValueError:
        query = ""
    for pair in query.split("&"):
        name, _, value = pair.partition("=")
        if name.lower() in SECRET_QUERY_KEYS:
            found.add(value)
    return {form for p in found if p for form in (p, unquote(p))}


def env_secrets(environ: Mapping[str, str] | None = None) -> set[str]:
    """The secrets in an environment (``os.environ`` by default): see the module docstring."""
    environ = os.environ if environ is None else environ
    found: set[str] = set()
    for name, value in environ.items():
        upper = name.upper()
        named = upper in OBJECT_STORE_SECRETS or upper.endswith(_SECRET_SUFFIXES)
        if named and len(value) >= (_MIN_ANY if upper in OBJECT_STORE_SECRETS else _MIN_NAMED):
            found.add(value)
        elif "://" in value:
            found.update(p for p in _passwords(value) if len(p) >= _MIN_ANY)
    return found


def _spec_urls(value: Any) -> Iterable[str]:
    """Every string in a spec (a mapping of any key names, or a ``JobSpec``) holding ``://``."""
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    if isinstance(value, str):
        if "://" in value:
            yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _spec_urls(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _spec_urls(item)


def add_secrets(values: Iterable[str]) -> None:
    """Add values that :func:`redact` masks from now on (shorter than 4 characters: ignored)."""
    global _pattern
    with _lock:
        new = {v for v in values if isinstance(v, str) and len(v) >= _MIN_ANY} - _registered
        if not new:
            return
        _registered.update(new)
        # Longest first: a secret that contains another is masked whole.
        ordered = sorted(_registered, key=lambda v: (-len(v), v))
        _pattern = re.compile("|".join(re.escape(v) for v in ordered))


def known_secrets() -> frozenset[str]:
    """The values :func:`redact` masks (besides any URL's password)."""
    with _lock:
        return frozenset(_registered)


def redact(text: str) -> str:
    """``text`` with every known secret, every URL's password and the value of each of its
    :data:`SECRET_QUERY_KEYS` replaced by ``****``."""
    if not isinstance(text, str) or not text:
        return text
    pattern = _pattern
    if pattern is not None:
        text = pattern.sub(MASK, text)
    if "://" in text:
        text = _URL_PASSWORD.sub(lambda m: f"{m['head']}{MASK}@", text)
        text = _QUERY_SECRET.sub(lambda m: f"{m['head']}{MASK}", text)
    return text


def mask_url(url: str) -> str:
    """``url`` with its password replaced by ``****``, in the user part and in the query.

    Example:
        >>> mask_url("redis://:s3cret@db.example:6379/0")
        'redis://:****@db.example:6379/0'
        >>> mask_url("redis://alice:s3cret@db.example:6379/0?password=s3cret")
        'redis://alice:****@db.example:6379/0?password=****'
        >>> mask_url("s3://bucket/prefix")
        's3://bucket/prefix'
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK  # unreadable: it may hold anything
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}:{MASK}@{hostport}" if colon else netloc
    query = parts.query
    pairs = parse_qsl(query, keep_blank_values=True)
    if any(name.lower() in SECRET_QUERY_KEYS for name, _ in pairs):
        masked = [(n, MASK if n.lower() in SECRET_QUERY_KEYS else v) for n, v in pairs]
        query = urlencode(masked, safe="*")
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    # By hand: urlunsplit drops the "//" of an empty host (unix:///run/redis.sock).
    text = f"{parts.scheme}://{netloc}{parts.path}" if parts.scheme else f"{netloc}{parts.path}"
    return text + (f"?{query}" if query else "") + (f"#{parts.fragment}" if parts.fragment else "")


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):  # a value that is no URL is left as it is: it may be a choice
        return mask_url(redact(value)) if "://" in value else value
    if isinstance(value, Mapping):
        return {key: _redact_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_value(item) for item in value]
    return value


def redacted_spec(spec: JobSpec | Mapping[str, Any]) -> dict[str, Any]:
    """The spec as JSON-ready data whose URLs have their passwords and known secrets masked.

    What is written anywhere (``best.json``, artifacts, the spec stored in Redis) is this.
    Values that are no URL stay as they are (a search space's choice may equal any string).

    Example:
        >>> redacted_spec({"redis_url": "redis://:pw-1234@h:6379/0", "space": {"x": ["a"]}})
        {'redis_url': 'redis://:****@h:6379/0', 'space': {'x': ['a']}}
    """
    data = spec.model_dump(mode="json") if hasattr(spec, "model_dump") else dict(spec)
    redacted: dict[str, Any] = _redact_value(data)
    return redacted


_concealed: dict[str, set[str]] = {}  # a masked URL -> the URLs conceal() masked to it


def conceal(spec: JobSpec | Mapping[str, Any]) -> dict[str, Any]:
    """:func:`redacted_spec`, remembering in this process what each masked URL was.

    For a spec handed to something that stores it (a Prefect flow's parameters): the flow,
    run in this process, gets the URLs back with :func:`reveal`.

    Example:
        >>> hidden = conceal({"redis_url": "redis://:pw-4567@h:6379/0"})
        >>> hidden, reveal(hidden)
        ({'redis_url': 'redis://:****@h:6379/0'}, {'redis_url': 'redis://:pw-4567@h:6379/0'})
    """
    data = spec.model_dump(mode="json") if hasattr(spec, "model_dump") else dict(spec)
    urls = list(_spec_urls(data))
    add_secrets(set().union(*map(_passwords, urls)))  # masked in logs from now on
    with _lock:
        for url in urls:
            masked = _redact_value(url)
            if masked != url:
                _concealed.setdefault(masked, set()).add(url)
    return redacted_spec(data)


def reveal(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The spec with each URL that :func:`conceal` masked in this process put back.

    A masked URL that this process did not conceal, or that stood for two URLs (same host,
    two passwords), stays masked: the job then fails to log in, and says where.
    """

    def back(value: Any) -> Any:
        if isinstance(value, str):
            with _lock:
                found = _concealed.get(value, set())
            return next(iter(found)) if len(found) == 1 else value
        if isinstance(value, Mapping):
            return {key: back(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [back(item) for item in value]
        return value

    revealed: dict[str, Any] = back(dict(spec))
    return revealed


class RedactingFilter(logging.Filter):
    """Passes every record, with its message, arguments and exception text redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        _redact_record(record)
        return True


def _redact_record(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a bad format string: logging reports it; leave the record as it is
        message = None
    if message is not None:
        masked = redact(message)
        if masked != message:
            record.msg, record.args = masked, None
    if record.exc_info and not record.exc_text:
        record.exc_text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
    if record.exc_text:
        record.exc_text = redact(record.exc_text)
    if record.stack_info:
        record.stack_info = redact(record.stack_info)


_FILTER = RedactingFilter()
_installed_factory = False


def _install_factory() -> None:
    """Records made from now on are redacted as they are made, whatever handler takes them
    (handlers added later included: Prefect's API log handler, a CLI's log file)."""
    global _installed_factory
    if _installed_factory:
        return
    make = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        _redact_record(record)
        return record

    logging.setLogRecordFactory(factory)
    _installed_factory = True


def job_secrets(spec: JobSpec | Mapping[str, Any] | None = None) -> set[str]:
    """What a job's logs mask: the passwords of the URLs in ``spec`` (a spec, a trial request
    or any mapping) and of ``REDIS_URL``, and this environment's secrets (:func:`env_secrets`).

    Example:
        >>> "pw-in-url" in job_secrets({"redis_url": "redis://:pw-in-url@h:6379/0"})
        True
    """
    urls = [*_spec_urls(spec), os.environ.get("REDIS_URL", "")]
    return env_secrets().union(*map(_passwords, urls))


def install_redaction(spec: JobSpec | Mapping[str, Any] | None = None) -> None:
    """Redact the job's secrets in every log record of this process from now on.

    Call it where the flow starts, with the job's spec (or the raw mapping, any key names):
    the passwords of the spec's URLs, ``REDIS_URL``'s and the environment's secrets are
    added; the filter goes on the handlers of the root, ``prefect``, ``distributed`` and
    ``ultron`` loggers, and on every record made from now on. Calling it again adds secrets.
    """
    add_secrets(job_secrets(spec))
    _install_factory()
    for name in _LOGGERS:
        for handler in logging.getLogger(name).handlers:
            if _FILTER not in handler.filters:
                handler.addFilter(_FILTER)


def trial_environ(
    environ: Mapping[str, str] | None = None, *, object_store: bool
) -> dict[str, str]:
    """The environment for a trial process, without the secrets it does not need.

    Left out: ``REDIS_URL`` (a trial gets its Redis URL in its request), every variable that
    :func:`env_secrets` finds a secret in, and the object store's credentials
    (``AWS_*``, ``GOOGLE_*``, ``AZURE_*`` secrets) unless ``object_store`` (the trial reads
    data from one).

    Example:
        >>> env = {"PATH": "/bin", "REDIS_URL": "redis://:pw-pw-pw@h/0",
        ...        "AWS_SECRET_ACCESS_KEY": "abcd1234", "GH_TOKEN": "ghp_0123456789"}
        >>> sorted(trial_environ(env, object_store=False))
        ['PATH']
        >>> sorted(trial_environ(env, object_store=True))
        ['AWS_SECRET_ACCESS_KEY', 'PATH']
    """
    environ = os.environ if environ is None else environ
    kept: dict[str, str] = {}
    for name, value in environ.items():
        upper = name.upper()
        if upper == "REDIS_URL":
            continue
        if env_secrets({name: value}) and not (object_store and upper.startswith(_STORES)):
            continue
        kept[name] = value
    return kept
