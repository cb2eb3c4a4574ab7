"""start_cluster's choice of backend, on a real Dask cluster of processes: a scheduler that runs
already (``cluster: {type: address}`` or ``ULTRON_DASK_ADDRESS``), one that does not answer."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
import pytest
from distributed import LocalCluster

import ultron.cluster.factory as cluster_module
from ultron.cluster.factory import check_scheduler, start_cluster
from ultron.errors import SpecError
from ultron.spec.job import JobSpec
from ultron.spec.loader import load_spec

TOY = Path(__file__).parents[2] / "data" / "toy"


def _spec(cluster: dict[str, Any]) -> JobSpec:
    return load_spec(
        {
            "name": "backends",
            "code": str(TOY),
            "model": "toy_model:Quadratic",
            "search_space": {"x": [1.0, 2.0]},
            "cluster": cluster,
        }
    )


@pytest.fixture(scope="module")
def running() -> Iterator[LocalCluster]:
    """A Dask cluster that runs before the job, its scheduler with Dask's default
    allowed-failures (3), as one a user started would have."""
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 3}),
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0",
            silence_logs=logging.WARNING,
        ) as cluster,
    ):  # fmt: skip
        yield cluster


@pytest.fixture
def silent_port() -> str:
    """``tcp://127.0.0.1:PORT`` where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture(autouse=True)
def _no_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ULTRON_DASK_ADDRESS", raising=False)
    # The scheduler's answer is awaited 15 s; 3 s is enough on loopback and keeps this fast.
    monkeypatch.setattr(cluster_module, "_CONNECT_TIMEOUT_S", 3)


def test_an_address_is_used_as_it_is_and_left_running(running: LocalCluster) -> None:
    running.scheduler.allowed_failures = 3
    handle = start_cluster(_spec({"type": "address", "address": running.scheduler_address}))
    try:
        assert handle.cluster is None  # not ours: closing the job leaves it running
        assert handle.client.scheduler.address == running.scheduler_address
        assert handle.client.submit(sum, [1, 2]).result(timeout=60) == 3
        # A trial whose worker dies fails at once: ultron resumes it from its checkpoint.
        assert running.scheduler.allowed_failures == 0
    finally:
        handle.close()
    assert running.scheduler.status.name == "running"
    assert len(running.scheduler.workers) == 1


def test_the_environment_overrides_the_section(
    running: LocalCluster, monkeypatch: pytest.MonkeyPatch, silent_port: str
) -> None:
    monkeypatch.setenv("ULTRON_DASK_ADDRESS", running.scheduler_address)
    # Neither a scheduler that does not answer nor Kubernetes is tried.
    for cluster in ({"type": "address", "address": silent_port}, {"type": "kubernetes"}):
        check_scheduler(_spec(cluster))
        handle = start_cluster(_spec(cluster))
        try:
            assert handle.cluster is None
            assert handle.client.scheduler.address == running.scheduler_address
        finally:
            handle.close()


def test_a_scheduler_that_does_not_answer_is_a_spec_error(silent_port: str) -> None:
    spec = _spec({"type": "address", "address": silent_port})
    for attempt in (check_scheduler, start_cluster):
        with pytest.raises(SpecError) as info:
            attempt(spec)
        (issue,) = info.value.issues
        assert (issue.field, issue.value) == ("cluster.address", silent_port)
        assert "a Dask scheduler must answer there" in issue.rule
        assert "start the scheduler" in issue.fix


def test_a_wrong_override_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, silent_port: str
) -> None:
    monkeypatch.setenv("ULTRON_DASK_ADDRESS", silent_port)
    with pytest.raises(SpecError) as info:
        check_scheduler(_spec({"type": "local"}))
    assert info.value.issues[0].field == "ULTRON_DASK_ADDRESS"
    assert info.value.source == "the environment"
