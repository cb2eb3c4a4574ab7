"""Sentinel URLs, no server needed: what ``parse_sentinel_url`` reads and what it refuses.

Each fault is named; ``mask_url`` hides the passwords; a job spec takes a Sentinel URL.
"""

from __future__ import annotations

import pytest

from ultron.errors import SpecError
from ultron.preflight import check_redis, mask_url
from ultron.redis.client import parse_sentinel_url
from ultron.spec.job import JobSpec


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("redis+sentinel://127.0.0.1:26379", "/service_name"),
        ("redis+sentinel://127.0.0.1:26379/a/b/c", "/service_name"),
        ("redis+sentinel://127.0.0.1:x/mymaster", "sentinel port"),
        ("redis+sentinel://127.0.0.1:70000/mymaster", "1..65535"),
        ("redis+sentinel://,127.0.0.1/mymaster", "empty host"),
        ("redis+sentinel://127.0.0.1/mymaster/zero", "db"),
        ("redis+sentinel://127.0.0.1/mymaster?color=red", "'color'"),
        ("redis+sentinel://127.0.0.1/mymaster?socket_timeout=soon", "socket_timeout"),
    ],
)
def test_unreadable_sentinel_urls_are_named(url: str, named: str) -> None:
    with pytest.raises(ValueError, match="Sentinel URL") as raised:
        parse_sentinel_url(url)
    assert named in str(raised.value)
    with pytest.raises(SpecError, match="cannot be read"):
        check_redis(url, field="redis_url", timeout_s=1.0)


def test_a_sentinel_url_is_read_whole() -> None:
    address = parse_sentinel_url(
        "rediss+sentinel://alice:p%40ss@h1:5000,[::1]:5001,h3/svc/3"
        "?sentinel_password=sp&socket_timeout=2.5&ssl_ca_certs=/ca.pem"
    )
    assert address.sentinels == (("h1", 5000), ("::1", 5001), ("h3", 26379))
    assert address.service_name == "svc"
    assert address.master_options == {
        "username": "alice", "password": "p@ss", "db": 3, "socket_timeout": 2.5,
        "ssl_ca_certs": "/ca.pem", "ssl": True,
    }  # fmt: skip
    assert address.sentinel_options == {"password": "sp", "ssl": True, "ssl_ca_certs": "/ca.pem"}
    assert mask_url("redis+sentinel://:pw@h1,h2/svc?sentinel_password=sp") == (
        "redis+sentinel://:****@h1,h2/svc?sentinel_password=****"
    )


def test_the_job_spec_takes_a_sentinel_url() -> None:
    spec = JobSpec.model_validate(
        {"code": ".", "model": "m:M", "search_space": {"x": [1]},
         "redis_url": "redis+sentinel://h1:26379,h2:26379/mymaster/0"},
        context={"check_paths": False},
    )  # fmt: skip
    assert spec.redis_url == "redis+sentinel://h1:26379,h2:26379/mymaster/0"
