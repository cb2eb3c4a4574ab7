"""Every Redis key ultron uses, in one place: the layout of what jobs share.

All keys start with a namespace: a tenant's own, :func:`tenant_namespace` (``ultron`` for the
tenant ``default``, the one tenant of a Redis without ACL users; ``ultron:t:<tenant>`` for every
other), or another a caller chooses, as tests do. A tenant's jobs, score cache and logs live
under its namespace, so one ACL key pattern, :func:`tenant_key_patterns`, covers them and no other
tenant's (:mod:`ultron.redis.tenants`); only the limiter's keys are shared by every tenant:

- ``<ns>:job:<id>``: a hash with the job's status, its strategy's and stopper's state and the
  next trial number, and what its first run stored: ``spec`` (the job spec as JSON, our field
  names) and ``code_hash`` (its code base's content hash), which a later run with the same id
  must match (:mod:`ultron.master.resume`); ``<ns>:job:<id>:trials`` (trial id -> row of the
  trial table) and ``<ns>:job:<id>:curves`` (trial id -> what it reported). They outlive the
  job: a job with the same id resumes from them. ``<ns>:job:<id>:master`` is the lease of the
  master running the job (:mod:`ultron.master.heartbeat`), with a TTL.
- ``<ns>:job:<id>:run:*``: transient, removed by ``finalize``: ``running`` (trials in flight),
  ``reports`` (the report stream of all trials), ``reports:<trial>`` (one trial's reports),
  ``stop:<trial>`` (early stopping wants the trial to end), ``cancel`` (``ultron cancel`` asks
  the run holding the lease token it holds to stop), ``result:<trial>:<attempt>`` (a
  finished attempt's result, so that Dask running it again returns it).
- ``<ns>:cache:v<version>:<tenant>:<digest>``: the score cache of one computation of one
  tenant, a hash from the canonical configuration to what its trial scored (all its metrics).
  The digest is the sha256 of what determines a score besides the configuration: the code base
  hash, the data fingerprint (or none), the model class and the job seed (each trial's seed
  derives from it and the configuration), and of the tenant: a tenant's job never reads
  another tenant's scores, even of the same computation. A new :data:`SCORE_CACHE_VERSION`
  leaves the old entries unread; ``<ns>:cache:*`` matches them all (:func:`score_cache_pattern`).
- ``<ns>:limiter:<name>``: the resource limiter: its leases (``leases``, ``units``,
  ``tenant``, ``owners``, ``granted``, ``jobs``), its queue of waiting jobs (``waiting``,
  ``waiters``, ``waiter_expiry``, ``heads``, ``seq``, ``served``; ``events`` is its pub/sub
  channel) and the limits a platform team sets: ``max_units`` (a string) and
  ``tenant_max_units`` (a hash tenant -> units); see :mod:`ultron.limiter.resource_limiter`.

A job id belongs to the tenant of its first run (:mod:`ultron.master.resume`), so the keys
under ``<ns>:job:<id>`` are that tenant's too. Two tenants may use the same job id: their
namespaces keep the jobs apart. (Before tenants had namespaces, every job was under ``ultron``:
such a job reads as a job of the tenant ``default``.)

Example:
    >>> job("quickstart-1a2b"), trial_stop("quickstart-1a2b", "0003")
    ('ultron:job:quickstart-1a2b', 'ultron:job:quickstart-1a2b:run:stop:0003')
    >>> def key(model="pkg.train:Model", tenant="team-a"):
    ...     return score_cache("c0de", "da7a", model=model, seed=0, tenant=tenant, namespace="t")
    >>> key().startswith("t:cache:v3:team-a:"), len(key())  # v3: the version; then a sha256
    (True, 82)
    >>> key() == key(model="pkg.train:Other"), key() == key(tenant="team-b")
    (False, False)
    >>> tenant_namespace("default"), tenant_namespace("team-a")
    ('ultron', 'ultron:t:team-a')
    >>> job("j-1", namespace=tenant_namespace("team-a"))
    'ultron:t:team-a:job:j-1'
"""

from __future__ import annotations

import hashlib
import json

__all__ = [
    "DEFAULT_TENANT",
    "LIMITER_KEYS",
    "NAMESPACE",
    "SCORE_CACHE_VERSION",
    "job",
    "job_cancel",
    "job_curves",
    "job_master",
    "job_run",
    "job_trials",
    "limiter",
    "report_stream",
    "score_cache",
    "score_cache_pattern",
    "tenant_key_patterns",
    "tenant_namespace",
    "trial_notices",
    "trial_reports",
    "trial_result",
    "trial_slot",
    "trial_started",
    "trial_stop",
]

NAMESPACE = "ultron"

DEFAULT_TENANT = "default"
"""The tenant of a Redis without ACL users (and of jobs whose spec names none)."""

LIMITER_KEYS = (
    "leases", "units", "tenant", "owners", "jobs", "granted",
    "waiting", "waiters", "waiter_expiry", "seq", "served", "heads", "events",
    "max_units", "tenant_max_units",
)  # fmt: skip
"""The limiter's keys (``events`` is its pub/sub channel): every tenant's job uses them."""

# Raised whenever what a score cache entry means changes: keys of another version are not read.
# 3: entries belong to a tenant.
SCORE_CACHE_VERSION = 3


def job(job_id: str, *, namespace: str = NAMESPACE) -> str:
    """The job's hash: status, strategy and stopper state, next trial number, spec, code hash,
    and the parallelism last asked (``ultron scale``; :mod:`ultron.master.scaling`)."""
    return f"{namespace}:job:{job_id}"


def job_trials(job_id: str, *, namespace: str = NAMESPACE) -> str:
    """The trial table: trial id -> the trial's row."""
    return f"{job(job_id, namespace=namespace)}:trials"


def job_curves(job_id: str, *, namespace: str = NAMESPACE) -> str:
    """The learning curves: trial id -> what the trial reported."""
    return f"{job(job_id, namespace=namespace)}:curves"


def job_master(job_id: str, *, namespace: str = NAMESPACE) -> str:
    """The job's lease: the token of the master running it, with a TTL its heartbeat renews.

    Not under the transient prefix: ``finalize`` clears that while the master still holds it.
    """
    return f"{job(job_id, namespace=namespace)}:master"


def job_run(job_id: str, *parts: str, namespace: str = NAMESPACE) -> str:
    """A key under the job's transient prefix (``*`` as the part gives a SCAN pattern)."""
    return ":".join((job(job_id, namespace=namespace), "run", *parts))


def job_cancel(job_id: str, *, namespace: str = NAMESPACE) -> str:
    """Set by ``ultron cancel``: the job's process sees it and cancels the job (transient)."""
    return job_run(job_id, "cancel", namespace=namespace)


def report_stream(job_id: str, *, namespace: str = NAMESPACE) -> str:
    """The job's list of reports of all trials, in arrival order (read by the master)."""
    return job_run(job_id, "reports", namespace=namespace)


def trial_reports(job_id: str, trial_id: str, *, namespace: str = NAMESPACE) -> str:
    """The list of one trial's reports (its learning curve)."""
    return job_run(job_id, "reports", trial_id, namespace=namespace)


def trial_stop(job_id: str, trial_id: str, *, namespace: str = NAMESPACE) -> str:
    """Set (to ``{"decision": ..., "at": time}``) when early stopping wants the trial to end."""
    return job_run(job_id, "stop", trial_id, namespace=namespace)


def trial_started(job_id: str, trial_id: str, attempt: int, *, namespace: str = NAMESPACE) -> str:
    """Set when a worker starts the attempt: a lost worker's attempt that never started (it
    waited behind another trial) is submitted again without counting as a retry."""
    return job_run(job_id, "started", trial_id, str(attempt), namespace=namespace)


def trial_result(job_id: str, trial_id: str, attempt: int, *, namespace: str = NAMESPACE) -> str:
    """A finished attempt's result, so that running the attempt again returns it instead."""
    return job_run(job_id, "result", trial_id, str(attempt), namespace=namespace)


def trial_notices(job_id: str, *, namespace: str = NAMESPACE) -> str:
    """The job's list of answers written (``<trial id>:<attempt>``, a newline, the answer), in
    order: the master reads an answer as soon as it is written, before Dask reports the task's
    end."""
    return job_run(job_id, "answered", namespace=namespace)


def trial_slot(job_id: str, slot: str, *, namespace: str = NAMESPACE) -> str:
    """The list a trial submitted ahead of its sampling waits on for its request
    (``ultron.worker.runner.await_trial``)."""
    return job_run(job_id, "slot", slot, namespace=namespace)


def tenant_namespace(tenant: str | None) -> str:
    """The namespace of ``tenant``'s keys: ``ultron`` for :data:`DEFAULT_TENANT` (and None),
    ``ultron:t:<tenant>`` for every other. A tenant name has no ``:`` (it is checked as a job id
    is), so no tenant's namespace is inside another's."""
    if tenant is None or tenant == DEFAULT_TENANT:
        return NAMESPACE
    return f"{NAMESPACE}:t:{tenant}"


def tenant_key_patterns(tenant: str) -> tuple[str, ...]:
    """The ACL key patterns of ``tenant``'s own keys: its jobs, score cache and logs.

    Example:
        >>> tenant_key_patterns("team-a")
        ('ultron:t:team-a:*',)
    """
    return (f"{tenant_namespace(tenant)}:*",)


def score_cache(
    code_hash: str,
    data_hash: str | None,
    *,
    model: str,
    seed: int,
    tenant: str,
    deterministic: bool = False,
    namespace: str = NAMESPACE,
) -> str:
    """The score cache of one computation of one tenant: code base, data, model class, job seed
    and whether the trials ran with the frameworks' deterministic settings (``deterministic``).

    The tenant is in the key twice: readable (so a platform team can find or drop a tenant's
    entries) and in the digest (so no tenant name can make another's key).

    The parts are hashed (sha256 of their canonical JSON) so the key stays short however long
    the model path is; the objective metric is not a part: entries hold all metrics, and a
    cache answers only those that hold the job's.
    """
    parts = {
        "code": code_hash,
        "data": data_hash,
        "model": model,
        "seed": seed,
        "tenant": tenant,
        "version": SCORE_CACHE_VERSION,
    }
    if deterministic:  # a part only when set: the keys of every other job stay as they were
        parts["deterministic"] = True
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
    return f"{namespace}:cache:v{SCORE_CACHE_VERSION}:{tenant}:{digest}"


def score_cache_pattern(*, namespace: str = NAMESPACE) -> str:
    """A SCAN pattern that matches every score cache key of ``namespace``, any version."""
    escaped = "".join(f"\\{c}" if c in "*?[]\\" else c for c in namespace)
    return f"{escaped}:cache:*"


def limiter(name: str, *, namespace: str = NAMESPACE) -> str:
    """One of the resource limiter's keys (``leases``, ``max_units``, ``tenant_max_units``...).

    Example:
        >>> limiter("tenant_max_units")
        'ultron:limiter:tenant_max_units'
    """
    return f"{namespace}:limiter:{name}"
