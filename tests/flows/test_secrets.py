"""A job never writes its secrets: not in logs, artifacts, results, the job's folder or Redis.

The job gets a Redis that asks for a password (``--requirepass``) and an object store (moto's
S3 server) whose secret key is distinctive; it runs once through ``ultron.run`` and once through
the ``ultron run`` command. Then everything it produced is read back and searched for both.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

import ultron
from tests.flows.prefect_logs import flow_run_logs, flow_run_of
from ultron.servers.redis_process import find_redis_server

REPO = Path(__file__).parents[2]
TOY = REPO / "tests" / "data" / "toy"
ULTRON = str(Path(sys.executable).with_name("ultron"))
PASSWORD = "SECRETPASS123"
STORE_SECRET = "S3SECRET-xyz-987654"
SECRETS = (PASSWORD, STORE_SECRET)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]
pytest.importorskip("s3fs", reason="S3 needs the s3 extra")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def locked_redis(tmp_path: Path) -> Iterator[str]:
    """``redis://:SECRETPASS123@127.0.0.1:PORT/0`` of a private server that asks for it.

    Started here, not with ``EmbeddedRedis``: that one takes no extra server arguments.
    """
    port = _free_port()
    args = ["--port", str(port), "--bind", "127.0.0.1", "--requirepass", PASSWORD]
    args += ["--dir", str(tmp_path), "--save", "", "--appendonly", "no"]
    proc = subprocess.Popen(
        [find_redis_server(), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://:{PASSWORD}@127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url)
        deadline = time.monotonic() + 30
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        with pytest.raises(redis.AuthenticationError):  # it really asks for the password
            redis.Redis(host="127.0.0.1", port=port).ping()
        client.close()
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def store_secret(s3_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Moto takes any secret key: a distinctive one, for this test's processes."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", STORE_SECRET)
    return STORE_SECRET


def _spec(locked_redis: str, storage: str) -> dict[str, Any]:
    return {
        "name": "secrets",
        "code": str(TOY),
        "model": "toy_model:Quadratic",
        "search_space": {"x": {"type": "uniform", "low": 0.0, "high": 4.0}},
        "num_iterations": 2,
        "parallelism": 2,
        "redis_url": locked_redis,
        "storage": storage,
    }


def _found(text: str | bytes, where: str) -> list[str]:
    data = text.encode() if isinstance(text, str) else text
    return [f"{secret!r} in {where}" for secret in SECRETS if secret.encode() in data]


def _files_found(folder: Path) -> list[str]:
    found: list[str] = []
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            found += _found(path.read_bytes(), str(path))
    return found


def _results_found(results_url: str, storage_options: dict[str, Any]) -> list[str]:
    import s3fs

    fs = s3fs.S3FileSystem(**storage_options)
    files = fs.find(results_url)
    assert any(name.endswith("best.json") for name in files), files
    found: list[str] = []
    for name in files:
        found += _found(fs.cat_file(name), f"s3://{name}")
    return found


def _redis_found(url: str) -> list[str]:
    """Every key of the private server and its value, whatever its type."""
    client = redis.Redis.from_url(url)
    found: list[str] = []
    for key in client.scan_iter(count=1000):
        kind = client.type(key).decode()
        value: Any
        if kind == "string":
            value = client.get(key)
        elif kind == "hash":
            value = client.hgetall(key)
        elif kind == "list":
            value = client.lrange(key, 0, -1)
        elif kind == "set":
            value = client.smembers(key)
        elif kind == "zset":
            value = client.zrange(key, 0, -1, withscores=True)
        elif kind == "stream":
            value = client.xrange(key)
        else:
            value = b""
        found += _found(repr(key).encode() + repr(value).encode(), f"redis key {key!r}")
    client.close()
    return found


def _prefect_found(job_id: str) -> list[str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    key = "".join(c if c.isalnum() else "-" for c in job_id.lower())
    found: list[str] = []
    # Filtered on the server: it holds every earlier test's artifacts too, more than a page.
    only_this_job = ArtifactFilter(key=ArtifactFilterKey(like_=key))
    with get_client(sync_client=True) as client:
        artifacts = [
            a
            for a in client.read_artifacts(artifact_filter=only_this_job)
            if a.key and a.key.startswith(key)
        ]
        assert artifacts, f"no artifact of {job_id}"
        for artifact in artifacts:
            found += _found(artifact.model_dump_json(), f"artifact {artifact.key}")
    return found


def _flow_run_found(job_id: str) -> tuple[list[str], list[str]]:
    """What the job's flow run keeps in Prefect: (its log lines, its parameters)."""
    lines = flow_run_logs(job_id)
    assert lines, "the flow run logged nothing to Prefect"
    return _found(lines, "Prefect's logs of the flow run"), _found(
        repr(flow_run_of(job_id).parameters), "the flow run's parameters"
    )


def test_api_job_writes_no_secret(
    tmp_path: Path,
    ultron_home: Path,
    locked_redis: str,
    store_secret: str,
    s3_url: str,
    s3_storage_options: dict[str, Any],
) -> None:
    job_id = f"secrets-api-{uuid.uuid4().hex[:8]}"
    storage = f"{s3_url}/{tmp_path.name}"
    result = ultron.run(_spec(locked_redis, storage), job_id=job_id)
    assert result.status == "completed" and len(result.trials) == 2

    import s3fs

    best = json.loads(s3fs.S3FileSystem(**s3_storage_options).cat_file(result.files["best.json"]))
    assert best["spec"]["redis_url"] == locked_redis.replace(PASSWORD, "****")
    found = _files_found(ultron_home / "scratch" / job_id)
    found += _results_found(result.results_url, s3_storage_options)
    found += _prefect_found(job_id)
    found += _redis_found(locked_redis)
    logged, parameters = _flow_run_found(job_id)
    assert found + logged == []
    assert parameters == []  # ultron.run hands Prefect the spec with its password masked


def test_cli_job_prints_and_logs_no_secret(
    tmp_path: Path,
    ultron_home: Path,
    locked_redis: str,
    store_secret: str,
    s3_url: str,
    s3_storage_options: dict[str, Any],
) -> None:
    job_id = f"secrets-cli-{uuid.uuid4().hex[:8]}"
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump(_spec(locked_redis, f"{s3_url}/{tmp_path.name}")))
    env = {**os.environ, "ULTRON_HOME": str(ultron_home)}
    done = subprocess.run(
        [ULTRON, "run", str(spec), "--job-id", job_id],
        capture_output=True,
        env=env,
        cwd=tmp_path,
        timeout=540,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    log = ultron_home / "scratch" / job_id / "job.log"
    assert log.is_file() and log.stat().st_size > 0

    found = _found(done.stdout, "stdout") + _found(done.stderr, "stderr")
    found += _files_found(ultron_home / "scratch" / job_id)
    found += _results_found(f"{s3_url}/{tmp_path.name}/{job_id}", s3_storage_options)
    found += _redis_found(locked_redis)
    assert found == []
