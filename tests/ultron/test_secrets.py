"""The secrets of a job are masked in log records, stored specs and trial environments."""

from __future__ import annotations

import io
import json
import logging
import uuid

import pytest
import redis

from ultron.master.job_state import JobStore
from ultron.secrets import (
    MASK,
    SECRET_QUERY_KEYS,
    RedactingFilter,
    add_secrets,
    conceal,
    env_secrets,
    install_redaction,
    known_secrets,
    mask_url,
    redact,
    redacted_spec,
    reveal,
    trial_environ,
)
from ultron.spec.job import JobSpec

PASSWORD = "redis-pw-" + uuid.uuid4().hex[:8]
STORE_SECRET = "S3SECRET-" + uuid.uuid4().hex[:8]


def _spec(**fields: object) -> JobSpec:
    base = {"code": ".", "model": "pkg.train:Model", "search_space": {"x": [1, 2]}}
    return JobSpec.model_validate({**base, **fields}, context={"check_paths": False})


def test_env_secrets_by_name_and_length() -> None:
    environ = {
        "AWS_SECRET_ACCESS_KEY": "abcd",  # object-store credentials: any length of 4 or more
        "AWS_SESSION_TOKEN": "tok-123456",
        "AWS_ACCESS_KEY_ID": "AKIAIDONLY",  # an id, not a secret
        "DB_PASSWORD": "long-enough",
        "FEATURE_KEY": "true",  # too short to be a secret
        "API_SECRET": "12345678",
        "DATABASE_URL": "postgresql://app:pg-pass-9@db/app",
        "PATH": "/usr/bin",
    }
    assert env_secrets(environ) == {
        "abcd",
        "tok-123456",
        "long-enough",
        "12345678",
        "pg-pass-9",
    }


def test_redact_masks_known_secrets_and_any_url_password() -> None:
    add_secrets([PASSWORD, "abc"])  # 3 characters: ignored
    assert PASSWORD in known_secrets() and "abc" not in known_secrets()
    text = f"auth {PASSWORD} at redis://:{PASSWORD}@h:1/0 and http://u:other%40pw@x/y abc"
    assert redact(text) == f"auth {MASK} at redis://:{MASK}@h:1/0 and http://u:{MASK}@x/y abc"
    assert redact("tcp://127.0.0.1:8786 and user@example.com") == (
        "tcp://127.0.0.1:8786 and user@example.com"
    )


def test_filter_redacts_message_args_and_exception() -> None:
    add_secrets([STORE_SECRET])
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger(f"test-secrets-{uuid.uuid4().hex}")
    logger.addHandler(handler)
    logger.propagate = False
    logger.warning("key %s in %r", STORE_SECRET, {"url": f"redis://:{PASSWORD}@h/0"})
    try:
        raise RuntimeError(f"refused redis://:{PASSWORD}@h/0 with {STORE_SECRET}")
    except RuntimeError:
        logger.exception("failed")
    logger.warning("%d%%", 5)  # a record without secrets is left as it was
    text = stream.getvalue()
    assert PASSWORD not in text and STORE_SECRET not in text
    assert text.count(MASK) >= 4 and "RuntimeError: refused" in text and "5%" in text


def test_install_redaction_covers_handlers_added_later(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "late-secret-" + uuid.uuid4().hex[:8]
    monkeypatch.setenv("ULTRON_TEST_TOKEN", secret)
    install_redaction({"redisURL": f"redis://:{PASSWORD}@h:6379/0"})  # any key name
    stream = io.StringIO()
    logger = logging.getLogger("ultron.test_secrets")
    handler = logging.StreamHandler(stream)  # added after install_redaction: no filter on it
    logger.addHandler(handler)
    try:
        logger.error("token %s, password %s", secret, PASSWORD)
    finally:
        logger.removeHandler(handler)
    assert stream.getvalue() == f"token {MASK}, password {MASK}\n"


def test_redacted_spec_masks_urls_only() -> None:
    spec = _spec(
        redis_url=f"redis://:{PASSWORD}@127.0.0.1:6379/0",
        search_space={"x": [PASSWORD, "b"]},  # a choice is never changed
    )
    data = redacted_spec(spec)
    assert data["redis_url"] == f"redis://:{MASK}@127.0.0.1:6379/0"
    assert data["search_space"] == spec.model_dump(mode="json")["search_space"]
    assert {k: v for k, v in data.items() if k != "redis_url"} == {
        k: v for k, v in spec.model_dump(mode="json").items() if k != "redis_url"
    }


def test_stored_spec_has_no_password(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    store = JobStore(client, f"secrets-{uuid.uuid4().hex}")
    spec = _spec(redis_url=f"redis://:{PASSWORD}@127.0.0.1:6379/0")
    assert store.save_spec(spec, code_hash="c0de")
    raw = client.hget(store.key, "spec")
    assert raw is not None and PASSWORD.encode() not in raw
    assert json.loads(raw)["redis_url"] == f"redis://:{MASK}@127.0.0.1:6379/0"
    assert store.stored_spec() is not None


def test_trial_environ_leaves_out_secrets_it_does_not_need() -> None:
    environ = {
        "PATH": "/usr/bin",
        "REDIS_URL": f"redis://:{PASSWORD}@h/0",
        "AWS_SECRET_ACCESS_KEY": STORE_SECRET,
        "AWS_ACCESS_KEY_ID": "AKIA",
        "GITHUB_TOKEN": "ghp_0123456789",
    }
    assert trial_environ(environ, object_store=False) == {
        "PATH": "/usr/bin",
        "AWS_ACCESS_KEY_ID": "AKIA",
    }
    assert trial_environ(environ, object_store=True) == {
        "PATH": "/usr/bin",
        "AWS_ACCESS_KEY_ID": "AKIA",
        "AWS_SECRET_ACCESS_KEY": STORE_SECRET,
    }


def test_conceal_and_reveal_round_trip_in_this_process() -> None:
    password = "conceal-" + uuid.uuid4().hex[:8]
    url = f"redis://:{password}@conceal.example:6379/0"
    spec = {"redis_url": url, "storage": "s3://bucket/x", "space": {"x": [1]}}
    hidden = conceal(spec)
    assert password not in json.dumps(hidden) and hidden["storage"] == "s3://bucket/x"
    assert reveal(hidden) == spec
    assert password in known_secrets()  # and logs mask it from now on
    conceal({"redis_url": url.replace(password, "another-pw")})  # same masked URL, two URLs
    assert reveal(hidden)["redis_url"] == hidden["redis_url"]  # left masked: fails to log in


def test_every_password_of_a_sentinel_url_is_a_secret() -> None:
    from ultron.secrets import _passwords

    url = "redis+sentinel://:master-pw@h1:26379,h2:26379/svc/0?sentinel_password=sentinel-pw"
    url += "&ssl_password=key%40pw"
    assert _passwords(url) == {"master-pw", "sentinel-pw", "key%40pw", "key@pw"}


@pytest.mark.parametrize("key", sorted(SECRET_QUERY_KEYS))
def test_each_secret_query_key_is_masked_in_the_stored_spec_and_in_the_log(
    key: str, redis_url: str
) -> None:
    # A fresh value, never registered: the log masks it by its key, as the stored spec does.
    value = f"q-{key}-{uuid.uuid4().hex[:10]}"
    url = f"s3://bucket/runs?region=eu&{key.upper() if key == 'token' else key}={value}&v=2"
    client = redis.Redis.from_url(redis_url)
    store = JobStore(client, f"secrets-{uuid.uuid4().hex}")
    assert store.save_spec(_spec(storage=url), code_hash="c0de")
    raw = client.hget(store.key, "spec")
    assert raw is not None and value.encode() not in raw
    assert json.loads(raw)["storage"].endswith(f"={MASK}&v=2")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger(f"test-secrets-{uuid.uuid4().hex}")
    logger.addHandler(handler)
    logger.propagate = False
    logger.warning("writing results to %s", url)
    assert value not in stream.getvalue() and f"={MASK}&v=2" in stream.getvalue()
    assert mask_url(url) == json.loads(raw)["storage"]  # one list, both ways
