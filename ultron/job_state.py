"""The job's state in Redis: what outlives the master process.

One hash ``ultron:job:<id>`` holds the spec, the status, the algorithm's state and the trial
table, written atomically after every update, so a restarted master resumes from it. Every key
under ``ultron:job:<id>:`` (running trials, reports, stop flags) is transient: ``finalize``
removes them all.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ultron.trial import TrialResult

__all__ = ["JobState", "JobStatus", "JobStore"]


class JobStatus(StrEnum):
    """Where a job is in its life."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


@dataclass
class JobState:
    """The trial table, the algorithm's state and the learning curves of one job."""

    job_id: str
    status: JobStatus = JobStatus.RUNNING
    trials: list[TrialResult] = field(default_factory=list)
    algorithm: dict[str, Any] | None = None
    curves: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    next_trial: int = 0


class JobStore:
    """Reads and writes :class:`JobState` and the job's transient keys."""

    def __init__(self, client: Any, job_id: str, *, namespace: str = "ultron") -> None:
        self.client = client
        self.job_id = job_id
        self.key = f"{namespace}:job:{job_id}"

    def transient(self, *parts: str) -> str:
        """A key under the job's transient prefix, removed by ``finalize``."""
        return ":".join((self.key, *parts))

    def load(self) -> JobState | None:
        """The saved state, or ``None`` for a new job."""
        raw = self.client.hgetall(self.key)
        if not raw:
            return None
        data = {k.decode(): v.decode() for k, v in raw.items()}
        return JobState(
            job_id=self.job_id,
            status=JobStatus(data.get("status", JobStatus.RUNNING)),
            trials=[TrialResult.from_dict(t) for t in json.loads(data.get("trials", "[]"))],
            algorithm=json.loads(data["algorithm"]) if data.get("algorithm") else None,
            curves=json.loads(data.get("curves", "{}")),
            next_trial=int(data.get("next_trial", 0)),
        )

    def save(self, state: JobState, **extra: str) -> None:
        """Write the whole state in one transaction."""
        mapping = {
            "status": str(state.status),
            "trials": json.dumps([t.to_dict() for t in state.trials]),
            "algorithm": json.dumps(state.algorithm) if state.algorithm is not None else "",
            "curves": json.dumps(state.curves),
            "next_trial": str(state.next_trial),
            "updated": str(time.time()),
            **extra,
        }
        self.client.hset(self.key, mapping=mapping)

    def set_status(self, status: JobStatus) -> None:
        self.client.hset(self.key, "status", str(status))

    def mark_running(self, trial_id: str, info: dict[str, Any]) -> None:
        self.client.hset(self.transient("running"), trial_id, json.dumps(info))

    def mark_done(self, trial_id: str) -> None:
        self.client.hdel(self.transient("running"), trial_id)

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
