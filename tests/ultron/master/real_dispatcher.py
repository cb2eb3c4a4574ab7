"""A real ``TrialDispatcher`` for tests of one: the given client's Dask cluster, the session's
real Redis and trial processes of ``code``'s interpreter."""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis
from distributed import Client, LocalCluster

from ultron.containerize.environment import TrialEnvironment
from ultron.master.dispatcher import TrialDispatcher
from ultron.master.job_state import JobStore
from ultron.spec.job import JobSpec
from ultron.worker.pool import shutdown_processes


def real_dispatcher(
    client: Any, tmp_path: Path, redis_url: str, *, code: Path, model: str, **spec: Any
) -> TrialDispatcher:
    """A dispatcher of a job of ``model`` from ``code`` (``spec``: more spec fields), under a
    fresh job id."""
    job = JobSpec.model_validate(
        {
            "code": str(code),
            "model": model,
            "search_space": {"x": [1]},
            "storage": str(tmp_path / "runs"),
            **spec,
        },
        context={"check_paths": False},
    )
    env = TrialEnvironment(
        python=Path(sys.executable), code_hash="0" * 64, root=tmp_path, source=code, reused=True
    )
    store = JobStore(redis.Redis.from_url(redis_url), f"test-{uuid.uuid4().hex[:8]}")
    return TrialDispatcher(
        client, store, spec=job, env=env, redis_url=redis_url, scratch=str(tmp_path / "scratch")
    )


@contextlib.contextmanager
def in_process_cluster(workers: int) -> Iterator[Client]:
    """A client of a local cluster of ``workers`` in-process workers of one thread each; the
    warm trial processes stop with it."""
    with (
        LocalCluster(n_workers=workers, threads_per_worker=1, processes=False) as cluster,
        Client(cluster) as client,
    ):
        yield client
    shutdown_processes()
