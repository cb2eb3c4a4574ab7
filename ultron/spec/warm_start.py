"""The ``warm_start`` section of a job spec: earlier jobs whose finished trials seed the search.

``warm_start: {jobs: [ID, ...]}`` hands the completed trials of those jobs to the new job's
strategy as observations before it proposes anything (:mod:`ultron.master.warm_start` reads
and tells them; :mod:`ultron.algorithms.warm_start` fits them into the new space). They are a
prior only: never trials of the new job, never answers of its score cache, never its results.

Example:
    >>> WarmStart(jobs=["digits-a1b2", "digits-c3d4"]).jobs
    ['digits-a1b2', 'digits-c3d4']
    >>> WarmStart.model_validate({"jobs": []})
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for WarmStart
    jobs
      it must name at least one earlier job [type=ultron_rule, input_value=[], input_type=list]
"""

from __future__ import annotations

from pydantic import Field, field_validator

from ultron.errors import SpecError
from ultron.paths import check_job_id
from ultron.spec.strict import Strict, rule_error

__all__ = ["MAX_WARM_START_JOBS", "WarmStart"]

MAX_WARM_START_JOBS = 100
"""At most this many earlier jobs: past it a list is a mistake, not a prior."""


class WarmStart(Strict):
    """Earlier jobs of the same tenant whose finished trials the strategy is told first."""

    jobs: list[str] = Field(
        description="Ids of earlier jobs (as `ultron jobs` lists them) whose completed trials "
        "the strategy is told before it proposes anything; configurations outside this job's "
        "space are projected into it or dropped.",
    )

    @field_validator("jobs")
    @classmethod
    def _job_ids(cls, value: list[str]) -> list[str]:
        if not value:
            raise rule_error(
                "it must name at least one earlier job",
                "list job ids as `ultron jobs` shows them, or remove warm_start",
            )
        if len(value) > MAX_WARM_START_JOBS:
            raise rule_error(
                f"it names {len(value)} jobs; at most {MAX_WARM_START_JOBS} may seed a search",
                "keep the jobs whose space and model are closest to this one",
            )
        for job_id in value:
            try:
                check_job_id(job_id)
            except SpecError as exc:
                raise rule_error(
                    f"{job_id!r} is not a job id: {exc.issues[0].rule}", exc.issues[0].fix
                ) from None
        repeated = sorted({job_id for job_id in value if value.count(job_id) > 1})
        if repeated:
            raise rule_error(
                f"it names {', '.join(map(repr, repeated))} more than once, which would tell "
                "the same trials twice",
                "name each job once",
            )
        return value
