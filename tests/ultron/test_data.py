"""``ultron.data`` without a service: light to import, clear when misused."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import ultron.data


def test_import_is_light() -> None:
    code = (
        "import sys, ultron.data, datamanager; "
        "print([m for m in ('tensorflow', 'torch', 'great_expectations', 'pandas', 'pyarrow') "
        "if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_batches_without_a_service_says_how_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ultron.data.ENV_VAR, raising=False)
    ultron.data.set_service(None)
    with pytest.raises(RuntimeError, match=r"no data service.*Fix"):
        ultron.data.batches()


def test_service_config_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    ultron.data.set_service(None)
    monkeypatch.setenv(ultron.data.ENV_VAR, json.dumps({"dispatcher": "grpc://h:1"}))
    assert ultron.data.service_config() == {"dispatcher": "grpc://h:1"}
    ultron.data.set_service({"dispatcher": "grpc://other:2"})
    assert ultron.data.service_config() == {"dispatcher": "grpc://other:2"}
    ultron.data.set_service(None)


def test_stats_reads_well() -> None:
    stats = ultron.data.DataStats(batches=10, wait_seconds=0.5, elapsed_seconds=2.0)
    assert stats.wait_share == 0.25
    assert str(stats) == "10 batches, waited 0.50 s of 2.00 s (25%)"
