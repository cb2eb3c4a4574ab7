"""The ``execution`` section of a job spec: how the job's trials train.

``trials`` (the default) runs each configuration as a trial of its own, on any worker, with the
whole data set. ``hopper`` is model hopper parallelism (Cerebro's MOP, ``docs/guides/hopper.md``):
the data set (the ``data`` section's ``url``, a folder of ``.npz`` shards) is split once into
``parallelism`` partitions, one per worker, and every configuration trains ``epochs`` epochs by
hopping from partition to partition, one sub-epoch at a time (the model's ``train_epoch``).
Every ``cluster`` type runs it: the job's own clusters (``local``, ``slurm``, ``kubernetes``)
start one worker per partition, holding the Dask resource ``partition-<k>: 1``, and the workers
of an ``address`` cluster are started with it.

Example:
    >>> Execution.model_validate("trials").mode
    'trials'
    >>> Execution.model_validate({"mode": "hopper", "epochs": 3}).epochs
    3
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, model_validator

from ultron.spec.strict import Strict, rule_error

__all__ = ["MAX_EPOCHS", "Execution", "check_execution"]

MAX_EPOCHS = 100_000

_HOPPER_EXAMPLE = "execution: {mode: hopper, epochs: 3}"


class Execution(Strict):
    """How the job trains its configurations: one trial each, or model hopper parallelism."""

    mode: Literal["trials", "hopper"] = Field(
        default="trials",
        description="trials: each configuration is a trial of its own, on one worker, with the "
        "whole data set. hopper: model hopper parallelism; the data set is split into one "
        "partition per worker (parallelism of them) and every configuration trains epoch by "
        "epoch, one sub-epoch per partition, hopping between the workers (the model has "
        "train_epoch); on cluster local, slurm or kubernetes the job starts one worker per "
        "partition, on address its workers hold the resources partition-0 ... "
        "partition-<parallelism - 1>. A bare string (execution: hopper) sets the mode.",
    )
    epochs: int | None = Field(
        default=None,
        ge=1,
        le=MAX_EPOCHS,
        strict=True,
        description=f"hopper only: the epochs each configuration trains (1 to {MAX_EPOCHS}).",
    )

    @model_validator(mode="before")
    @classmethod
    def _bare_mode(cls, data: Any) -> Any:
        return {"mode": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _epochs_with_hopper(self) -> Execution:
        if self.mode == "hopper" and self.epochs is None:
            raise rule_error(
                "execution: hopper needs the number of epochs each configuration trains",
                f"write {_HOPPER_EXAMPLE}",
            )
        if self.mode == "trials" and self.epochs is not None:
            raise rule_error(
                f"epochs is {self.epochs}, but only execution mode hopper has epochs (a trial "
                "runs its own epochs in score)",
                f"set mode: hopper ({_HOPPER_EXAMPLE}), or remove epochs",
            )
        return self

    @property
    def hopper(self) -> bool:
        """Whether the job runs model hopper parallelism."""
        return self.mode == "hopper"


def check_execution(execution: Execution, fields: Mapping[str, Any]) -> Execution:
    """Refuse what a hopper job cannot combine with, before any compute.

    Args:
        execution: the spec's ``execution``.
        fields: the spec's fields validated before it (a field that failed is absent: its
            own error is reported, so it is not judged here).

    Raises:
        PydanticCustomError: a rule error naming the other field, its value and the fix.
    """
    if not execution.hopper:
        return execution
    _check_hopper_data(fields)
    _check_hopper_schedule(fields)
    return execution


def _check_hopper_data(fields: Mapping[str, Any]) -> None:
    """A hopper job's data: a set of .npz shards each worker reads a partition of."""
    if "data" in fields and fields["data"] is None:
        raise rule_error(
            "execution: hopper needs a data set to partition, and data is not set",
            "add data: {url: s3://bucket/dataset/, format: numpy} (a folder of .npz shards)",
        )
    data = fields.get("data")
    if data is not None and data.resolved_format() not in (None, "numpy"):
        raise rule_error(
            f"the format of data ({data.resolved_format()}) is not numpy, but execution: "
            "hopper partitions .npz shards",
            "write the data set as a folder of .npz shards and set format: numpy",
        )
    if data is not None and (data.placement != "colocated" or data.pipeline is not None):
        raise rule_error(
            "execution: hopper reads each worker's partition from its local disk; "
            f"data.placement ({data.placement}) and data.pipeline do not apply to it",
            "remove placement and pipeline from data (augment the batches in train_epoch)",
        )


def _check_hopper_schedule(fields: Mapping[str, Any]) -> None:
    """What a hopper job's own schedule (every configuration at once, each epoch hopping over
    the partitions, one metric) cannot do."""
    if fields.get("loop") is not None:
        raise rule_error(
            f"loop is {fields['loop']}, but execution: hopper has its own schedule (every "
            "configuration at once, hopping between the partitions)",
            "remove loop",
        )
    stopping = fields.get("early_stopping")
    if stopping is not None and stopping.type in ("pop", "hyperband"):
        raise rule_error(
            f"early_stopping.type is {stopping.type}, which pauses and resumes trials; "
            "execution: hopper can only stop a configuration after an epoch",
            "use early_stopping type asha or median, or execution: trials",
        )
    if fields.get("min_parallelism") is not None:
        raise rule_error(
            f"min_parallelism is {fields['min_parallelism']}, but execution: hopper needs all "
            "of parallelism (one worker per partition) from the start",
            "remove min_parallelism",
        )
    if fields.get("warm_start") is not None:
        raise rule_error(
            "warm_start seeds a trial loop's strategy with earlier trials, and execution: "
            "hopper proposes all its configurations at once before any is scored",
            "remove warm_start, or use execution: trials",
        )
    several = [name for name in ("objectives", "constraints") if fields.get(name)]
    if several:
        raise rule_error(
            f"{' and '.join(several)} ask each trial for several metrics, but execution: "
            "hopper scores a configuration by train_epoch's one metric (objective.metric) and "
            "tells the strategy only that",
            f"remove {' and '.join(several)} (one objective), or use execution: trials",
        )
    budget = fields.get("budget")
    if budget is not None and budget.time is not None:
        raise rule_error(
            f"budget.time is {budget.time}, but execution: hopper trains every configuration "
            "its epochs; a time budget cannot end it early",
            "remove budget.time, or lower execution.epochs",
        )
