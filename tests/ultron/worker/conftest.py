"""Fixtures of the worker's tests: the checkpoint store of one trial, a folder or S3."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ultron.worker.checkpoint_stores import Store


@pytest.fixture(params=["folder", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """Trial 1's checkpoints in a local folder, then in a bucket of the session's S3 server."""
    if request.param == "folder":
        return Store(f"file://{tmp_path}/store/checkpoints/trial-1", {})
    s3_url = request.getfixturevalue("s3_url")
    options = request.getfixturevalue("s3_storage_options")
    return Store(f"{s3_url}/{tmp_path.name}/checkpoints/trial-1", options)
