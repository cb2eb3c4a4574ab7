"""Elastic jobs, the requests: ``ultron scale JOB N`` and the parallelism a job runs with.

A request is the job's parallelism, written to its hash in Redis (``parallelism``, beside the
spec): from any machine that reaches the job's Redis, like ``ultron cancel``. The running
master reads it before each dispatch (:class:`ultron.master.scaler.Scaler`), and a later run
of the job (a resume) starts with it: :func:`effective_spec` gives that run's spec. A run whose
spec asks for another ``parallelism`` than the run before it wins over an older request.
"""

from __future__ import annotations

from typing import Any

from ultron.errors import UsageError
from ultron.paths import check_job_id
from ultron.redis import keys
from ultron.spec.job import MAX_PARALLELISM, JobSpec

__all__ = ["effective_spec", "request_scale", "requested_parallelism", "scale_job"]

# Fields of the job's hash: the parallelism asked for last, and the spec's parallelism of the
# run that stored it (so that a run asking for another one wins over it).
_ASKED = "parallelism"
_SPEC = "parallelism_of_spec"


def _check(parallelism: object) -> int:
    if (
        isinstance(parallelism, bool)
        or not isinstance(parallelism, int)
        or not 1 <= parallelism <= MAX_PARALLELISM
    ):
        raise UsageError(
            f"parallelism is {parallelism!r}; it must be a whole number of trials from 1 to "
            f"{MAX_PARALLELISM}. Fix: pass e.g. 4"
        )
    return parallelism


def request_scale(
    client: Any, job_id: str, parallelism: int, *, namespace: str = keys.NAMESPACE
) -> None:
    """Ask job ``job_id`` to run ``parallelism`` trials at once from its next dispatch on (and
    every later run of it to start with that many).

    Raises:
        UsageError: ``parallelism`` is not a whole number of at least 1.
    """
    client.hset(keys.job(job_id, namespace=namespace), _ASKED, str(_check(parallelism)))


def requested_parallelism(
    client: Any, job_id: str, *, namespace: str = keys.NAMESPACE
) -> int | None:
    """The parallelism last asked for job ``job_id`` (its run's, or ``ultron scale``'s)."""
    raw = client.hget(keys.job(job_id, namespace=namespace), _ASKED)
    return int(raw) if raw else None


def effective_spec(client: Any, job_id: str, spec: JobSpec) -> JobSpec:
    """The spec a run of job ``job_id`` runs with: ``spec`` with the parallelism of the last
    ``ultron scale``, unless ``spec`` asks for another parallelism than the run before it did.

    Records the parallelism this run starts with, for ``ultron scale`` and the next run.
    """
    key = keys.job(job_id, namespace=keys.tenant_namespace(spec.tenant))
    asked, of_spec = client.hmget(key, [_ASKED, _SPEC])
    if asked and of_spec and int(of_spec) == spec.parallelism:
        parallelism = int(asked)
    else:
        parallelism = spec.parallelism
    client.hset(key, mapping={_ASKED: parallelism, _SPEC: spec.parallelism})
    if parallelism == spec.parallelism:
        return spec
    least = spec.min_parallelism
    return spec.model_copy(
        update={
            "parallelism": parallelism,
            "min_parallelism": None if least is None else min(least, parallelism),
        }
    )


def scale_job(client: Any, job_id: str, parallelism: int) -> str:
    """``ultron scale``: check the job and the number, then ask; returns the job's status.

    A ``running`` job applies it from its next dispatch; any other job starts its next run
    (a resume) with it.

    Raises:
        UsageError: the job is not known to this Redis, or ``parallelism`` is not a whole
            number of at least 1.
    """
    from ultron.master.overview import find_job, overview

    _check(parallelism)
    namespace = find_job(client, check_job_id(job_id))  # the caller's job: a tenant's own
    if namespace is None:
        known = "Fix: `ultron jobs` lists them"
        raise UsageError(f"job {job_id!r} is not known to this Redis. {known}")
    request_scale(client, job_id, parallelism, namespace=namespace)
    return str(overview(client, job_id, namespace=namespace).status)
