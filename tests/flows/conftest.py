"""Fixtures for tests that run whole HPO jobs: Prefect's test harness and a private home."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ultron.api import prefect_defaults


@pytest.fixture(scope="session")
def ultron_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private ULTRON_HOME for the session: trial environments, embedded Redis, scratch."""
    home = tmp_path_factory.mktemp("ultron-home")
    before = os.environ.get("ULTRON_HOME")
    os.environ["ULTRON_HOME"] = str(home)
    yield home
    if before is None:
        os.environ.pop("ULTRON_HOME", None)
    else:
        os.environ["ULTRON_HOME"] = before


@pytest.fixture(scope="session")
def prefect(ultron_home: Path) -> Iterator[None]:
    """Prefect for real, on a temporary database (one per session: it takes 20-30 s)."""
    from prefect.testing.utilities import prefect_test_harness

    prefect_defaults()
    with prefect_test_harness(server_startup_timeout=180):
        yield
