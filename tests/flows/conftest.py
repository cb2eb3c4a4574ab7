"""Fixtures of the flow tests. ``prefect_server``: a real local Prefect server with the
repository's deployments and a process worker, as a platform team runs them (README: server,
work pools, deploy, worker). ``dask_processes``: ``dask scheduler`` and ``dask worker``
processes that a test starts on loopback (a cluster that runs already).

One per test session (it takes 20-40 s to start): the server on a free loopback port with its
own ``PREFECT_HOME`` and database, ``prefect deploy --all`` from ``prefect.yaml``, and a
``prefect worker`` started in a folder of its own (``ULTRON_REPO`` is the repository, as the
deployments' pull step wants).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.flows.dask_processes import DaskProcesses

REPO = Path(__file__).parents[2]
BIN = Path(sys.executable).parent


@dataclass
class PrefectServer:
    """A running server: its URLs, the environment that reaches it, and its worker's folder."""

    url: str
    api_url: str
    env: dict[str, str]
    worker_dir: Path
    logs: Path

    def prefect(self, *args: str, cwd: Path = REPO, timeout: float = 300) -> str:
        """Run ``prefect ARGS`` against the server; its output (fails the test on an error)."""
        done = subprocess.run(
            [str(BIN / "prefect"), "--no-prompt", *args],
            cwd=cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, f"prefect {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _healthy(api_url: str, proc: subprocess.Popen[bytes], logs: Path) -> None:
    deadline = time.monotonic() + 180  # 7-20 s idle; a loaded 2-core machine takes longer
    while True:
        assert proc.poll() is None, f"the Prefect server exited: {logs.read_text()[-3000:]}"
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"{api_url}/health", timeout=5) as answer,
        ):
            if answer.status == 200:  # our process lives and answers on its port
                return
        assert time.monotonic() < deadline, f"no healthy server: {logs.read_text()[-3000:]}"
        time.sleep(0.5)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a process started in a session of its own, and everything it started."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@contextlib.contextmanager
def _running_server(root: Path, extra_env: dict[str, str]) -> Iterator[PrefectServer]:
    """Start the server, create the work pools, deploy ``prefect.yaml``, start a worker."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    logs = root / "logs"
    logs.mkdir(parents=True)
    worker_dir = root / "worker"
    worker_dir.mkdir()
    env = {
        **os.environ,
        **extra_env,
        "PREFECT_HOME": str(root / "prefect-home"),
        "PREFECT_API_URL": f"{url}/api",
        "PREFECT_UI_API_URL": f"{url}/api",  # the UI asks this address: it must be the port
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_API_SERVICES_TELEMETRY_ENABLED": "false",
        "ULTRON_REPO": str(REPO),
    }
    env.pop("PREFECT_API_KEY", None)
    started: list[subprocess.Popen[bytes]] = []
    try:
        with (logs / "server.log").open("wb") as out:
            server = subprocess.Popen(
                [
                    str(BIN / "prefect"),
                    "server",
                    "start",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        started.append(server)
        _healthy(f"{url}/api", server, logs / "server.log")
        handle = PrefectServer(url, f"{url}/api", env, worker_dir, logs)
        handle.prefect("work-pool", "create", "local-process", "--type", "process")
        handle.prefect(
            "work-pool",
            "create",
            "kubernetes",
            "--type",
            "kubernetes",
            "--base-job-template",
            str(REPO / "infra" / "prefect" / "kubernetes-base-job-template.json"),
        )
        handle.prefect("deploy", "--all")
        with (logs / "worker.log").open("wb") as out:
            started.append(
                subprocess.Popen(
                    [str(BIN / "prefect"), "worker", "start", "--pool", "local-process"],
                    cwd=worker_dir,  # not the repository, not the user's folder
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        yield handle
    finally:
        for proc in reversed(started):
            _stop(proc)


@pytest.fixture(scope="session")
def prefect_server(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, ultron_home: Path, s3_endpoint: str
) -> Iterator[PrefectServer]:
    """A real Prefect server with the deployments of ``prefect.yaml`` and a process worker,
    shared by the tests that need one. Its jobs use the session's Redis, ``ULTRON_HOME`` and
    S3 server (moto's, on loopback)."""
    root = tmp_path_factory.mktemp("prefect-server")
    extra = {"REDIS_URL": redis_url, "ULTRON_HOME": str(ultron_home)}
    with _running_server(root, extra) as server:
        print(f"Prefect server {server.url}; logs in {server.logs}")
        yield server


@pytest.fixture
def dask_processes(tmp_path: Path) -> Iterator[DaskProcesses]:
    """``dask scheduler`` and ``dask worker`` processes the test starts, killed when it ends."""
    processes = DaskProcesses(tmp_path)
    try:
        yield processes
    finally:
        processes.stop()
