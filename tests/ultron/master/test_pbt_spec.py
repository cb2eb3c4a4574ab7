"""A PBT job spec: the population is the parallelism, and the stopper's options are checked
before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from ultron.errors import SpecError
from ultron.master.strategy import check_options
from ultron.spec.job import JobSpec


def test_the_spec_refuses_a_population_that_is_not_the_parallelism_and_bad_options() -> None:
    spec = {
        "code": str(Path(__file__).parents[2] / "data" / "toy"),
        "model": "toy_model:Population",
        "search_space": {"lr": [0.1, 1.0]},
        "num_iterations": 6,
        "parallelism": 3,
        "early_stopping": {"type": "pbt", "max_resource": 4},
    }
    with pytest.raises(ValueError, match=r"num_iterations \(6\) must equal parallelism \(3\)"):
        JobSpec.model_validate(spec)
    with pytest.raises(ValueError, match="async loop"):
        JobSpec.model_validate({**spec, "num_iterations": 3, "loop": "batch"})
    job = JobSpec.model_validate({**spec, "num_iterations": 3})
    check_options(job)  # a population of 3, every 1 epoch (max_resource / 4)
    late = {**spec, "num_iterations": 3, "early_stopping": {**spec["early_stopping"]}}
    late["early_stopping"]["options"] = {"interval": 4}  # type: ignore[index]
    with pytest.raises(SpecError, match=r"interval is 4; it must be .* below max_resource \(4\)"):
        check_options(JobSpec.model_validate(late))  # before anything starts
