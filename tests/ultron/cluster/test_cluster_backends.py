"""start_cluster's choice of backend, on a real Dask cluster of processes: a scheduler that runs
already (``cluster: {type: address}`` or ``ULTRON_DASK_ADDRESS``), one that does not answer."""

from __future__ import annotations

import logging
import os
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
from ultron.spec.sections import Resources

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


def _listening(port: int) -> set[str]:
    """The addresses this process listens on at ``port`` (the local scheduler runs here)."""
    import psutil

    return {
        conn.laddr.ip
        for conn in psutil.Process().net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port
    }


@pytest.mark.parametrize("gpu", [0, 1])
def test_the_local_dashboard_listens_on_loopback_and_its_link_works(
    gpu: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import httpx

    # gpu 1: the local cluster of GPU-pinned workers, on one GPU this machine is said to have.
    monkeypatch.setenv("ULTRON_GPUS", "1")
    spec = _spec({"type": "local"}).model_copy(update={"num_iterations": 1})
    if gpu:
        spec = spec.model_copy(update={"resources": spec.resources.model_copy(update={"gpu": 1})})
    else:
        spec = spec.model_copy(update={"parallelism": 64})
    handle = start_cluster(spec)
    try:
        link = handle.dashboard_link
        assert link is not None and link.startswith("http://127.0.0.1:")
        port = handle.client.scheduler_info()["services"]["dashboard"]
        assert _listening(port) == {"127.0.0.1"}  # not 0.0.0.0 nor ::, the scheduler's log
        assert httpx.get(link, timeout=30).status_code == 200
        # One trial in the budget: one worker process, not parallelism's 64 (on a GPU: one).
        assert len(handle.client.scheduler_info()["workers"]) == 1

        # Dask's monitoring turned down (QUIET_DASK), in the workers and the scheduler.
        def monitoring(dask_worker: Any = None, dask_scheduler: Any = None) -> dict[str, float]:
            """The periods (ms) of the profiler and the event loop's tick; no profiler: off.
            Nested: it travels by value (the workers cannot import the tests)."""
            server = dask_worker or dask_scheduler
            return {
                name: float(callback.callback_time)
                for name, callback in server.periodic_callbacks.items()
                if name in ("tick", "profile")
            }

        (callbacks,) = handle.client.run(monitoring).values()
        assert callbacks == handle.client.run_on_scheduler(monitoring) == {"tick": 1000.0}
    finally:
        handle.close()


def test_local_workers_are_capped_by_the_budget_and_the_cores() -> None:
    cores = len(os.sched_getaffinity(0))
    spec = _spec({"type": "local"})
    wide = spec.model_copy(update={"parallelism": 64, "num_iterations": 1000})
    assert cluster_module.local_worker_count(wide) == min(64, 4 * cores)
    few = spec.model_copy(update={"parallelism": 3, "num_iterations": 1000})
    assert cluster_module.local_worker_count(few) == min(3, 4 * cores)
    assert cluster_module.local_worker_count(wide.model_copy(update={"num_iterations": 8})) == 8


def test_trials_of_a_fraction_of_a_core_get_as_many_workers_as_the_cores_fit() -> None:
    wide = _spec({"type": "local"}).model_copy(update={"parallelism": 64, "num_iterations": 1000})

    def at(cpu: float) -> JobSpec:
        return wide.model_copy(update={"resources": Resources(cpu=cpu)})

    count = cluster_module.local_worker_count
    assert count(wide, cores=2) == 8  # a core each (the default): four a core
    assert count(at(0.1), cores=2) == 20  # a tenth of a core each: ten a core
    assert count(at(1 / 3), cores=2) == 8  # six would fit: four a core is more
    assert count(at(0.1), cores=8) == 64  # never more than parallelism
    assert count(at(0.1).model_copy(update={"num_iterations": 12}), cores=2) == 12
    cores = len(os.sched_getaffinity(0))  # this machine's, when none is given
    assert count(at(0.1)) == min(64, 10 * cores)


def test_the_dashboard_address_is_checked_and_may_open_it() -> None:
    assert _spec({"type": "local", "dashboard_address": ":8787"}).cluster.dashboard_address == (
        ":8787"
    )
    # The log's link names the one host the dashboard was told to listen on.
    assert cluster_module._dashboard_host("10.1.2.3:8787") == "10.1.2.3"
    assert cluster_module._dashboard_host("127.0.0.1:0") == "127.0.0.1"  # a slurm scheduler's
    assert cluster_module._dashboard_host(":8787") is None  # host is another: loopback it is
    for bad in ("8787", "host:99999", "a b:1", "http://x:1"):
        with pytest.raises(SpecError) as info:
            _spec({"type": "local", "dashboard_address": bad})
        assert "cluster.dashboard_address" in str(info.value) and "HOST:PORT" in str(info.value)
