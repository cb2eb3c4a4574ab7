"""The Redis a job uses: the spec's ``redis_url``, or an embedded server started on demand."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from ultron.paths import ultron_home
from ultron.redis_server import ensure_embedded_redis
from ultron.spec import JobSpec

__all__ = ["job_redis"]

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def job_redis(spec: JobSpec) -> Iterator[str]:
    """Yield the job's Redis URL; an embedded server this call started is stopped after.

    The embedded server keeps its data (append-only file) in ``ULTRON_HOME/redis``, so the
    score cache and the state of unfinished jobs survive from one run to the next.
    """
    if spec.redis_url:
        yield spec.redis_url
        return
    url, server = ensure_embedded_redis(ultron_home() / "redis")
    logger.info("embedded Redis at %s", url)
    try:
        yield url
    finally:
        if server is not None:
            server.stop()
