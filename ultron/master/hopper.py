"""Model hopper parallelism (Cerebro's MOP) on a Dask cluster: the master's loop.

The data set is split once into one partition per worker (:mod:`ultron.datamanager.partitions`);
the workers that hold one carry the Dask resource ``partition-<k>: 1``, so the same loop runs on
a local cluster, a running one (``address``), SLURM or Kubernetes: only the workers' resources
say where a partition lives. :class:`HopperRunner` asks the randomized scheduler
(:class:`ultron.algorithms.hopper.HopperScheduler`) which model trains on which idle partition
next, submits each sub-epoch as a Dask task restricted to that partition's resource
(:func:`ultron.worker.hopper.run_sub_epoch`), and records every completed hop.

After every epoch of a model it reports the epoch's metrics (the sub-epochs' values weighted by
their records) to the stopper, which may stop the model there. A worker lost mid-sub-epoch is
Dask's to handle: the task waits for a worker with the same resource (the nanny's replacement,
or one the cluster starts), which fetches the partition again, and runs from the model's last
checkpoint. The job's state (the scheduler's, the records) is written to the store after every
hop, so a job started again with the same storage goes on where it stopped.
"""

from __future__ import annotations

import json
import logging
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ultron.algorithms.hopper import Hop, HopperScheduler
from ultron.algorithms.stoppers.base import Decision, Stopper
from ultron.datamanager.partitions import (
    PartitionPlan,
    list_shards,
    plan_partitions,
    resource_name,
)
from ultron.errors import JobFailedError
from ultron.master.interfaces import Cache
from ultron.trial_records import trial_seed
from ultron.worker.hopper import checkpoint_url, run_sub_epoch

__all__ = ["HopperJob", "HopperResult", "HopperRunner"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HopperJob:
    """What a hopper job trains, on what data, and where its state goes.

    Attributes:
        job_id: the job's id (names its Dask tasks and local folders).
        model: the model class, ``module:Class``; it has ``train_epoch(hyperparameters,
            checkpoint_path, resume)``.
        configs: model id -> hyper-parameters.
        data_url: the data set's folder of ``.npz`` shards (fsspec URL).
        storage: the job's folder in the store (checkpoints and state).
        partitions: how many partitions, one per worker.
        epochs: epochs per model.
        seed: the job seed (partitioning, shuffling, scheduling, the trials' seeds).
        code_paths: the code base's import folders.
        batch_size: records per batch.
        metric: the metric the stopper judges; ``None``: the first one reported.
        storage_options: fsspec options of the store.
        read_log: a JSON-lines file every worker appends its reads from the store to.
        retries: how often a sub-epoch that failed (not one whose worker died) runs again.
    """

    job_id: str
    model: str
    configs: dict[str, dict[str, Any]]
    data_url: str
    storage: str
    partitions: int
    epochs: int
    seed: int = 0
    code_paths: tuple[str, ...] = ()
    batch_size: int = 32
    metric: str | None = None
    storage_options: dict[str, Any] = field(default_factory=dict)
    read_log: str | None = None
    retries: int = 1

    def request(self, plan: PartitionPlan, model_id: str) -> dict[str, Any]:
        """The fields of a sub-epoch's request that do not depend on the hop."""
        config = self.configs[model_id]
        return {
            "job_id": self.job_id,
            "model": self.model,
            "code_paths": list(self.code_paths),
            "plan": plan.to_dict(),
            "storage_options": self.storage_options,
            "batch_size": self.batch_size,
            "read_log": self.read_log,
            "model_id": model_id,
            "hyperparameters": config,
            "seed": trial_seed(self.seed, config),
            "checkpoints": f"{self.storage.rstrip('/')}/checkpoints/{model_id}",
        }


@dataclass
class HopperResult:
    """What a hopper job did.

    Attributes:
        records: every completed sub-epoch, in completion order (hop, metrics, worker).
        orders: model id -> per epoch, the partitions it visited in order.
        epochs: model id -> per epoch, the records-weighted metrics of its sub-epochs.
        checkpoints: model id -> its last checkpoint's URL.
        stopped: the models a stopper stopped early.
        failed: model id -> the error of the sub-epoch that failed more than ``retries``.
        cached: model id -> the score cache's answer (the model was not trained).
    """

    records: list[dict[str, Any]]
    orders: dict[str, list[list[int]]]
    epochs: dict[str, list[dict[str, float]]]
    checkpoints: dict[str, str]
    stopped: list[str]
    failed: dict[str, str]
    cached: dict[str, dict[str, Any]]


def _epoch_metrics(records: list[dict[str, Any]]) -> dict[str, float]:
    """The sub-epochs' metrics of one epoch, weighted by their partitions' records."""
    total = sum(r["records"] for r in records) or 1
    names = set().union(*(r["metrics"] for r in records))
    return {
        n: sum(r["metrics"].get(n, 0.0) * r["records"] for r in records) / total
        for n in sorted(names)
    }


class HopperRunner:
    """Runs a :class:`HopperJob` on a Dask client whose workers hold the partitions.

    Args:
        client: a ``distributed.Client``; its workers carry ``partition-<k>: 1``.
        job: the job.
        stopper: judges each model after each epoch (``on_report(model_id, epoch, value)``).
        on_epoch: called with (model id, epoch, metrics) after each epoch of a model.
        cache: the score cache of the job's computation (code, data, model, seed); a model it
            answers is not trained, and a model that trained all its epochs is stored there.
            Its configurations are keyed with the hopper setting (:meth:`cache_key`).
        check: called after every sub-epoch; what it raises (a cancel, a lost lease) ends the
            run, and the sub-epochs that were running are cancelled.
        own_workers: the cluster is the job's own and starts a worker per partition itself
            (SLURM jobs that may still queue, pods being scheduled): sub-epochs wait for them,
            and :meth:`check_workers` is not asked.
    """

    def __init__(
        self,
        client: Any,
        job: HopperJob,
        *,
        stopper: Stopper | None = None,
        on_epoch: Callable[[str, int, dict[str, float]], None] | None = None,
        cache: Cache | None = None,
        check: Callable[[], None] | None = None,
        own_workers: bool = False,
    ) -> None:
        self.client = client
        self.own_workers = own_workers
        self.check = check
        self.cache = cache
        self.cached: dict[str, dict[str, Any]] = {}  # model -> the cache's answer
        self.job = job
        self.stopper = stopper
        self.on_epoch = on_epoch
        self.records: list[dict[str, Any]] = []
        self.scheduler = HopperScheduler(
            list(job.configs), partitions=job.partitions, epochs=job.epochs, seed=job.seed
        )
        self._failures: dict[tuple[str, int], int] = {}
        self._failed: dict[str, str] = {}  # model -> the error that ended it
        self._stopped: set[str] = set()  # the models the stopper stopped
        self._futures: dict[str, Any] = {}  # the running sub-epochs' futures, by key
        self._state_url = f"{job.storage.rstrip('/')}/hopper-state.json"

    def cache_key(self, model: str) -> dict[str, Any]:
        """What the cache keys ``model`` on: its configuration and the hopper setting (the
        partitioning and the epochs decide the records it sees, and in which order)."""
        job = self.job
        setting = {"partitions": job.partitions, "epochs": job.epochs, "batch": job.batch_size}
        return {**job.configs[model], "__hopper__": setting}

    def _ask_cache(self) -> None:
        """Take the cache's answers: those models are not trained."""
        if self.cache is None:
            return
        models = [m for m in self.job.configs if not self.scheduler.done(m)]
        answers = self.cache.get_many(
            [self.cache_key(m) for m in models], job_id=self.job.job_id, trial_ids=models
        )
        for model, hit in zip(models, answers, strict=True):
            if hit is not None:
                self.cached[model] = hit
                self.scheduler.stop(model)

    def _fs(self) -> tuple[Any, str]:
        import fsspec

        return fsspec.core.url_to_fs(self._state_url, **self.job.storage_options)

    def _load(self) -> None:
        """Go on from the state a previous run of this job left in the store, if any."""
        fs, path = self._fs()
        if not fs.exists(path):
            return
        state = json.loads(fs.cat_file(path))
        self.scheduler.load_state_dict(state["scheduler"])
        self.records = state["records"]
        if self.stopper is not None and state.get("stopper") is not None:
            self.stopper.load_state_dict(state["stopper"])
        logger.info("hopper job %s resumes after %d sub-epochs", self.job.job_id, len(self.records))

    def _save(self) -> None:
        fs, path = self._fs()
        state = {
            "scheduler": self.scheduler.state_dict(),
            "records": self.records,
            "stopper": self.stopper.state_dict() if self.stopper is not None else None,
        }
        fs.makedirs(posixpath.dirname(path), exist_ok=True)  # a local folder must exist first
        fs.pipe_file(path, json.dumps(state).encode())

    def _submit(self, plan: PartitionPlan, hop: Hop, ac: Any, running: dict[str, Hop]) -> None:
        request = {
            **self.job.request(plan, hop.model),
            "partition": hop.partition,
            "epoch": hop.epoch,
            "step": hop.step,
        }
        attempt = self._failures.get((hop.model, hop.step), 0)
        future = self.client.submit(
            run_sub_epoch,
            request,
            key=f"hop-{self.job.job_id}-{hop.model}-{hop.step}-{attempt}",
            resources={resource_name(hop.partition): 1},
            pure=False,
        )
        running[future.key] = hop
        self._futures[future.key] = future
        ac.add(future)

    def _completed(self, hop: Hop, answer: dict[str, Any]) -> None:
        self.records.append(answer)
        if not self.scheduler.complete(hop):
            return
        epoch = [r for r in self.records if r["model_id"] == hop.model and r["epoch"] == hop.epoch]
        metrics = _epoch_metrics(epoch)
        if self.on_epoch is not None:
            self.on_epoch(hop.model, hop.epoch, metrics)
        name = self.job.metric or next(iter(metrics), "")
        if self.cache is not None and hop.epoch + 1 == self.job.epochs and name in metrics:
            entry = {"score": metrics[name], "metrics": metrics, "trial_id": hop.model}
            self.cache.put(self.cache_key(hop.model), {**entry, "job_id": self.job.job_id})
        if self.stopper is not None and metrics:
            decision = self.stopper.on_report(hop.model, hop.epoch + 1, metrics[name])
            if decision is Decision.STOP:
                logger.info("model %s stopped after epoch %d", hop.model, hop.epoch + 1)
                self.scheduler.stop(hop.model)
                self._stopped.add(hop.model)

    def _lost(self, hop: Hop, error: BaseException) -> None:
        """A sub-epoch that raised: run it again, up to ``retries`` times, else stop its model."""
        self.scheduler.release(hop)
        key = (hop.model, hop.step)
        count = self._failures[key] = self._failures.get(key, 0) + 1
        logger.warning("sub-epoch %s failed (%d): %r", hop, count, error)
        if count > self.job.retries:
            self.scheduler.stop(hop.model)
            self._failed[hop.model] = f"{type(error).__name__}: {error}"

    def check_workers(self) -> None:
        """Make sure some worker of the cluster holds each partition's resource.

        Raises:
            ValueError: a partition no worker holds (its sub-epochs would wait forever).
        """
        held: set[str] = set()
        for worker in self.client.scheduler_info()["workers"].values():
            held.update(name for name, amount in worker.get("resources", {}).items() if amount)
        missing = [
            resource_name(k) for k in range(self.job.partitions) if resource_name(k) not in held
        ]
        if missing:
            raise ValueError(
                f"partitions is {self.job.partitions}, but no worker holds {', '.join(missing)}; "
                "each partition needs a Dask worker with the resource partition-<k>: 1. Fix: "
                "start the workers with --resources partition-<k>=1 (one per partition), or "
                "lower partitions to the workers there are"
            )

    def run(self) -> HopperResult:
        """Train every model its epochs (or until its stopper says stop); returns the result.

        Raises:
            ValueError: a partition no worker holds (:meth:`check_workers`), on a cluster
                that is not the job's own.
            JobFailedError: every model failed.
        """
        from distributed import as_completed

        plan = plan_partitions(
            list_shards(self.job.data_url, self.job.storage_options),
            partitions=self.job.partitions,
            seed=self.job.seed,
            url=self.job.data_url,
        )
        self._load()
        self._ask_cache()
        running: dict[str, Hop] = {}
        # Dask is asked nothing when every model is done already, or answered by the cache.
        ac = None
        if not self.scheduler.finished:
            if not self.own_workers:
                self.check_workers()
            ac = as_completed([], with_results=False)
        try:
            while ac is not None and not self.scheduler.finished:
                for hop in self.scheduler.assign():
                    self._submit(plan, hop, ac, running)
                future = next(ac)
                hop = running.pop(future.key)
                self._futures.pop(future.key, None)
                try:
                    answer = future.result()
                except Exception as error:  # the model's, or Dask's (KilledWorker): retried
                    self._lost(hop, error)
                else:
                    self._completed(hop, answer)
                future.release()
                self._save()
                if self.check is not None:
                    self.check()
        except BaseException:
            if running:  # a resumed job runs them again from their last checkpoints
                self.client.cancel(list(self._futures.values()), force=True)
            raise
        if self._failed and len(self._failed) == len(self.job.configs):
            raise JobFailedError(f"every model failed; first: {next(iter(self._failed.values()))}")
        return self._result()

    def _result(self) -> HopperResult:
        models = list(self.job.configs)
        base = self.job.storage.rstrip("/")
        epochs: dict[str, list[dict[str, float]]] = {}
        for model in models:
            done = [r for r in self.records if r["model_id"] == model]
            finished = len(done) // self.job.partitions
            epochs[model] = [
                _epoch_metrics([r for r in done if r["epoch"] == e]) for e in range(finished)
            ]
        return HopperResult(
            records=list(self.records),
            orders={m: self.scheduler.order(m) for m in models},
            epochs=epochs,
            checkpoints={
                m: checkpoint_url(f"{base}/checkpoints/{m}", self.scheduler.steps_done(m))
                for m in models
            },
            stopped=sorted(self._stopped),
            failed=dict(self._failed),
            cached=dict(self.cached),
        )
