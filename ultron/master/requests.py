"""What a trial attempt's request holds: the job's part, made once, and the trial's own.

Every attempt of a job asks for the same model, interpreter, code folders, Redis, limits and
data service; only its trial id, configuration (and the seed drawn from it), attempt and the
places of its checkpoints and log differ. :class:`TrialRequests` keeps the job's part and adds
the trial's: the master makes a round's requests between that round's sampling and its start.
"""

from __future__ import annotations

import os
from typing import Any

from ultron.containerize.environment import TrialEnvironment
from ultron.containerize.image import worker_paths
from ultron.paths import job_results_url, trial_log_url
from ultron.spec.job import JobSpec
from ultron.spec.objectives import asked_metrics
from ultron.trial_records import TrialRequest, trial_seed

__all__ = ["TrialRequests"]


def _memory_limit(memory: str | None) -> int | None:
    """``resources.memory`` (a Kubernetes quantity) in bytes, as the Dask workers get it."""
    if memory is None:
        return None
    from dask.utils import parse_bytes  # understands Ki, Mi, Gi, Ti, k, M, G, T as they are

    return parse_bytes(memory)


class TrialRequests:
    """The requests of one job's trial attempts.

    Args:
        spec: the job spec.
        env: the trial environment from ``containerize``.
        job_id: the job.
        namespace: the job's key namespace (its tenant's).
        redis_url: the Redis every trial reports to (through its worker).
        scratch: the workers' local folder for checkpoints and logs.
        data: how trials reach the job's data service (``DataServiceHandle.trial_config()``).
    """

    def __init__(
        self,
        spec: JobSpec,
        env: TrialEnvironment,
        *,
        job_id: str,
        namespace: str,
        redis_url: str,
        scratch: str,
        data: dict[str, Any] | None = None,
    ) -> None:
        # As the workers see them: inside the job's image on kubernetes, else the local ones.
        python, code_paths = worker_paths(env)
        stopping = spec.early_stopping
        self._job: dict[str, Any] = {
            "job_id": job_id,
            "model": spec.model,
            "python": python,
            "code_paths": code_paths,
            "metric": spec.objective.metric,
            "metrics": asked_metrics(spec),
            "redis_url": redis_url,
            "namespace": namespace,
            "timeout": spec.trial_timeout,
            "stream_reports": stopping is not None,
            "data": data,
            "grace_period": stopping.grace_period if stopping else 30.0,
            "memory_limit": _memory_limit(spec.resources.memory),
            "deterministic": spec.deterministic,
            "gpu_memory_fraction": spec.resources.gpu_memory_fraction,
            "threads": spec.resources.threads,
        }
        self._seed = spec.seed
        self._scratch = scratch
        self.results_url = job_results_url(spec.storage, job_id)

    def make(
        self, trial_id: str, config: dict[str, Any], *, attempt: int = 1, resume: bool = False
    ) -> TrialRequest:
        """The request for one attempt of a trial."""
        return TrialRequest(
            **self._job,
            trial_id=trial_id,
            hyperparameters=config,
            seed=trial_seed(self._seed, config),
            checkpoint_path=os.path.join(self._scratch, "checkpoints", trial_id),
            log_path=os.path.join(self._scratch, "logs", f"trial-{trial_id}.log"),
            resume=resume,
            attempt=attempt,
            checkpoint_url=f"{self.results_url}/checkpoints/{trial_id}",
            log_url=trial_log_url(self.results_url, trial_id),
        )
