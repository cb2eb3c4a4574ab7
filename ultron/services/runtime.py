"""The Redis a job uses: the spec's ``redis_url``, or an embedded server started on demand."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

from ultron.services.paths import ultron_home
from ultron.services.redis_server import ensure_embedded_redis
from ultron.spec.job import JobSpec

__all__ = ["job_redis"]

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def job_redis(spec: JobSpec) -> Iterator[str]:
    """Yield the job's Redis URL; an embedded server this call started is stopped after.

    The spec's ``redis_url`` wins, then the ``REDIS_URL`` environment variable, then an
    embedded server.

    The embedded server keeps its data (append-only file) in ``ULTRON_HOME/redis``, so the
    score cache and the state of unfinished jobs survive from one run to the next.
    """
    given = spec.redis_url or os.environ.get("REDIS_URL")
    if given:
        yield given
        return
    url, server = ensure_embedded_redis(ultron_home() / "redis")
    logger.info("embedded Redis at %s", url)
    try:
        yield url
    finally:
        if server is not None:
            server.stop()
