"""What a trial is: the request a worker gets, the result it returns, and the table row.

These travel between the master, Dask workers and trial processes, so they are small, frozen
and JSON-compatible (``to_dict``/``from_dict``).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import Any

from ultron.algorithms.space import canonical

__all__ = ["TrialRequest", "TrialResult", "TrialStatus", "stored_answer", "trial_seed"]


class TrialStatus(StrEnum):
    """How a trial ended.

    ``FAILED`` is the user's error (an exception in ``score``, a NaN or infinite score) and is
    not retried; ``CRASHED`` is the infrastructure's (the trial process or its worker died) and
    is retried; ``TIMEOUT`` means it ran past the spec's ``trial_timeout``; ``CACHED`` means the
    score came from the score cache without training; ``STOPPED`` means early stopping ended it
    (its score is the value it had then); ``OUT_OF_MEMORY`` means the trial needed more memory
    than the spec's ``resources.memory`` allows, or more GPU memory than its GPU (or its share
    of one, with a fractional ``resources.gpu``) has (the user's to fix, so not retried).
    """

    COMPLETED = "completed"
    CACHED = "cached"
    STOPPED = "stopped"
    FAILED = "failed"
    CRASHED = "crashed"
    TIMEOUT = "timeout"
    OUT_OF_MEMORY = "out_of_memory"

    @property
    def ok(self) -> bool:
        """Whether the trial has a usable score."""
        return self in (TrialStatus.COMPLETED, TrialStatus.CACHED, TrialStatus.STOPPED)


def trial_seed(job_seed: int, config: dict[str, Any]) -> int:
    """A seed derived from the job seed and the configuration, the same on every run."""
    digest = hashlib.sha256(f"{job_seed}|{canonical(config)}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def _copied(value: Any) -> Any:
    """``value`` with its dicts, lists and tuples copied (as ``dataclasses.asdict`` copies a
    record's fields, a tenth of its time: a record is copied several times a trial, on the way
    between a round's last result and the next round's start)."""
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copied(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_copied(v) for v in value)
    return value


class _Serial:
    def to_dict(self) -> dict[str, Any]:
        """The record's fields, its containers copied (a change to them leaves it as it is)."""
        return {f: _copied(getattr(self, f)) for f in _names(type(self))}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        """The record of ``data``'s fields (others are passed over), its containers copied."""
        names = _names(cls)
        return cls(**{k: _copied(v) for k, v in data.items() if k in names})


_NAMES: dict[type, tuple[str, ...]] = {}


def _names(cls: type) -> tuple[str, ...]:
    """The field names of the record class ``cls`` (read once)."""
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


@dataclass(frozen=True)
class TrialRequest(_Serial):
    """Everything a worker needs to run one attempt of one trial."""

    job_id: str
    trial_id: str
    hyperparameters: dict[str, Any]
    model: str
    python: str
    metric: str
    seed: int
    checkpoint_path: str
    log_path: str
    redis_url: str
    # The job's key namespace (its tenant's, ultron.redis.keys.tenant_namespace).
    namespace: str = "ultron"
    resume: bool = False
    attempt: int = 1
    timeout: float | None = None
    stream_reports: bool = False
    grace_period: float = 30.0
    data: dict[str, Any] | None = None
    checkpoint_url: str | None = None
    # The code base's import folders, put first on the trial process's path (see
    # ultron.usercode): the user's modules win over any of the same name.
    code_paths: tuple[str, ...] = ()
    # The spec's resources.memory in bytes: the operating system holds the trial process to it.
    memory_limit: int | None = None
    # The spec's deterministic: PyTorch and TensorFlow are made deterministic for the trial.
    deterministic: bool = False
    # Where the worker keeps the trial's output, masked, while it runs (ultron.worker.trial_log):
    # <storage>/<job>/logs/<trial>.log. None: only on the worker's disk (log_path).
    log_url: str | None = None
    # A fractional resources.gpu: the share of its GPU's memory the trial process may hold
    # (ultron.worker.gpu_memory); None for whole GPUs or none.
    gpu_memory_fraction: float | None = None
    # The spec's resources.cpu in whole cores: the trial process's OpenMP, MKL and OpenBLAS
    # threads (ultron.worker.threads).
    threads: int = 1
    # Population-based training's exploit: before this attempt the worker replaces the trial's
    # checkpoints with the newest one of trial ``exploit_from`` (its folder on this machine,
    # else its committed checkpoints in the store).
    exploit_from: str | None = None
    exploit_checkpoint_path: str | None = None
    exploit_checkpoint_url: str | None = None
    # Several objectives or constraints: the metrics score() must return, each a finite number.
    metrics: tuple[str, ...] = ()

    def exploiting(self, source: str) -> TrialRequest:
        """This attempt, restarting from trial ``source``'s newest checkpoint (PBT's exploit).

        The source's checkpoint folders lie beside this trial's: the dispatcher names them
        by trial id under the job's scratch folder and its storage.

        Example:
            >>> request = TrialRequest("j", "0002", {}, "m:M", "python", "loss", 0,
            ...                        "/s/checkpoints/0002", "/s/logs/t.log", "redis://",
            ...                        checkpoint_url="file:///r/j/checkpoints/0002")
            >>> moved = request.exploiting("0001")
            >>> moved.exploit_checkpoint_path, moved.exploit_checkpoint_url
            ('/s/checkpoints/0001', 'file:///r/j/checkpoints/0001')
        """
        path = os.path.join(os.path.dirname(self.checkpoint_path), source)
        url = None
        if self.checkpoint_url is not None:
            url = f"{self.checkpoint_url.rsplit('/', 1)[0]}/{source}"
        return replace(
            self,
            resume=True,
            exploit_from=source,
            exploit_checkpoint_path=path,
            exploit_checkpoint_url=url,
        )


@dataclass(frozen=True)
class TrialResult(_Serial):
    """The outcome of one trial, as it appears in the trial table."""

    trial_id: str
    hyperparameters: dict[str, Any]
    status: TrialStatus
    score: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    traceback: str | None = None
    attempts: int = 1
    duration: float = 0.0
    reports: int = 0
    worker: str | None = None
    # The trial's log: in the job's storage where it is kept there, else on the worker's disk.
    log_path: str | None = None
    # A trial that did not complete: its last lines of output (masked), newest last.
    log_tail: list[str] | None = None
    # What the table records differently from what score returned (a NaN extra as null).
    notes: list[str] = field(default_factory=list)
    # Population-based training: each exploit step (the trial it copied, at which step, its
    # configuration before and after), oldest first; empty for every other trial.
    lineage: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialResult:
        result: TrialResult = super().from_dict(data)
        return replace(result, status=TrialStatus(result.status))


def stored_answer(
    raw: str | bytes | None, hyperparameters: dict[str, Any]
) -> dict[str, Any] | None:
    """An attempt's answer as ``run_trial`` stored it in Redis, if it is one of a trial of
    ``hyperparameters``; ``None`` otherwise (nothing stored, or a stale answer of another
    configuration under the same trial id and attempt).

    The answer's ``hyperparameters`` are the request's own objects, not their JSON copy.

    Example:
        >>> stored = '{"status": "completed", "hyperparameters": {"k": [1, 2]}}'
        >>> stored_answer(stored, {"k": (1, 2)})
        {'status': 'completed', 'hyperparameters': {'k': (1, 2)}}
        >>> stored_answer(stored, {"k": [3]}) is None
        True
    """
    if raw is None:
        return None
    answer: dict[str, Any] = json.loads(raw)
    if canonical(answer.get("hyperparameters") or {}) != canonical(hyperparameters):
        return None
    answer["hyperparameters"] = hyperparameters
    return answer
