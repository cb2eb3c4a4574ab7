"""Every ``ULTRON_*`` variable through one typed model: defaults, overrides, clear errors."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ultron.data
from ultron.errors import EnvironmentVariableError, UltronError
from ultron.paths import ultron_home
from ultron.redis.client import connect
from ultron.settings import PREFIX, UltronSettings, settings

VARIABLES = [PREFIX + name.upper() for name in UltronSettings.model_fields]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No ``ULTRON_*`` variable set, and ``HOME`` in a folder of the test."""
    for name in list(os.environ):
        if name.upper().startswith(PREFIX):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    return monkeypatch


def test_defaults(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    now = settings()
    assert now.home == tmp_path / ".cache" / "ultron"
    assert now.dask_address is None and now.data_service is None
    assert now.fresh_trial_process is False
    assert (now.lease_ttl, now.max_units, now.redis_retry_s) == (30.0, 64, 120.0)


def test_the_environment_overrides_and_is_read_on_every_call(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    values = {
        "ULTRON_HOME": "~/elsewhere",
        "ULTRON_DASK_ADDRESS": "tcp://scheduler:8786",
        "ULTRON_DATA_SERVICE": json.dumps({"dispatcher": "grpc://h:1"}),
        "ULTRON_FRESH_TRIAL_PROCESS": "1",
        "ULTRON_LEASE_TTL": "6",
        "ULTRON_MAX_UNITS": "8",
        "ULTRON_REDIS_RETRY_S": "0.5",
        "ULTRON_SPAWN_WORKERS": "1",
    }
    for name, value in values.items():
        clean_env.setenv(name, value)
    now = settings()
    assert now.home == tmp_path / "elsewhere"
    assert now.dask_address == "tcp://scheduler:8786"
    assert now.data_service == {"dispatcher": "grpc://h:1"}
    assert now.fresh_trial_process is True and now.spawn_workers is True
    assert (now.lease_ttl, now.max_units, now.redis_retry_s) == (6.0, 8, 0.5)
    clean_env.setenv("ULTRON_MAX_UNITS", "3")
    clean_env.setenv("ULTRON_DASK_ADDRESS", "")  # empty counts as unset
    assert (settings().max_units, settings().dask_address) == (3, None)


def test_readers_follow_the_environment(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setenv("ULTRON_HOME", str(tmp_path / "home"))
    clean_env.setenv("ULTRON_REDIS_RETRY_S", "20")
    clean_env.setenv("ULTRON_DATA_SERVICE", json.dumps({"dispatcher": "grpc://h:2"}))
    assert ultron_home() == tmp_path / "home"
    client = connect("redis://127.0.0.1:1/0")
    assert client.get_retry()._retries == 16  # 20 s at the 2 s cap, and 6 tries to reach it
    client.close()
    ultron.data.set_service(None)
    assert ultron.data.service_config() == {"dispatcher": "grpc://h:2"}


@pytest.mark.parametrize(
    ("name", "value", "rule"),
    [
        ("ULTRON_LEASE_TTL", "soon", "a number of seconds greater than 0"),
        ("ULTRON_LEASE_TTL", "0", "greater than 0"),
        ("ULTRON_MAX_UNITS", "2.5", "a whole number of at least 1"),
        ("ULTRON_MAX_UNITS", "0", "at least 1"),
        ("ULTRON_REDIS_RETRY_S", "-1", "0 or more"),
        ("ULTRON_FRESH_TRIAL_PROCESS", "maybe", "a boolean"),
        ("ULTRON_DATA_SERVICE", "{dispatcher: x}", "a JSON object"),
        ("ULTRON_DATA_SERVICE", "[1, 2]", "a JSON object"),
    ],
)
def test_a_bad_value_names_the_variable_the_value_the_rule_and_the_fix(
    clean_env: pytest.MonkeyPatch, name: str, value: str, rule: str
) -> None:
    clean_env.setenv(name, value)
    with pytest.raises(EnvironmentVariableError) as raised:
        settings()
    assert isinstance(raised.value, UltronError)
    message = str(raised.value)
    assert f"{name} is {value!r}; it must be" in message and rule in message
    assert f"Fix: set {name} to e.g. " in message
    assert "errors.pydantic.dev" not in message  # ours, not pydantic's report
    [issue] = raised.value.issues
    assert (issue.field, issue.value) == (name, value)


def test_every_bad_value_is_reported_at_once(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("ULTRON_LEASE_TTL", "x")
    clean_env.setenv("ULTRON_MAX_UNITS", "y")
    with pytest.raises(EnvironmentVariableError) as raised:
        settings()
    assert [i.field for i in raised.value.issues] == ["ULTRON_LEASE_TTL", "ULTRON_MAX_UNITS"]
    assert "has 2 problem(s)" in str(raised.value)


def test_a_bad_data_service_reaches_the_trial_as_the_clear_error(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("ULTRON_DATA_SERVICE", "not json")
    ultron.data.set_service(None)
    with pytest.raises(EnvironmentVariableError, match="ULTRON_DATA_SERVICE is 'not json'"):
        ultron.data.service_config()


def test_an_unknown_variable_is_named_once(
    clean_env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clean_env.setenv("ULTRON_LEASE_TIME", "6")  # a typo of ULTRON_LEASE_TTL
    with caplog.at_level(logging.WARNING, logger="ultron.settings"):
        settings()
        settings()
    warned = [r.getMessage() for r in caplog.records if "ULTRON_LEASE_TIME" in r.getMessage()]
    assert len(warned) == 1 and "ULTRON_LEASE_TTL" in warned[0]


def test_every_field_is_typed_defaulted_and_described() -> None:
    # The settings reference of the docs site is generated from these descriptions
    # (docs/gen_reference.py), so a field without one would be a blank row there.
    for name, field in UltronSettings.model_fields.items():
        assert field.annotation is not None and field.description, name
        assert not field.is_required(), name


def test_importing_the_settings_is_light() -> None:
    heavy = ("prefect", "dask", "distributed", "torch", "tensorflow", "redis")
    code = f"import sys, ultron.settings; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
