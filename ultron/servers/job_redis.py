"""The Redis a job uses: the spec's ``redis_url``, ``REDIS_URL``, or the embedded server."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

from ultron.paths import ultron_home
from ultron.preflight import check_redis
from ultron.secrets import add_secrets, url_password
from ultron.servers.home_redis import start_redis
from ultron.spec.job import JobSpec

__all__ = ["job_redis", "shared_redis_url"]

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def job_redis(spec: JobSpec) -> Iterator[str]:
    """Yield the job's Redis URL, one that answers.

    The spec's ``redis_url`` wins, then the ``REDIS_URL`` environment variable; either is
    checked with one ``PING`` (a few seconds at most, no retry), so a wrong URL fails at once
    and names its field, instead of after the clients' retry budget (``ULTRON_REDIS_RETRY_S``).

    Otherwise the embedded server of ``ULTRON_HOME`` is used (:mod:`ultron.servers.home_redis`):
    started if it does not run, shared by every job of this user on this machine, and up
    until ``ultron server stop``. Its URL holds its password, which the logs mask. Its
    append-only file keeps the score cache and the state of unfinished jobs from one run to
    the next.

    Raises:
        SpecError: ``redis_url`` or ``REDIS_URL`` leads to no Redis that answers.
        UltronError: the embedded server could not be started, or did not answer.
    """
    given = spec.redis_url or os.environ.get("REDIS_URL")
    if given:
        check_redis(given, field="redis_url" if spec.redis_url else "REDIS_URL")
        yield given
        return
    server = start_redis(ultron_home())
    add_secrets([url_password(server.url) or ""])
    logger.info("embedded Redis at %s (pid %s)", server.socket, server.pid)
    yield server.url


def shared_redis_url(redis_url: str | None = None) -> str:
    """The Redis the jobs share, for a request about a job from outside it (``ultron scale``
    from Python or a deployment): ``redis_url``, else ``REDIS_URL`` (either checked with one
    ``PING``), else this machine's embedded server.

    Raises:
        SpecError: the given URL leads to no Redis that answers.
    """
    given = redis_url or os.environ.get("REDIS_URL")
    if given:
        check_redis(given, field="redis_url" if redis_url else "REDIS_URL")
        return given
    return start_redis(ultron_home()).url
