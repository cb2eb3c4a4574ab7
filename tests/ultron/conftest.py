"""Fixtures of the ``ultron`` tests: a real S3 server (moto's) on loopback."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest

_S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    # Region by environment: a region_name in client_kwargs makes bucket creation fail.
    "AWS_DEFAULT_REGION": "us-east-1",
}


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
