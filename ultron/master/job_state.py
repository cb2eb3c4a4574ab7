"""The job's state in Redis: what outlives the master process.

The job's hash, trial table and curves (:mod:`ultron.redis.keys` has the layout) are what a
restarted master reads. Each update writes the new rows only, in one transaction with what
the strategy's state needs: either a snapshot (``state_dict()``, which grows with the trials
for some strategies) or, between snapshots, the calls made to the strategy since the last one,
appended to the job's strategy log (``JobState.strategy_log``); a restarted master loads the
snapshot and replays the log, which gives the very same state. Every key under the job's
``run:`` prefix (running trials, reports, stop flags) is transient: ``finalize`` removes them all.

Every write is idempotent: the Redis client retries a transaction whose reply was lost (a
failover, :mod:`ultron.redis.client`), which may have been applied already, so a second run of
it must leave what the first left. Hashes are set and fields removed; the strategy log is cut
back to the length it had before the append (``LTRIM``) and then appended to.

The first run of a job id also stores the spec it ran with and its code base's content hash
(:meth:`JobStore.save_spec`); a later run with the same id is checked against them
(:func:`ultron.master.resume.check_resume`) before it may add to the job's trials.

Example:
    >>> import redis, uuid
    >>> from ultron.spec.job import JobSpec
    >>> spec = JobSpec.model_validate(
    ...     {"code": ".", "model": "pkg.train:Model", "search_space": {"x": [1, 2]}},
    ...     context={"check_paths": False},
    ... )
    >>> store = JobStore(redis.Redis.from_url(redis_url), f"doc-{uuid.uuid4().hex}")
    >>> store.save_spec(spec, code_hash="c0de"), store.save_spec(spec, code_hash="other")
    (True, False)
    >>> stored = store.stored_spec()
    >>> stored.code_hash, stored.spec["model"]
    ('c0de', 'pkg.train:Model')
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from ultron.paths import storage_location
from ultron.redis import keys
from ultron.secrets import mask_url, redacted_spec
from ultron.trial_records import TrialResult

if TYPE_CHECKING:
    from ultron.spec.job import JobSpec

__all__ = [
    "ACTIVE",
    "JobState",
    "JobStatus",
    "JobStore",
    "StoredSpec",
    "counts_text",
    "trial_counts",
]


class JobStatus(StrEnum):
    """Where a job is in its life: exactly one of these at a time.

    ``queued``, ``preparing`` and ``running`` are the active states its master writes as it
    goes; ``lost`` is never written: a reader shows it for an active job whose master's
    heartbeat stopped (:func:`ultron.master.heartbeat.effective_status`). The last three are
    how a job ended; every state but ``completed`` resumes with ``ultron resume JOB``.
    """

    QUEUED = "queued"  # waiting for resource units from the limiter
    PREPARING = "preparing"  # containerize: the trial environment is built
    RUNNING = "running"  # trials are dispatched
    LOST = "lost"  # active, but its master's heartbeat stopped (derived, never stored)
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"  # stopped by a signal or ultron cancel; resumable


ACTIVE = frozenset({str(JobStatus.QUEUED), str(JobStatus.PREPARING), str(JobStatus.RUNNING)})
"""The states of a job whose master is (or should be) at work."""


def trial_counts(trials: Sequence[TrialResult]) -> str:
    """The trials by status, as every view of a job shows them: ``"3 completed, 1 failed"``."""
    counts: dict[str, int] = {}
    for trial in trials:
        counts[str(trial.status)] = counts.get(str(trial.status), 0) + 1
    return counts_text(counts)


def counts_text(counts: Mapping[str, int]) -> str:
    """Trial counts by status as text: ``{"failed": 1, "completed": 3}`` -> ``"3 completed,
    1 failed"`` (statuses in name order)."""
    return ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))


@dataclass
class JobState:
    """The trial table, the algorithm's state and the learning curves of one job."""

    job_id: str
    status: JobStatus = JobStatus.RUNNING
    trials: list[TrialResult] = field(default_factory=list)
    algorithm: dict[str, Any] | None = None
    stopper: dict[str, Any] | None = None
    curves: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    next_trial: int = 0
    # The strategy's calls since ``algorithm`` was taken, oldest first: ``["sample", n]`` and
    # ``["update", candidates, scores]``; replayed on ``algorithm`` they give the current state.
    strategy_log: list[list[Any]] = field(default_factory=list)
    # Seconds the search ran over all the job's runs (a time budget counts them), and why the
    # job ended (``ultron.master.goals.JobEnd`` as text; ``None`` while it runs).
    search_seconds: float = 0.0
    end_reason: str | None = None
    # What a warm start told the strategy (``ultron.master.warm_start``); ``None``: nothing yet.
    warm_start: dict[str, Any] | None = None


@dataclass(frozen=True)
class StoredSpec:
    """What the first run of a job id stored about itself.

    Attributes:
        spec: the job spec it ran with, as ``JobSpec.model_dump(mode="json")`` gave it.
        code_hash: the content hash of its code base (``None`` if it stored none).
        storage_at: where its ``storage`` was (:func:`ultron.paths.storage_location`: a
            relative folder resolved in the folder it ran in); ``None`` if it stored none.
    """

    spec: dict[str, Any]
    code_hash: str | None
    storage_at: str | None = None


class JobStore:
    """Reads and writes :class:`JobState`, the job's first spec and its transient keys."""

    def __init__(self, client: Any, job_id: str, *, namespace: str = keys.NAMESPACE) -> None:
        self.client = client
        self.job_id = job_id
        self.namespace = namespace
        self.key = keys.job(job_id, namespace=namespace)
        self.trials_key = keys.job_trials(job_id, namespace=namespace)
        self.curves_key = keys.job_curves(job_id, namespace=namespace)
        # Beside the job's hash, like the trial table: it outlives the master as they do.
        self.log_key = f"{self.key}:strategy-log"
        # Changes to the running record that wait for the next write (flush() or save()), so a
        # trial's hand-off costs no Redis round trip of its own: trial id -> info, and ids.
        self._running_soon: dict[str, str] = {}
        self._done_soon: set[str] = set()

    def transient(self, *parts: str) -> str:
        """A key under the job's transient prefix, removed by ``finalize``."""
        return keys.job_run(self.job_id, *parts, namespace=self.namespace)

    def load(self) -> JobState | None:
        """The saved state, or ``None`` for a new job."""
        raw = self.client.hgetall(self.key)
        if not raw:
            return None
        data = {k.decode(): v.decode() for k, v in raw.items()}
        rows = {k.decode(): json.loads(v) for k, v in self.client.hgetall(self.trials_key).items()}
        curves = self.client.hgetall(self.curves_key)
        log = [json.loads(entry) for entry in self.client.lrange(self.log_key, 0, -1)]
        return JobState(
            job_id=self.job_id,
            status=JobStatus(data.get("status", JobStatus.RUNNING)),
            trials=[TrialResult.from_dict(rows[k]) for k in sorted(rows)],
            algorithm=json.loads(data["algorithm"]) if data.get("algorithm") else None,
            stopper=json.loads(data["stopper"]) if data.get("stopper") else None,
            curves={k.decode(): json.loads(v) for k, v in curves.items()},
            next_trial=int(data.get("next_trial", 0)),
            strategy_log=log,
            search_seconds=float(data.get("search_seconds") or 0.0),
            end_reason=data.get("end_reason") or None,
            warm_start=json.loads(data["warm_start"]) if data.get("warm_start") else None,
        )

    def save(
        self,
        state: JobState,
        new: Sequence[TrialResult] = (),
        *,
        logged: Sequence[list[Any]] | None = None,
        first: Callable[[Any], None] | None = None,
    ) -> None:
        """Write the scalar state and the ``new`` rows (with their curves) in one transaction.

        Args:
            state: the job's state.
            new: the trial table's rows added since the last save.
            logged: ``None`` writes ``state.algorithm`` as the strategy's snapshot and empties
                the strategy log; otherwise these calls (the tail of ``state.strategy_log``)
                are appended to the log and the stored snapshot stays as it is.
            first: queues writes of other keys of this Redis in the transaction, before the
                job's own (the score cache's new entries: one round trip for both).
        """
        pipe = self.client.pipeline(transaction=True)
        if first is not None:
            first(pipe)
        scalars = {
            "status": str(state.status),
            "stopper": json.dumps(state.stopper) if state.stopper is not None else "",
            "next_trial": str(state.next_trial),
            "updated": str(time.time()),
            "search_seconds": str(state.search_seconds),
            "end_reason": state.end_reason or "",
        }
        if state.warm_start is not None:
            scalars["warm_start"] = json.dumps(state.warm_start)
        if logged is None:
            algorithm = state.algorithm
            scalars["algorithm"] = json.dumps(algorithm) if algorithm is not None else ""
            pipe.delete(self.log_key)
        elif logged:
            # Idempotent: the log is cut back to its length before these calls, then appended.
            before = len(state.strategy_log) - len(logged)
            if before > 0:
                pipe.ltrim(self.log_key, 0, before - 1)
            else:
                pipe.delete(self.log_key)
            pipe.rpush(self.log_key, *(json.dumps(call) for call in logged))
        pipe.hset(self.key, mapping=scalars)
        self._flush_into(pipe)
        if new:
            pipe.hset(self.trials_key, mapping={t.trial_id: json.dumps(t.to_dict()) for t in new})
            curves = {
                t.trial_id: json.dumps(state.curves[t.trial_id])
                for t in new
                if t.trial_id in state.curves
            }
            if curves:
                pipe.hset(self.curves_key, mapping=curves)
        pipe.execute()
        self._flushed()

    def save_spec(self, spec: JobSpec, *, code_hash: str) -> bool:
        """Store the job's spec and code hash unless a run of this job id stored them before.

        Each field is set only where it is absent (HSETNX, both in one transaction): the first
        run of a job id wins, and later runs never overwrite what it ran with.

        Returns:
            Whether they were stored now (``False``: an earlier run had stored them, or this
            one, in a transaction retried after its reply was lost: the same spec either way).
        """
        pipe = self.client.pipeline(transaction=True)
        # Passwords masked: resume.MAY_CHANGE has redis_url, the one field that holds one.
        pipe.hsetnx(self.key, "spec", json.dumps(redacted_spec(spec), sort_keys=True))
        pipe.hsetnx(self.key, "code_hash", code_hash)
        pipe.hsetnx(self.key, "started", str(time.time()))  # `ultron jobs` lists by it
        pipe.hsetnx(self.key, "storage_at", storage_location(spec.storage))
        stored, *_ = pipe.execute()
        return bool(stored)

    def stored_spec(self) -> StoredSpec | None:
        """The spec and code hash the job's first run stored, or ``None`` if none did."""
        spec, code_hash, at = self.client.hmget(self.key, ["spec", "code_hash", "storage_at"])
        if not spec:
            return None
        code_hash, at = (v.decode() if isinstance(v, bytes) else v for v in (code_hash, at))
        return StoredSpec(json.loads(spec), code_hash or None, at or None)

    def trial_count(self) -> int:
        """How many trials the job's trial table holds."""
        return int(self.client.hlen(self.trials_key))

    def set_status(self, status: JobStatus, *, end_reason: str | None = None) -> None:
        """Record the job's status (and, when given, why it ended)."""
        fields = {"status": str(status)}
        if end_reason is not None:
            fields["end_reason"] = end_reason
        self.client.hset(self.key, mapping=fields)

    def set_results_url(self, url: str) -> None:
        """Record where the job's results and trial logs go (its storage as resolved where the
        job runs, password masked): ``ultron logs`` reads them from there."""
        self.client.hset(self.key, "results_url", mask_url(url))

    def mark_running(self, trials: dict[str, dict[str, Any]], *, defer: bool = False) -> None:
        """Record trials as running: trial id -> what is known of the attempt.

        With ``defer`` the record is written by the next :meth:`flush` or :meth:`save`.
        """
        for trial_id, info in trials.items():
            self._done_soon.discard(trial_id)
            self._running_soon[trial_id] = json.dumps(info)
        if not defer:
            self.flush()

    def mark_done(self, trial_id: str, *, defer: bool = False) -> None:
        """Remove a trial from the running record (with ``defer``: at the next write)."""
        self._running_soon.pop(trial_id, None)
        self._done_soon.add(trial_id)
        if not defer:
            self.flush()

    def flush(self) -> None:
        """Write the deferred changes to the running record now (one round trip).

        The transaction sets and removes fields only, so the client may send it again after a
        lost reply; the changes are forgotten once it succeeded, and kept for the next write if
        it failed.
        """
        if self._running_soon or self._done_soon:
            pipe = self.client.pipeline(transaction=True)
            self._flush_into(pipe)
            pipe.execute()
            self._flushed()

    def _flush_into(self, pipe: Any) -> None:
        key = self.transient("running")
        if self._done_soon:
            pipe.hdel(key, *self._done_soon)
        if self._running_soon:
            pipe.hset(key, mapping=self._running_soon)

    def _flushed(self) -> None:
        self._running_soon, self._done_soon = {}, set()

    def clear_running(self) -> None:
        self.client.delete(self.transient("running"))

    def clear_job_stops(self, trial_ids: Sequence[str]) -> list[str]:
        """Remove the stop flags that a goal or a cancel of an earlier master left on
        ``trial_ids`` (it died before ``finalize`` removed them): those trials run again, and a
        worker would otherwise never start them (``ultron.worker.runner``). A stopper's flags
        stay. Returns the trials whose flag was removed."""
        if not trial_ids:
            return []
        flags = [self.transient("stop", t) for t in trial_ids]
        stale = [
            (trial_id, flag)
            for trial_id, flag, raw in zip(trial_ids, flags, self.client.mget(flags), strict=True)
            if raw is not None and json.loads(raw).get("job")
        ]
        if stale:
            self.client.delete(*(flag for _, flag in stale))
        return [trial_id for trial_id, _ in stale]

    def running(self) -> dict[str, dict[str, Any]]:
        raw = self.client.hgetall(self.transient("running"))
        return {k.decode(): json.loads(v) for k, v in raw.items()}

    def transient_keys(self) -> list[str]:
        return [k.decode() for k in self.client.scan_iter(match=self.transient("*"), count=500)]

    def clear_transient(self) -> int:
        """Remove every transient key of the job; returns how many there were."""
        keys = self.transient_keys()
        if keys:
            self.client.delete(*keys)
        return len(keys)
