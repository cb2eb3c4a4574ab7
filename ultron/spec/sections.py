"""The parts of a job spec that are models of their own: the objective, the resources of a
trial and early stopping.

Example:
    >>> Resources(cpu=1.5).units_per_trial, Resources(gpu=2).units_per_trial
    (2, 2)
    >>> Resources(gpu=0.25).units_for(parallelism=4)  # four trials share one GPU
    1
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, field_validator, model_validator

from ultron.algorithms.base import Direction
from ultron.spec.strict import Strict, non_finite, not_a_bool, rule_error

__all__ = ["THREAD_VARIABLES", "EarlyStopping", "Objective", "Resources", "gpu_share"]

UserStopper = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z_][\w.]*[:.][A-Za-z_]\w*$"),
    Field(title="Your own stopper", description="package.module:Class in your code base."),
]
"""A bring-your-own stopper named by its class (a subclass of ``ultron.algorithms.stoppers.Stopper``
or a class with its ``on_report(trial_id, step, value)``)."""

_QUANTITY = re.compile(r"^\d+(\.\d+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$")


class Objective(Strict):
    """What a trial's score means."""

    metric: str = Field(
        default="score",
        min_length=1,
        description="Name of the metric to optimize; a float returned by score() is this metric.",
    )
    mode: Direction = Field(
        default=Direction.MINIMIZE, description="minimize (a loss) or maximize (an accuracy)."
    )
    target: float | None = Field(
        default=None,
        strict=True,
        description="A value good enough: the job ends at the first trial whose score reaches "
        "it (at most it when minimizing, at least it when maximizing), with the reason "
        "'target reached by trial N'.",
    )

    _target_not_bool = field_validator("target", mode="before")(not_a_bool)


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
"""The variables numeric libraries size their thread pools by (OpenMP's, PyTorch's included,
MKL's and OpenBLAS's): a trial's are its ``Resources.threads``."""


class Resources(Strict):
    """What one trial needs; the resource limiter counts ``gpu`` (or ``cpu``) per trial."""

    cpu: float = Field(default=1.0, gt=0, le=1024, strict=True, description="CPU cores per trial.")
    memory: str | None = Field(
        default=None, description="Memory per trial as a Kubernetes quantity, e.g. 4Gi."
    )
    gpu: float = Field(
        default=0,
        ge=0,
        le=64,
        strict=True,
        description="GPUs per trial: a whole number (multi-GPU trials), or a fraction that "
        "divides one GPU (0.5, 0.25: that many trials share one GPU).",
    )
    compute: Literal["cpu", "gpu"] | None = Field(
        default=None, description="Which unit the limiter counts; default gpu if gpu > 0."
    )

    _numbers_not_bool = field_validator("cpu", "gpu", mode="before")(not_a_bool)

    @field_validator("memory")
    @classmethod
    def _memory_quantity(cls, value: str | None) -> str | None:
        if value is not None and not _QUANTITY.match(str(value)):
            raise rule_error(
                "memory must be a Kubernetes quantity such as 512Mi or 4Gi",
                "write a number followed by Ki, Mi, Gi or Ti",
            )
        return value

    @field_validator("gpu")
    @classmethod
    def _gpu_share(cls, value: float) -> float:
        return gpu_share(value)

    @model_validator(mode="after")
    def _gpu_counted(self) -> Resources:
        if self.compute == "gpu" and self.gpu == 0:
            raise rule_error(
                "compute: gpu counts GPUs per trial, and gpu is 0",
                "set gpu (e.g. 1, or 0.5 to share a GPU), or compute: cpu",
            )
        return self

    @property
    def units_per_trial(self) -> float:
        """Resource-limiter units one trial holds: its GPUs (a fraction too), or its CPUs
        rounded up."""
        uses_gpu = self.compute == "gpu" or (self.compute is None and self.gpu > 0)
        return self.gpu if uses_gpu else self.threads

    @property
    def threads(self) -> int:
        """Threads a trial's numeric libraries use (:data:`THREAD_VARIABLES`): its ``cpu`` in
        whole cores, at least one (:mod:`ultron.worker.threads`)."""
        return max(1, math.ceil(self.cpu))

    @property
    def gpu_memory_fraction(self) -> float | None:
        """The share of its GPU's memory a trial may hold: ``gpu`` when a fraction of one GPU,
        None for whole GPUs (the trial's own) or none (``ultron.worker.gpu_memory``).

        Example:
            >>> Resources(gpu=0.25).gpu_memory_fraction, Resources(gpu=1).gpu_memory_fraction
            (0.25, None)
        """
        return float(self.gpu) if 0 < self.gpu < 1 else None

    def units_for(self, parallelism: int) -> float:
        """Units of ``parallelism`` trials, counted exactly (four trials of 0.25 GPU: 1)."""
        total = Fraction(self.units_per_trial).limit_denominator(1 << 20) * parallelism
        return int(total) if total.denominator == 1 else float(total)


def gpu_share(value: float) -> float:
    """``value`` as a GPU amount: a whole number (as an int), or a fraction ``1/n`` of one GPU
    (written to six digits or more: 0.333333 is 1/3).

    Raises:
        PydanticCustomError: anything else (1.5, 0.3), with the nearest amounts as the fix.
    """
    if float(value).is_integer():
        return int(value)
    share = round(1 / value) if value < 1 else 0
    if share and abs(share * value - 1) <= 1e-5:  # 0.333333 is meant as 1/3: counted exactly
        return 1 / share
    if value > 1:
        fix = f"write {math.floor(value)} or {math.ceil(value)} GPUs"
    else:
        n = math.ceil(1 / value)
        fix = f"write 1/{n} = {1 / n:g} ({n} trials share a GPU)"
        fix += f" or 1/{n - 1} = {1 / (n - 1):g}" if n > 2 else " or 1"
    raise rule_error(
        "gpu must be a whole number of GPUs or a fraction that divides one GPU (1/n: 0.5, "
        "0.25, 0.2, ...)",
        fix,
    )


class EarlyStopping(Strict):
    """Early stopping: a stopper judges the reports of ``ultron.report`` and stops (or suspends)
    trials that do not deserve their full budget. Runs with the async loop."""

    type: (
        Literal["asha", "hyperband", "median", "pop", "pbt", "bandit", "earlyterm"] | UserStopper
    ) = Field(
        description="asha, hyperband (successive-halving brackets), median, pop (HyperDrive), "
        "pbt (population-based training: its options interval, quantile, "
        "resample_probability), bandit (TuPAQ's action elimination: epsilon, interval), "
        "earlyterm (Domhan et al.'s predictive termination: delta, interval), or your own "
        "stopper as package.module:Class in the code base."
    )
    metric: str | None = Field(
        default=None, description="Reported metric to judge; default: the objective's metric."
    )
    max_resource: int = Field(
        ge=1, le=10**9, strict=True, description="Most steps (reports, e.g. epochs) of a trial."
    )
    min_resource: int = Field(
        default=1, ge=1, strict=True, description="Steps before a trial may be stopped."
    )
    reduction_factor: int = Field(
        default=3,
        ge=2,
        le=100,
        strict=True,
        description="asha, hyperband: keep 1/eta per rung (eta in the papers).",
    )
    grace_period: float = Field(
        default=30.0,
        ge=0,
        le=86400,
        strict=True,
        description="Seconds a stopped trial has to return before it is killed (at most a day).",
    )
    tell_stopped: bool = Field(
        default=True, description="Give a stopped trial's score to the strategy (else nan)."
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="More keyword arguments for the stopper (pop: target; raise_target_by for "
        "a dynamic target that rises by that step each time it is reached).",
    )

    _numbers_not_bool = field_validator(
        "max_resource", "min_resource", "reduction_factor", "grace_period", mode="before"
    )(not_a_bool)

    @field_validator("options")
    @classmethod
    def _finite_options(cls, value: dict[str, Any]) -> dict[str, Any]:
        where = non_finite(value)
        if where is not None:
            raise rule_error(
                f"its numbers must be finite (no nan or inf), and options{where} is not",
                "write a finite number there, or leave the option out for its default",
            )
        return value

    @model_validator(mode="after")
    def _resources(self) -> EarlyStopping:
        if self.min_resource > self.max_resource:
            raise rule_error(
                f"min_resource ({self.min_resource}) must not exceed max_resource "
                f"({self.max_resource})",
                "lower min_resource or raise max_resource",
            )
        if self.type == "pop" and "target" not in self.options:
            raise rule_error("pop needs a target value of the metric", "add options: {target: 0.9}")
        return self
