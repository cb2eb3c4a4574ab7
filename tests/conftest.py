"""Fixtures shared by the whole test suite: real Redis, Prefect and S3 (moto's) servers."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis

from ultron.api import prefect_defaults
from ultron.servers.redis_process import EmbeddedRedis


def stop_servers(home: Path) -> None:
    """Stop the Prefect server and the embedded Redis of ``home``, as `ultron server stop`.

    Jobs with no Prefect API or Redis of their own start those of their ``ULTRON_HOME`` and
    leave them up for the next job: each test's home would keep its own, dozens by the end.
    """
    from ultron.servers.home_redis import stop_redis
    from ultron.servers.prefect import stop_prefect

    if (home / "prefect" / "server.pid").exists():
        stop_prefect(home)
    if (home / "redis" / "redis.pid").exists():
        stop_redis(home)


_RESULT_FILES = ("best.json", "summary.json", "experiment.json")
_NOT_RESULTS = {"envs", ".venv", "site-packages", "checkpoints", "node_modules", "prefect", "redis"}


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def assert_strict_json_files(folder: Path) -> list[Path]:
    """Every ``*.json`` of every results folder under ``folder`` parses with a strict parser
    (no ``NaN``, ``Infinity``); returns the files checked. A results folder is one that holds
    a job's ``best.json`` or an experiment's or benchmark's ``summary.json``."""
    checked = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in _NOT_RESULTS]
        if not any(name in files for name in _RESULT_FILES):
            continue
        for name in sorted(files):
            if name.endswith(".json"):
                path = Path(root) / name
                try:
                    json.loads(path.read_text(), parse_constant=_refuse_constant)
                except ValueError as exc:
                    pytest.fail(f"{path} is not strict JSON: {exc}")
                checked.append(path)
    return checked


@pytest.fixture
def strict_json_files() -> Callable[[Path], list[Path]]:
    """:func:`assert_strict_json_files`, for a test that checks a folder itself."""
    return assert_strict_json_files


@pytest.fixture(autouse=True)
def _results_are_strict_json(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test, every JSON file of the results folders in its ``tmp_path`` is strict
    JSON: the one check of every test that produces job, experiment or benchmark results."""
    if "tmp_path" not in request.fixturenames:
        yield
        return
    tmp: Path = request.getfixturevalue("tmp_path")
    yield
    assert_strict_json_files(tmp)


@pytest.fixture(autouse=True)
def _stop_servers_of_test_homes(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test, stop the servers of the ``ULTRON_HOME``s in its ``tmp_path`` (the home
    itself or a folder one or two levels down)."""
    if "tmp_path" not in request.fixturenames:
        yield
        return
    tmp: Path = request.getfixturevalue("tmp_path")  # before its teardown
    yield
    pidfiles = ("prefect/server.pid", "redis/redis.pid")
    homes = {
        pidfile.parents[1]
        for depth in ("", "*/", "*/*/")
        for name in pidfiles
        for pidfile in tmp.glob(depth + name)
    }
    for home in sorted(homes):
        stop_servers(home)


_S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    # Region by environment: a region_name in client_kwargs makes bucket creation fail.
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a real Redis server, embedded and private to this test session."""
    with EmbeddedRedis(tmp_path_factory.mktemp("redis"), appendonly=False) as server:
        yield server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A client of the session's Redis (``decode_responses=True``), closed after the test.

    The server is shared by all tests: use keys under a namespace of your own, do not flush.
    """
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture(scope="session")
def ultron_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private ULTRON_HOME for the session: trial environments, embedded Redis, scratch."""
    home = tmp_path_factory.mktemp("ultron-home")
    before = os.environ.get("ULTRON_HOME")
    os.environ["ULTRON_HOME"] = str(home)
    yield home
    stop_servers(home)
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


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """``http://127.0.0.1:<port>`` of moto's S3 server, private to this test session.

    Port 0 lets the kernel pick a free port that this process then owns. The credentials,
    region and ``AWS_ENDPOINT_URL`` are set in the environment for the session, so child
    processes (Dask workers, trial processes) reach the same server.
    """
    pytest.importorskip("s3fs", reason="needs the s3 extra: pip install 'ultron-automl[s3]'")
    server_module = pytest.importorskip(
        "moto.server", reason="needs moto[server]: pip install 'ultron-automl[dev]'"
    )
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    env = {**_S3_ENV, "AWS_ENDPOINT_URL": endpoint}
    before = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield endpoint
    finally:
        server.stop()
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="session")
def s3_storage_options(s3_endpoint: str) -> dict[str, Any]:
    """fsspec ``storage_options`` that point s3fs at the session's S3 server."""
    return {"client_kwargs": {"endpoint_url": s3_endpoint}}


@pytest.fixture(scope="session")
def s3_url(s3_endpoint: str, s3_storage_options: dict[str, Any]) -> str:
    """``s3://ultron-test``: a bucket on the session's S3 server.

    Tests share the bucket: write under a prefix of your own (e.g. ``tmp_path.name``).
    """
    import s3fs

    s3fs.S3FileSystem(**s3_storage_options).mkdir("ultron-test")
    return "s3://ultron-test"


@pytest.fixture(scope="session")
def streaming_make_data() -> Any:
    """The streaming example's ``make_data.py`` as a module (its ``write`` makes the data)."""
    path = Path(__file__).resolve().parents[1] / "examples" / "streaming" / "make_data.py"
    spec = importlib.util.spec_from_file_location("streaming_make_data", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def service_processes() -> Callable[[str], list[str]]:
    """Lists the data-service processes still running whose arguments hold a given text
    (their config names their data and work folder)."""

    def running(text: str) -> list[str]:
        out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        return [
            line
            for line in out.splitlines()
            if "ultron.datamanager.server_process" in line and text in line
        ]

    return running


def _redis_servers(folder: Path) -> list[int]:
    """Pids of the live redis-servers whose ``--dir`` is ``folder`` (a server changes into it;
    its command line is rewritten to ``redis-server HOST:PORT``, so ``ps`` shows no --dir)."""
    found = []
    for proc in psutil.process_iter(["name"]):
        with contextlib.suppress(psutil.Error):
            if (
                "redis-server" in (proc.info["name"] or "")
                and proc.status() != psutil.STATUS_ZOMBIE
                and Path(proc.cwd()) == folder.resolve()
            ):
                found.append(proc.pid)
    return found


def _reap_redis_servers(folder: Path) -> list[int]:
    """Kill the redis-servers left working in ``folder``; returns their pids (for the assert)."""
    left = _redis_servers(folder)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)  # a test may have paused it
            os.kill(pid, signal.SIGKILL)
    return left


@pytest.fixture
def redis_servers() -> Callable[[Path], list[int]]:
    """Lists the pids of the live embedded redis-servers of a data folder."""
    return _redis_servers


@pytest.fixture
def reap_redis_servers() -> Callable[[Path], list[int]]:
    """Kills the redis-servers a test left in a data folder and returns their pids."""
    return _reap_redis_servers
