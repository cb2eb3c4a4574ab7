"""The job spec: one declarative document (YAML, JSON or a dict) that fully defines an HPO job.

The paper's Fig. 2 JSON (``model_classname``, ``hp_ranges``, ``parallelism_fact``, ...) is
accepted as it is: :func:`load_spec` maps its keys to ours and reports problems under the
names the user wrote.

Example:
    >>> spec = JobSpec.model_validate(
    ...     {"name": "demo", "code": ".", "model": "pkg.train:Model",
    ...      "search_space": {"lr": {"type": "loguniform", "low": 1e-4, "high": 1e-1},
    ...                       "layers": [1, 2, 3]},
    ...      "num_iterations": 4},
    ...     context={"check_paths": False},
    ... )
    >>> spec.search_space["layers"].type
    'choice'
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from ultron.algorithms.space import SearchSpace
from ultron.datamanager.spec import DataSpec
from ultron.errors import SpecError
from ultron.paths import check_job_id
from ultron.spec.budget import (
    MAX_ITERATIONS,
    Budget,
    check_num_iterations,
    check_trials_once,
    one_trial_budget,
)
from ultron.spec.cluster import ClusterSpec, LocalCluster
from ultron.spec.code_location import CodeURL, check_code_location, check_model_path
from ultron.spec.conditions import check_conditions
from ultron.spec.execution import Execution, check_execution
from ultron.spec.objectives import (
    Constraint,
    ObjectiveEntry,
    check_constraints,
    check_objectives,
    mirror_first_objective,
)
from ultron.spec.paper import PAPER_KEY_NAMES, from_paper
from ultron.spec.sections import EarlyStopping, Objective, Resources
from ultron.spec.space import DomainSpec, as_entry
from ultron.spec.strategy import (
    StrategyName,
    UserStrategy,
    check_strategy_name,
    check_strategy_options,
)
from ultron.spec.strict import Strict, not_a_bool, rule_error
from ultron.spec.warm_start import WarmStart

__all__ = [
    "MAX_ITERATIONS",
    "MAX_PARALLELISM",
    "MAX_RETRIES",
    "MAX_SEED",
    "MAX_TIMEOUT_S",
    "Budget",
    "EarlyStopping",
    "JobSpec",
    "Objective",
    "Resources",
]

# The upper bounds of the other counts and times (MAX_ITERATIONS is the budget's): past them a
# value is a typo, not a plan.
MAX_PARALLELISM = 10_000
MAX_RETRIES = 100
MAX_TIMEOUT_S = 30 * 24 * 3600  # 30 days, for trial_timeout and acquire_timeout
MAX_SEED = 2**63 - 1


def _bare_lists_are_choices(schema: dict[str, Any]) -> None:
    """The search space's schema takes a bare list as a choice too (as spec files write it,
    and as stored deployments hold it): Prefect checks a run's parameters against it."""
    entry = schema.get("additionalProperties")
    if isinstance(entry, dict):
        choice = {"type": "array", "title": "Choice (a bare list of values)"}
        schema["additionalProperties"] = {"anyOf": [entry, choice]}
    schema["example"] = {"lr": {"type": "loguniform", "low": 1e-4, "high": 0.1}}


class JobSpec(Strict):
    """A whole HPO job. Every field has a default except the code, the model and the space."""

    name: str = Field(default="hpo-job", min_length=1, description="Name of the job.")
    seed: int = Field(
        default=0,
        ge=0,
        le=MAX_SEED,
        strict=True,
        description="Seed of the strategy and of every trial (0 to 2**63 - 1).",
    )
    deterministic: bool = Field(
        default=False,
        description="Make PyTorch and TensorFlow deterministic in every trial (deterministic "
        "kernels, seeded from the trial's seed): the same spec and seed give the same scores "
        "in batch mode, at some cost in speed.",
    )
    code: Annotated[Path, Field(title="Path on the worker")] | CodeURL = Field(
        description="Your code base: a folder or a tar archive (.tar, .tar.gz, .tgz, .tar.bz2, "
        ".tar.xz) with setup.py or pyproject.toml, "
        "on the worker's disk, or an object-store URL of a .tar.gz (s3://bucket/code.tar.gz; "
        "ultron submit uploads it for you)."
    )
    model: str = Field(description="The model class, as module:Class (e.g. mypkg.train:Model).")
    search_space: dict[str, DomainSpec] = Field(
        description="Hyper-parameter name -> domain: uniform, loguniform, int, choice (in a "
        "spec file a bare list [a, b] is a choice) or list ({count: [1, 4], each: {...}}); "
        "any entry may hold when: {choice: value} to exist only under that choice.",
        json_schema_extra=_bare_lists_are_choices,
    )
    strategy: StrategyName | UserStrategy = Field(
        default="random",
        description="A built-in strategy, or your own class in your code base as "
        "package.module:Class (paper Fig. 5).",
    )
    strategy_options: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments for the strategy."
    )
    num_iterations: int = Field(
        default=20,
        ge=1,
        strict=True,
        description=f"Budget: number of trials (1 to {MAX_ITERATIONS}).",
    )
    budget: Budget = Field(
        default_factory=Budget,
        description="What the job may spend: trials (the same as num_iterations) and time "
        "(wall clock, e.g. 2h); the job ends at the first limit reached.",
    )
    loop: Literal["batch", "async"] | None = Field(
        default=None,
        description="batch: rounds of parallelism trials (reproducible); async: a new trial "
        "as soon as a worker is free. Default: async with early_stopping, else batch.",
    )
    early_stopping: EarlyStopping | None = Field(
        default=None, description="Stop poor trials early (asha, hyperband, median, pop)."
    )
    parallelism: int = Field(
        default=1,
        ge=1,
        le=MAX_PARALLELISM,
        strict=True,
        description=f"Trials that run at the same time (1 to {MAX_PARALLELISM}).",
    )
    min_parallelism: int | None = Field(
        default=None,
        ge=1,
        strict=True,
        description="Start with what the resource limiter has free between this many trials "
        "and parallelism, and grow as units free up (best effort); default: wait for all of "
        "parallelism.",
    )
    objective: Objective = Field(default_factory=Objective, description="Metric and direction.")
    objectives: list[ObjectiveEntry] | None = Field(
        default=None,
        description="Several objectives (at least 2): the job finds their Pareto front "
        "(ultron.spec.objectives); score() returns a dict holding each.",
    )
    constraints: list[Constraint] = Field(
        default_factory=list,
        description="Bounds on metrics score() returns ({metric, min, max}): trials outside "
        "them are marked infeasible and never the best.",
    )
    resources: Resources = Field(default_factory=Resources, description="Per-trial resources.")
    cluster: ClusterSpec = Field(
        default_factory=LocalCluster,
        description="Where trials run: local (default), address, kubernetes or slurm.",
    )
    retries: int = Field(
        default=2,
        ge=0,
        le=MAX_RETRIES,
        strict=True,
        description=f"Retries of a trial after an infrastructure failure (0 to {MAX_RETRIES}).",
    )
    max_failed_share: float = Field(
        default=0.5,
        ge=0,
        le=1,
        strict=True,
        description="The job fails when more than this share of its trials failed (user "
        "errors, crashes after all retries, timeouts); below it, failures are recorded.",
    )
    trial_timeout: float | None = Field(
        default=None,
        gt=0,
        le=MAX_TIMEOUT_S,
        strict=True,
        description="Seconds a trial may run before it is stopped (at most 30 days, 2592000).",
    )
    acquire_timeout: float = Field(
        default=600.0,
        ge=0,
        le=MAX_TIMEOUT_S,
        strict=True,
        description="Seconds to wait for resource units before failing (at most 30 days).",
    )
    cache: bool = Field(
        default=True,
        description="Answer a configuration already scored (same code base, data, model, "
        "objective metric and seed) from the score cache instead of training it again.",
    )
    storage: str = Field(
        default="ultron-runs", min_length=1, description="Where results go: a folder or a URL."
    )
    redis_url: str | None = Field(
        default=None, description="redis://host:port/db; default: an embedded Redis server."
    )
    tenant: str = Field(
        default="default",
        description="Who the job runs for: a name like a job id (letters, digits, '.', '_', "
        "'-', starting with a letter or digit, at most 128).",
    )
    data: DataSpec | None = Field(
        default=None,
        description="Data streamed to every trial by the job's tf.data service (see datamanager).",
    )
    warm_start: WarmStart | None = Field(
        default=None, description="Earlier jobs whose finished trials seed the strategy."
    )
    execution: Execution = Field(
        default_factory=Execution,
        description="trials (default): a trial per configuration; hopper: model hopper "
        "parallelism over data partitioned across the workers (see Execution).",
    )

    @model_validator(mode="before")
    @classmethod
    def _paper_keys(cls, data: Any) -> Any:
        """The paper's Fig. 2 keys posted straight to the flow (its HTTP POST of a spec)."""
        if not isinstance(data, dict) or not set(data) & PAPER_KEY_NAMES:
            return data
        mapped, _, issues = from_paper(data)
        if issues:
            raise rule_error(issues[0].rule, issues[0].fix)
        return mapped

    _first_objective = model_validator(mode="before")(mirror_first_objective)
    _objectives = field_validator("objectives")(check_objectives)
    _constraints = field_validator("constraints")(check_constraints)
    _one_trial_budget = model_validator(mode="before")(one_trial_budget)
    _trials_once = field_validator("budget")(check_trials_once)
    _sane_budget = field_validator("num_iterations")(check_num_iterations)
    _known_strategy = field_validator("strategy", mode="before")(check_strategy_name)
    _finite_options = field_validator("strategy_options")(check_strategy_options)
    _model_path = field_validator("model")(check_model_path)
    _code_exists = field_validator("code")(check_code_location)

    @field_validator("data")
    @classmethod
    def _data_url(cls, value: DataSpec | None, info: ValidationInfo) -> DataSpec | None:
        if value is None or "://" in value.url or Path(value.url).is_absolute():
            return value
        base_dir = Path((info.context or {}).get("base_dir", "."))
        return value.model_copy(update={"url": str((base_dir / value.url).resolve())})

    # What execution: hopper cannot combine with (the fields it reads come before it).
    _execution_fits = field_validator("execution")(
        lambda value, info: check_execution(value, info.data)
    )

    _numbers_not_bool = field_validator(
        "seed",
        "num_iterations",
        "parallelism",
        "min_parallelism",
        "retries",
        "max_failed_share",
        "trial_timeout",
        "acquire_timeout",
        mode="before",
    )(not_a_bool)

    @field_validator("min_parallelism")
    @classmethod
    def _min_fits(cls, value: int | None, info: ValidationInfo) -> int | None:
        most = info.data.get("parallelism")
        if value is not None and isinstance(most, int) and value > most:
            raise rule_error(
                f"it must be between 1 and parallelism ({most})",
                f"set min_parallelism to {most} or less, or raise parallelism",
            )
        return value

    @field_validator("search_space", mode="before")
    @classmethod
    def _lists_are_choices(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {name: as_entry(entry) for name, entry in value.items()}
        return value

    @field_validator("search_space")
    @classmethod
    def _not_empty(cls, value: dict[str, DomainSpec]) -> dict[str, DomainSpec]:
        if not value:
            raise rule_error(
                "the search space must name at least one hyper-parameter",
                "add an entry such as lr: {type: loguniform, low: 1.0e-4, high: 1.0e-1}",
            )
        check_conditions(value)
        return value

    @field_validator("tenant")
    @classmethod
    def _tenant_name(cls, value: str) -> str:
        # A tenant names Redis keys, limits and folders as a job id does: the same rule.
        try:
            return check_job_id(value)
        except SpecError as exc:
            rule = exc.issues[0].rule.replace("a job id", "a tenant name", 1)
            raise rule_error(rule, "use a plain name such as team-a or ml-research") from None

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        schemes = ("redis://", "rediss://", "unix://", "redis+sentinel://", "rediss+sentinel://")
        if value is not None and not value.startswith(schemes):
            raise rule_error(
                "redis_url must start with redis://, rediss://, unix:// or redis+sentinel://",
                "write redis://host:6379/0 (redis+sentinel://host1:26379,host2:26379/mymaster/0 "
                "for Sentinel), or leave it out for the embedded server",
            )
        return value

    @model_validator(mode="after")
    def _loop_fits_stopping(self) -> JobSpec:
        if self.early_stopping is not None and self.loop == "batch":
            raise rule_error(
                "early stopping runs with the async loop", "remove loop: batch, or set loop: async"
            )
        pbt = self.early_stopping is not None and self.early_stopping.type == "pbt"
        if pbt and (self.num_iterations != self.parallelism or self.parallelism < 2):
            raise rule_error(
                f"pbt trains one fixed population of parallelism trials together, so "
                f"num_iterations ({self.num_iterations}) must equal parallelism "
                f"({self.parallelism}), at least 2",
                f"set num_iterations: {max(self.parallelism, 2)} and parallelism: "
                f"{max(self.parallelism, 2)} (the population size)",
            )
        return self

    @property
    def code_is_remote(self) -> bool:
        """Whether ``code`` is an object-store URL (fetched by containerize)."""
        return isinstance(self.code, str)

    @property
    def code_path(self) -> Path:
        """The code base on this machine's disk (a remote one once containerize fetched it)."""
        if isinstance(self.code, str):
            raise ValueError(f"the code base {self.code} is not fetched yet")
        return self.code

    @property
    def loop_kind(self) -> str:
        """The loop that runs: the spec's, or async with early stopping and batch otherwise."""
        return self.loop or ("async" if self.early_stopping else "batch")

    @property
    def space(self) -> SearchSpace:
        """The search space as :mod:`ultron.algorithms.space` domains."""
        return SearchSpace({name: entry.space_entry() for name, entry in self.search_space.items()})

    @property
    def units(self) -> float:
        """Resource-limiter units the whole job holds: parallelism x units per trial."""
        return self.resources.units_for(self.parallelism)

    def to_json(self) -> str:
        """The spec as JSON, in our own field names."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True)
