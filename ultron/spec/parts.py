"""The parts of a job spec that are models of their own: the objective, the resources of a
trial and early stopping.

Example:
    >>> Resources(cpu=1.5).units_per_trial, Resources(gpu=2).units_per_trial
    (2, 2)
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ultron.algorithms.base import Direction
from ultron.spec.space import Strict, non_finite, not_a_bool, rule_error

__all__ = ["EarlyStopping", "Objective", "Resources"]

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


class Resources(Strict):
    """What one trial needs; the resource limiter counts ``gpu`` (or ``cpu``) per trial."""

    cpu: float = Field(default=1.0, gt=0, description="CPU cores per trial.")
    memory: str | None = Field(
        default=None, description="Memory per trial as a Kubernetes quantity, e.g. 4Gi."
    )
    gpu: int = Field(default=0, ge=0, description="GPUs per trial.")
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

    @property
    def units_per_trial(self) -> int:
        """Resource-limiter units one trial holds: its GPUs, or its CPUs rounded up."""
        uses_gpu = self.compute == "gpu" or (self.compute is None and self.gpu > 0)
        return self.gpu if uses_gpu else max(1, int(-(-self.cpu // 1)))


class EarlyStopping(Strict):
    """Early stopping: a stopper judges the reports of ``ultron.report`` and stops (or suspends)
    trials that do not deserve their full budget. Runs with the async loop."""

    type: Literal["asha", "hyperband", "median", "pop"] = Field(
        description="asha, hyperband (successive-halving brackets), median or pop (HyperDrive)."
    )
    metric: str | None = Field(
        default=None, description="Reported metric to judge; default: the objective's metric."
    )
    max_resource: int = Field(ge=1, description="Most steps (reports, e.g. epochs) of a trial.")
    min_resource: int = Field(default=1, ge=1, description="Steps before a trial may be stopped.")
    reduction_factor: int = Field(
        default=3, ge=2, description="asha, hyperband: keep 1/eta per rung (eta in the papers)."
    )
    grace_period: float = Field(
        default=30.0, ge=0, description="Seconds a stopped trial has to return before it is killed."
    )
    tell_stopped: bool = Field(
        default=True, description="Give a stopped trial's score to the strategy (else nan)."
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="More keyword arguments for the stopper (pop: target)."
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
