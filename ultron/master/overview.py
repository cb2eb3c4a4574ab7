"""What the terminal shows of jobs: read from the Redis the jobs share, never from a job's
process, so ``ultron status`` and ``ultron jobs`` work from any machine that reaches it.

A job is known by its hash ``ultron:job:<id>`` (:mod:`ultron.redis.keys`): its status (an
active one shows ``lost`` when its master's lease, ``...:master``, is gone: see
:mod:`ultron.master.heartbeat`), the spec its first run stored (redacted), when that run
started, when it last changed and when its master last beat; its trial table gives the trials
done and the best so far; while it runs, ``...:run:running`` names the trials in flight and
``...:run:reports:<trial>`` holds what each reported (``ultron.report``), newest last.

Who asks decides what is seen (:mod:`ultron.redis.tenants`): a tenant's credentials see its own
namespace only (:func:`visible_jobs`, :func:`find_job`), an admin's every tenant's. Another
tenant's job is, to a tenant, no job at all: Redis refuses its keys (NOPERM), which reads as
"no such job", never as "not yours".

Example:
    >>> import redis, uuid
    >>> client = redis.Redis.from_url(redis_url)
    >>> job_id = f"doc-{uuid.uuid4().hex[:8]}"
    >>> _ = client.hset(f"ultron:job:{job_id}", mapping={"status": "running", "updated": "1"})
    >>> job_id in known_jobs(client), overview(client, job_id).status  # no master holds it
    (True, 'lost')
    >>> _ = client.set(f"ultron:job:{job_id}:master", "host/1/abc", px=5000)
    >>> overview(client, job_id).status
    'running'
    >>> _ = client.delete(f"ultron:job:{job_id}:master")
    >>> _ = client.delete(f"ultron:job:{job_id}")
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ultron.algorithms.base import Direction
from ultron.master.heartbeat import effective_status
from ultron.master.job_state import JobStatus, JobStore
from ultron.master.results import best_trial
from ultron.redis import keys
from ultron.redis.tenants import caller_tenant, is_no_permission
from ultron.trial_records import TrialResult

__all__ = ["JobOverview", "RunningTrial", "find_job", "known_jobs", "overview", "visible_jobs"]

_ENDED = frozenset(str(s) for s in (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED))


@dataclass(frozen=True)
class RunningTrial:
    """A trial in flight: its configuration and its latest ``ultron.report`` (or none)."""

    trial_id: str
    hyperparameters: dict[str, Any]
    latest: dict[str, Any] | None


@dataclass(frozen=True)
class JobOverview:
    """One job as the terminal shows it.

    ``status`` is a :class:`~ultron.master.job_state.JobStatus` value, ``lost`` derived;
    ``heartbeat`` is when its master last beat (``None``: never), so a lost job is lost since
    then; ``trials`` counts its trial table's rows by trial status; ``parallelism`` is the one
    asked for last (its last run's or ``ultron scale``'s; ``None``: unknown).
    """

    job_id: str
    status: str
    tenant: str
    name: str
    budget: int | None
    done: int
    metric: str
    best_score: float | None
    best_config: dict[str, Any] | None
    updated: float
    started: float  # when its first run started (older records: when it last changed)
    running: list[RunningTrial] = field(default_factory=list)
    end_reason: str | None = None  # why it ended (budget, time budget, target, ...); None: active
    heartbeat: float | None = None
    trials: dict[str, int] = field(default_factory=dict)
    parallelism: int | None = None


def known_jobs(client: Any, *, namespace: str = keys.NAMESPACE) -> list[str]:
    """Every job id the Redis knows (a job hash), any state."""
    prefix = keys.job("", namespace=namespace)
    found = []
    for raw in client.scan_iter(match=f"{prefix}*", count=1000):
        name = raw.decode() if isinstance(raw, bytes) else raw
        job_id = name[len(prefix) :]
        if job_id and ":" not in job_id:  # a job id has no ':'; the rest are its other keys
            found.append(job_id)
    return found


def _tenant_namespaces(client: Any, *, job_id: str = "*") -> list[str]:
    """The namespaces of tenants with a job (``job_id``, or any): an admin's view."""
    prefix = f"{keys.NAMESPACE}:t:"
    found = set()
    for raw in client.scan_iter(match=f"{prefix}*:job:{job_id}", count=1000):
        name = raw.decode() if isinstance(raw, bytes) else raw
        tenant = name[len(prefix) :].split(":", 1)[0]
        found.add(keys.tenant_namespace(tenant))
    return sorted(found)


def visible_jobs(client: Any) -> list[tuple[str, str]]:
    """The jobs the caller may see, as (namespace, job id): a tenant's own, or, for an admin,
    every tenant's (the ``default`` tenant's first)."""
    tenant = caller_tenant(client)
    if tenant is not None:
        namespace = keys.tenant_namespace(tenant)
        return [(namespace, job_id) for job_id in known_jobs(client, namespace=namespace)]
    return [
        (namespace, job_id)
        for namespace in [keys.NAMESPACE, *_tenant_namespaces(client)]
        for job_id in known_jobs(client, namespace=namespace)
    ]


def find_job(client: Any, job_id: str) -> str | None:
    """The namespace of the caller's job ``job_id``, or None when the caller has no such job:
    another tenant's job id is no job (Redis refuses its keys to these credentials). An admin
    finds a job of any tenant (the ``default`` tenant's first, if two tenants share the id)."""
    tenant = caller_tenant(client)
    if tenant is not None:
        candidates = [keys.tenant_namespace(tenant)]
    else:
        candidates = [keys.NAMESPACE, *_tenant_namespaces(client, job_id=job_id)]
    for namespace in candidates:
        try:
            if client.exists(keys.job(job_id, namespace=namespace)):
                return namespace
        except Exception as exc:
            if not is_no_permission(exc):
                raise
    return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


def _parallelism(data: dict[str, str], spec: dict[str, Any]) -> int | None:
    """The parallelism last asked for the job: its hash's ``parallelism``, as its last run or
    ``ultron scale`` wrote it (:mod:`ultron.master.scaling`); for a record from before runs
    wrote it, its stored spec's."""
    asked = data.get("parallelism") or spec.get("parallelism")
    return int(asked) if asked else None


def overview(client: Any, job_id: str, *, namespace: str = keys.NAMESPACE) -> JobOverview:
    """The job's state, trials done, best so far and running trials with their latest report."""
    store = JobStore(client, job_id, namespace=namespace)
    data = {_text(k): _text(v) for k, v in client.hgetall(store.key).items()}
    spec = json.loads(data["spec"]) if data.get("spec") else {}
    objective = spec.get("objective") or {}
    mode = Direction(objective.get("mode", Direction.MINIMIZE))
    rows = client.hgetall(store.trials_key)
    trials = [TrialResult.from_dict(json.loads(v)) for v in rows.values()]
    best = best_trial(trials, mode)
    status = effective_status(
        data.get("status", "unknown"),
        bool(client.exists(keys.job_master(job_id, namespace=namespace))),
    )
    running = []
    for trial_id, info in sorted(store.running().items()):
        latest = client.lindex(keys.job_run(job_id, "reports", trial_id, namespace=namespace), -1)
        running.append(
            RunningTrial(
                trial_id,
                dict(info.get("hyperparameters") or {}),
                json.loads(latest) if latest else None,
            )
        )
    return JobOverview(
        job_id=job_id,
        status=status,
        tenant=spec.get("tenant", "default"),
        name=spec.get("name", ""),
        budget=spec.get("num_iterations"),
        done=len(trials),
        metric=objective.get("metric", "score"),
        best_score=best.score if best else None,
        best_config=best.hyperparameters if best else None,
        updated=float(data.get("updated") or 0.0),
        started=float(data.get("started") or data.get("updated") or 0.0),
        running=running if status == "running" else [],
        # A job run again keeps its last run's reason until it ends anew: not shown meanwhile.
        end_reason=(data.get("end_reason") or None) if status in _ENDED else None,
        heartbeat=float(data["heartbeat"]) if data.get("heartbeat") else None,
        trials=dict(Counter(str(t.status) for t in trials)),
        parallelism=_parallelism(data, spec),
    )
