"""The job's state in Redis: what outlives the master process.

The job's hash, trial table and curves (:mod:`ultron.services.keys` has the layout) are what a
restarted master reads. Each update writes the new rows only, in one transaction with the
strategy's state. Every key under the job's ``run:`` prefix (running trials, reports, stop
flags) is transient: ``finalize`` removes them all.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ultron.services import keys
from ultron.worker.trial import TrialResult

__all__ = ["JobState", "JobStatus", "JobStore"]


class JobStatus(StrEnum):
    """Where a job is in its life."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"  # stopped by a signal (Ctrl-C, SIGTERM); resumable


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


class JobStore:
    """Reads and writes :class:`JobState` and the job's transient keys."""

    def __init__(self, client: Any, job_id: str, *, namespace: str = keys.NAMESPACE) -> None:
        self.client = client
        self.job_id = job_id
        self.namespace = namespace
        self.key = keys.job(job_id, namespace=namespace)
        self.trials_key = keys.job_trials(job_id, namespace=namespace)
        self.curves_key = keys.job_curves(job_id, namespace=namespace)

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
        return JobState(
            job_id=self.job_id,
            status=JobStatus(data.get("status", JobStatus.RUNNING)),
            trials=[TrialResult.from_dict(rows[k]) for k in sorted(rows)],
            algorithm=json.loads(data["algorithm"]) if data.get("algorithm") else None,
            stopper=json.loads(data["stopper"]) if data.get("stopper") else None,
            curves={k.decode(): json.loads(v) for k, v in curves.items()},
            next_trial=int(data.get("next_trial", 0)),
        )

    def save(self, state: JobState, new: Sequence[TrialResult] = ()) -> None:
        """Write the scalar state and the ``new`` rows (with their curves) in one transaction."""
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(
            self.key,
            mapping={
                "status": str(state.status),
                "algorithm": json.dumps(state.algorithm) if state.algorithm is not None else "",
                "stopper": json.dumps(state.stopper) if state.stopper is not None else "",
                "next_trial": str(state.next_trial),
                "updated": str(time.time()),
            },
        )
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

    def set_status(self, status: JobStatus) -> None:
        self.client.hset(self.key, "status", str(status))

    def mark_running(self, trials: dict[str, dict[str, Any]]) -> None:
        """Record trials as running: trial id -> what is known of the attempt."""
        mapping = {trial_id: json.dumps(info) for trial_id, info in trials.items()}
        self.client.hset(self.transient("running"), mapping=mapping)

    def mark_done(self, trial_id: str) -> None:
        self.client.hdel(self.transient("running"), trial_id)

    def clear_running(self) -> None:
        self.client.delete(self.transient("running"))

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
