"""A job with ``execution: hopper``: the search task's loop for model hopper parallelism.

The job's strategy proposes ``num_iterations`` configurations once (they are kept in the job's
storage, so a resumed job trains the same ones), :class:`~ultron.master.hopper.HopperRunner`
trains them all at once over the partitions the job's workers hold, and each configuration
becomes a row of the job's trial table (status and score, its epochs as its curve) as soon as
it ends: the progress, ``ultron status``, ``trials.json``, ``best.json`` and the report read
that table as for any job. The runner's own state in the store lets a job started again with
the same id go on from its last completed sub-epoch; the score cache answers configurations a
job with the same code, data, model, seed and hopper setting trained before.
"""

from __future__ import annotations

import json
import logging
import math
import os
import posixpath
from collections.abc import Callable, Sequence
from typing import Any

from ultron.algorithms.base import HPOAlgorithm
from ultron.algorithms.stoppers.base import Stopper
from ultron.master.goals import EndKind, JobEnd
from ultron.master.hopper import HopperJob, HopperResult, HopperRunner
from ultron.master.interfaces import Cache
from ultron.master.job_state import JobState, JobStore
from ultron.paths import job_results_url
from ultron.spec.job import JobSpec
from ultron.trial_records import TrialResult, TrialStatus

__all__ = [
    "READ_LOG_ENV",
    "check_hopper_model",
    "data_fingerprint",
    "hopper_job",
    "run_hopper_search",
]

logger = logging.getLogger(__name__)

READ_LOG_ENV = "ULTRON_HOPPER_READ_LOG"
"""A local JSON-lines file every partition worker appends its reads from the store to (an
audit of who read what; the workers must see the same path)."""

Config = dict[str, Any]
OnResult = Callable[[JobState, int, TrialResult | None], None]


def _hopper_storage(spec: JobSpec, job_id: str) -> str:
    """The job's results folder: checkpoints under ``checkpoints/<trial id>/step-<n>``."""
    return job_results_url(spec.storage, job_id)


def _configurations(
    spec: JobSpec, storage: str, strategy: HPOAlgorithm, state: JobState
) -> dict[str, Config]:
    """The job's configurations by trial id: those a previous run of the job proposed, or
    ``num_iterations`` new ones from the strategy (then stored)."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(f"{storage}/hopper-configurations.json")
    if fs.exists(path):
        configs: dict[str, Config] = json.loads(fs.cat_file(path))
        return configs
    candidates = strategy.sample_hyperparameter_candidates(spec.num_iterations)
    configs = {f"{i:04d}": dict(c) for i, c in enumerate(candidates)}
    fs.makedirs(posixpath.dirname(path), exist_ok=True)
    fs.pipe_file(path, json.dumps(configs).encode())
    state.next_trial = max(state.next_trial, len(configs))
    return configs


def check_hopper_model(model: str) -> None:
    """Refuse, before any compute, a model class a hopper job cannot train: one without
    ``train_epoch(hyperparameters, checkpoint_path, resume)`` (the user's code is importable).

    Raises:
        SpecError: the class has no ``train_epoch``, naming the field, the rule and the fix.
    """
    import importlib

    from ultron.errors import ConfigIssue, SpecError

    module, _, name = model.partition(":")
    cls = getattr(importlib.import_module(module), name, None)
    if not callable(getattr(cls, "train_epoch", None)):
        raise SpecError(
            [
                ConfigIssue(
                    "model",
                    model,
                    "execution: hopper trains the model one sub-epoch at a time, and this "
                    "class has no train_epoch method",
                    "add train_epoch(self, hyperparameters, checkpoint_path, resume) that "
                    "trains one pass over ultron.data.batches() and returns its metrics, or "
                    "use execution: trials",
                )
            ]
        )


def data_fingerprint(url: str) -> str:
    """What the score cache keys a hopper job's data on: its shards' names, sizes and versions
    (ETag or modification time), read from a listing (no file is read)."""
    import hashlib

    import fsspec

    fs, root = fsspec.core.url_to_fs(url)
    listing = fs.find(root.rstrip("/"), detail=True)
    entries = sorted(
        (name, info.get("size"), str(info.get("ETag") or info.get("mtime") or ""))
        for name, info in listing.items()
        if name.endswith(".npz")
    )
    return hashlib.sha256(json.dumps([url, entries]).encode()).hexdigest()[:16]


def hopper_job(
    spec: JobSpec, job_id: str, configs: dict[str, Config], code_paths: Sequence[str]
) -> HopperJob:
    """The :class:`HopperJob` of a job spec with ``execution: hopper``."""
    if spec.data is None or spec.execution.epochs is None:  # the spec's validation refuses it
        raise ValueError("execution: hopper needs data and execution.epochs")
    return HopperJob(
        job_id=job_id,
        model=spec.model,
        configs=configs,
        data_url=spec.data.url,
        storage=_hopper_storage(spec, job_id),
        partitions=spec.parallelism,
        epochs=spec.execution.epochs,
        seed=spec.seed,
        code_paths=tuple(code_paths),
        batch_size=spec.data.batch_size,
        metric=spec.objective.metric,
        read_log=os.environ.get(READ_LOG_ENV) or None,
        retries=spec.retries,
    )


def _row(
    trial_id: str,
    config: Config,
    status: TrialStatus,
    metrics: dict[str, Any],
    metric: str,
    *,
    reports: int,
    error: str | None = None,
) -> TrialResult:
    score = metrics.get(metric)
    if status is not TrialStatus.FAILED and (score is None or not math.isfinite(score)):
        status, error = TrialStatus.FAILED, f"train_epoch returned no finite {metric}: {metrics}"
        score = None
    return TrialResult(
        trial_id=trial_id,
        hyperparameters=config,
        status=status,
        score=score,
        metrics=dict(metrics),
        error=error,
        reports=reports,
    )


def _final_rows(
    result: HopperResult, configs: dict[str, Config], metric: str, epochs_each: int
) -> dict[str, TrialResult]:
    """A row per configuration; one the stopper stopped after its last epoch is completed."""
    rows = {}
    for model, config in configs.items():
        epochs = result.epochs.get(model, [])
        last = epochs[-1] if epochs else {}
        if model in result.cached:
            hit = result.cached[model]
            rows[model] = _row(
                model, config, TrialStatus.CACHED, hit.get("metrics") or {metric: hit["score"]},
                metric, reports=0,
            )  # fmt: skip
        elif model in result.failed:
            rows[model] = _row(
                model, config, TrialStatus.FAILED, last, metric, reports=len(epochs),
                error=result.failed[model],
            )  # fmt: skip
        elif model in result.stopped and len(epochs) < epochs_each:
            rows[model] = _row(
                model, config, TrialStatus.STOPPED, last, metric, reports=len(epochs)
            )
        else:
            rows[model] = _row(
                model, config, TrialStatus.COMPLETED, last, metric, reports=len(epochs)
            )
    return rows


def run_hopper_search(
    spec: JobSpec,
    job_id: str,
    *,
    client: Any,
    store: JobStore,
    state: JobState,
    strategy: HPOAlgorithm,
    stopper: Stopper | None,
    cache: Cache | None,
    code_paths: Sequence[str],
    check: Callable[[], None],
    on_result: OnResult,
    own_workers: bool = False,
) -> HopperResult:
    """Train the job's configurations by model hopper parallelism on ``client``'s workers
    (worker ``k`` holds ``partition-<k>``) and write their rows into the job's state;
    ``own_workers``: the job started the cluster, whose partitions' workers may still be
    on their way (:class:`~ultron.master.hopper.HopperRunner`).

    Raises:
        ValueError: a partition no worker of a cluster not the job's own holds.
        JobFailedError: every configuration failed.
    """
    storage = _hopper_storage(spec, job_id)
    configs = _configurations(spec, storage, strategy, state)
    metric = spec.objective.metric
    job = hopper_job(spec, job_id, configs, code_paths)

    def on_epoch(model: str, epoch: int, metrics: dict[str, float]) -> None:
        state.curves.setdefault(model, [])[epoch:] = [{"step": epoch + 1, **metrics}]
        row = None
        if epoch + 1 == job.epochs:  # trained all its epochs: a row of the table now
            row = _row(model, configs[model], TrialStatus.COMPLETED, metrics, metric,
                       reports=epoch + 1)  # fmt: skip
            state.trials = [t for t in state.trials if t.trial_id != model] + [row]
            store.save(state, [row])
        on_result(state, len(configs) - len(state.trials), row)

    runner = HopperRunner(
        client, job, stopper=stopper, on_epoch=on_epoch, cache=cache, check=check,
        own_workers=own_workers,
    )  # fmt: skip
    logger.info(
        "hopper job %s: %d configurations x %d epochs over %d partitions",
        job_id, len(configs), job.epochs, job.partitions,
    )  # fmt: skip
    result = runner.run()
    rows = _final_rows(result, configs, metric, job.epochs)
    state.trials = list(rows.values())
    ids = list(configs)
    scores = [math.nan if (score := rows[i].score) is None else float(score) for i in ids]
    strategy.update_state([configs[i] for i in ids], scores)
    if hasattr(strategy, "state_dict"):
        state.algorithm = strategy.state_dict()
    state.strategy_log = []
    state.end_reason = str(JobEnd(EndKind.TRIALS, trials=len(ids)))
    store.save(state, state.trials)
    on_result(state, 0, None)
    return result
