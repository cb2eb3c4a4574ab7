"""The score cache (paper V-E): a configuration's score, answered only for the same computation.

What determines a trial's score is the code base, the data (for a job with a ``data``
section: the same data batched the same way), the model class, the trial's seed (derived
from the job seed and the configuration) and the configuration; the objective metric picks
one of the numbers the trial returned. The cache keys on all of it: one Redis hash per code
base, data, model class and job seed (:func:`ultron.redis.keys.score_cache`), a field per
configuration. The key holds the job's tenant too: a tenant's job never reads another tenant's
scores, not even of the same computation (a tenant may not learn what another one trained).
An entry keeps every metric the trial returned, and answers a job only when it holds that
job's objective metric, with that metric's value as the score: a model that returns a bare
float stores only the metric it was run for, so a job with another metric trains it again. A
job with several objectives or constraints asks for all their metrics (``also``): an entry
lacking any of them answers nothing.

Only completed trials are written; failures are not. A job with ``cache: false`` still
writes (its scores are as good as any), but is answered only by entries of its own trials:
a master that restarts takes a trial that finished before the restart as it was.

Example:
    >>> import redis
    >>> client = redis.Redis.from_url(redis_url)
    >>> def cache(metric, model="pkg.train:Model"):
    ...     return ScoreCache(client, code_hash="c0de", model=model, seed=0, metric=metric,
    ...                       tenant="team-a", namespace="doctest-score-cache")
    >>> cache("loss").put({"lr": 0.1}, {"score": 0.5, "metrics": {"loss": 0.5, "acc": 0.75}})
    >>> cache("acc").get_many([{"lr": 0.1}], job_id="j", trial_ids=["0000"])[0]["score"]
    0.75
    >>> cache("f1").get_many([{"lr": 0.1}], job_id="j", trial_ids=["0000"])
    [None]
    >>> several = ScoreCache(client, code_hash="c0de", model="pkg.train:Model", seed=0,
    ...     metric="loss", also=("loss", "latency_ms"), tenant="team-a",
    ...     namespace="doctest-score-cache")
    >>> several.get_many([{"lr": 0.1}], job_id="j", trial_ids=["0000"])
    [None]
    >>> cache("loss", model="pkg.train:Other").get_many([{"lr": 0.1}], job_id="j", trial_ids=["0"])
    [None]
    >>> clear_cache(client, namespace="doctest-score-cache")
    1
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ultron.algorithms.space import Config, SearchSpace, canonical
from ultron.redis import keys
from ultron.spec.job import JobSpec
from ultron.spec.objectives import asked_metrics

__all__ = [
    "ScoreCache",
    "answer",
    "cache_field",
    "clear_cache",
    "clear_callers_caches",
    "job_score_cache",
    "stored_entry",
]

_DELETE_BATCH = 500


def answer(
    entry: Mapping[str, Any] | None,
    *,
    metric: str,
    enabled: bool,
    job_id: str,
    trial_id: str,
    also: Sequence[str] = (),
) -> dict[str, Any] | None:
    """What a cache entry answers for trial ``trial_id`` of job ``job_id``, or ``None``.

    Args:
        entry: what :meth:`ScoreCache.put` stored (``score``, ``metrics``, ``job_id``,
            ``trial_id``, ...), or ``None``.
        metric: the job's objective metric; an entry whose metrics lack it answers nothing.
        enabled: the job's ``cache`` setting; when off, only an entry of this very trial
            answers (it finished before the master restarted).
        job_id: the job that asks.
        trial_id: the trial being launched.
        also: more metrics the job needs (several objectives, constraints); an entry whose
            metrics lack any of them answers nothing.

    Returns:
        The entry with ``score`` set to ``metrics[metric]``, or ``None``.

    Example:
        >>> entry = {"score": 1.0, "metrics": {"a": 1.0, "b": 2.0}, "job_id": "j", "trial_id": "0"}
        >>> answer(entry, metric="b", enabled=True, job_id="k", trial_id="0")["score"]
        2.0
        >>> answer(entry, metric="c", enabled=True, job_id="j", trial_id="0") is None
        True
        >>> answer(entry, metric="a", enabled=False, job_id="k", trial_id="0") is None
        True
    """
    if entry is None:
        return None
    metrics = entry.get("metrics") or {}
    if metric not in metrics or any(name not in metrics for name in also):
        return None
    same_trial = (entry.get("job_id"), entry.get("trial_id")) == (job_id, trial_id)
    if not enabled and not same_trial:
        return None
    return {**entry, "score": float(metrics[metric])}


def job_score_cache(
    spec: JobSpec, client: Any, *, code_hash: str, namespace: str, data_hash: str | None
) -> ScoreCache:
    """The score cache of ``spec``'s job: its code base's hash, its data's fingerprint (a job
    with a data section) and the tenant's ``namespace`` with the spec's model, seed, metrics and
    settings."""
    return ScoreCache(
        client,
        code_hash=code_hash,
        model=spec.model,
        seed=spec.seed,
        metric=spec.objective.metric,
        also=asked_metrics(spec),
        tenant=spec.tenant,
        namespace=namespace,
        data_hash=data_hash,
        enabled=spec.cache,
        deterministic=spec.deterministic,
        space=spec.space,
    )


def cache_field(config: Config, space: SearchSpace | None = None) -> str:
    """The key of ``config`` in a cache: its canonical text, its inactive parameters (those
    ``space`` says are inactive) left out, so they never make two keys of one computation.

    Example:
        >>> from ultron.algorithms.space import Choice, Conditional, SearchSpace, Uniform
        >>> space = SearchSpace({"opt": Choice(("adam", "sgd")),
        ...                      "momentum": Conditional(Uniform(0, 1), when={"opt": "sgd"})})
        >>> cache_field({"opt": "adam", "momentum": 0.9}, space)
        '{"opt":"adam"}'
    """
    return canonical(space.project(config) if space is not None else config)


def stored_entry(entry: Mapping[str, Any], *, metric: str) -> dict[str, Any]:
    """``entry`` as a cache keeps it: its metrics hold ``metric``, the score's name.

    A trial's score is the job's objective metric; a model that returned a bare float has only
    that, and an entry stored without it could answer no job.

    Example:
        >>> stored_entry({"score": 0.5, "metrics": {}}, metric="loss")
        {'score': 0.5, 'metrics': {'loss': 0.5}}
    """
    metrics = dict(entry.get("metrics") or {})
    if metric not in metrics and entry.get("score") is not None:
        metrics[metric] = entry["score"]
    return {**entry, "metrics": metrics}


class ScoreCache:
    """Scores of configurations: one Redis hash per code, data, model, job seed and tenant.

    Order of calls: the master asks :meth:`get_many` for the candidates it is about to launch
    and :meth:`put` s each completed trial; nothing else writes these keys except
    :func:`clear_cache`.

    Args:
        client: a ``redis.Redis`` client.
        code_hash: the content hash of the code base.
        model: the model class, ``module:Class`` (``JobSpec.model``).
        seed: the job seed (``JobSpec.seed``); each trial's seed derives from it and the
            configuration (:func:`ultron.trial_records.trial_seed`).
        metric: the job's objective metric (``JobSpec.objective.metric``).
        also: the metrics of several objectives and constraints
            (:func:`ultron.spec.objectives.asked_metrics`): an entry answers only when it holds
            every one.
        tenant: the job's tenant (``JobSpec.tenant``): only its own entries answer it.
        data_hash: the data service's fingerprint (``DataServiceHandle.fingerprint()``), or
            ``None`` for a job without streamed data.
        enabled: ``JobSpec.cache``; when ``False`` only the job's own trials are answered.
        deterministic: ``JobSpec.deterministic``: scores of trials run with the frameworks'
            deterministic settings answer only jobs that ask for them, and only those.
        space: the job's search space (``JobSpec.space``): a configuration is keyed by its
            active parameters only, so an inactive one (momentum under Adam) never splits
            the same computation in two. ``None``: keyed as given.
        namespace: key prefix.
    """

    def __init__(
        self,
        client: Any,
        *,
        code_hash: str,
        model: str,
        seed: int,
        metric: str,
        tenant: str,
        also: Sequence[str] = (),
        data_hash: str | None = None,
        enabled: bool = True,
        deterministic: bool = False,
        space: SearchSpace | None = None,
        namespace: str = keys.NAMESPACE,
    ) -> None:
        self.client = client
        self.space = space
        self.metric = metric
        self.also = tuple(also)
        self.enabled = enabled
        self.key = keys.score_cache(
            code_hash,
            data_hash,
            model=model,
            seed=seed,
            tenant=tenant,
            deterministic=deterministic,
            namespace=namespace,
        )

    def get_many(
        self, configs: Sequence[Config], *, job_id: str, trial_ids: Sequence[str]
    ) -> list[dict[str, Any] | None]:
        """The answers for ``configs`` (see :func:`answer`), ``None`` where none, in one round trip.

        Args:
            configs: the configurations about to be launched.
            job_id: the job that asks.
            trial_ids: the trial id each configuration is launched as, in the same order.
        """
        if len(trial_ids) != len(configs):
            raise ValueError(
                f"get_many got {len(configs)} configurations and {len(trial_ids)} trial ids; "
                "it needs one trial id per configuration"
            )
        if not configs:
            return []
        raw = self.client.hmget(self.key, [self.field(c) for c in configs])
        return [
            answer(
                json.loads(value) if value is not None else None,
                metric=self.metric,
                enabled=self.enabled,
                job_id=job_id,
                trial_id=trial_id,
                also=self.also,
            )
            for value, trial_id in zip(raw, trial_ids, strict=True)
        ]

    def put(self, config: Config, entry: dict[str, Any], *, pipe: Any = None) -> None:
        """Cache ``entry`` (score, metrics, where it came from) for ``config``; with ``pipe``
        (a pipeline of this cache's Redis) queued in it instead of written now."""
        entry = stored_entry(entry, metric=self.metric)
        writer = self.client if pipe is None else pipe
        writer.hset(self.key, self.field(config), json.dumps(entry))

    def field(self, config: Config) -> str:
        """The hash field of ``config`` (see :func:`cache_field`)."""
        return cache_field(config, self.space)

    def __len__(self) -> int:
        return int(self.client.hlen(self.key))


def clear_cache(client: Any, *, namespace: str = keys.NAMESPACE) -> int:
    """Delete every score cache key under ``namespace``, of any version; returns how many.

    Keys are found with SCAN (the server is never blocked by a KEYS) and deleted in batches.
    A job running meanwhile may write new entries; they are its own, and stay.

    Args:
        client: a ``redis.Redis`` client.
        namespace: key prefix (``ultron`` unless a caller chose another).
    """
    return _delete(
        client, client.scan_iter(match=keys.score_cache_pattern(namespace=namespace), count=1000)
    )


def clear_callers_caches(client: Any) -> int:
    """Delete the score caches the caller's credentials own; returns how many keys went.

    A tenant's credentials (:func:`ultron.redis.tenants.caller_tenant`) clear that tenant's
    cache only: another tenant's keys are not theirs to reach. An admin's clear the default
    namespace's cache and every tenant's, also of a tenant removed since (whose keys stay).
    """
    from ultron.redis.tenants import caller_tenant

    tenant = caller_tenant(client)
    if tenant is not None:
        return clear_cache(client, namespace=keys.tenant_namespace(tenant))
    # ``ultron:t:<tenant>:cache:...``: a tenant name holds no ``:``, so the fourth part says
    # whether a key of a tenant's namespace is its score cache (and not, say, a job's key).
    tenants = keys.tenant_namespace("*")
    found = client.scan_iter(match=f"{tenants}:cache:*", count=1000)
    ours = (
        k for k in found if (k.decode() if isinstance(k, bytes) else k).split(":")[3] == "cache"
    )
    return clear_cache(client) + _delete(client, ours)


def _delete(client: Any, found: Any) -> int:
    """Delete the keys ``found`` yields, in batches; returns how many were deleted."""
    deleted = 0
    batch: list[Any] = []
    for key in found:
        batch.append(key)
        if len(batch) >= _DELETE_BATCH:
            deleted += int(client.delete(*batch))
            batch.clear()
    if batch:
        deleted += int(client.delete(*batch))
    return deleted
