"""``ultron.run``: run an HPO job from Python."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ultron.master.results import HPOResult
from ultron.master.strategy import check_options
from ultron.spec.job import JobSpec
from ultron.spec.loader import load_spec

__all__ = ["prefect_defaults", "run"]

# Ephemeral Prefect (no server) takes over 20 s to start on a fresh database on a small
# machine, past its default startup timeout; telemetry needs a network some machines lack.
_PREFECT_DEFAULTS = {
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_API_SERVICES_TELEMETRY_ENABLED": "false",
}


def prefect_defaults() -> None:
    """Set Prefect settings that suit running jobs locally, unless the user set them."""
    for name, value in _PREFECT_DEFAULTS.items():
        os.environ.setdefault(name, value)


def run(
    spec: str | Path | Mapping[str, Any] | JobSpec,
    *,
    job_id: str | None = None,
    **overrides: Any,
) -> HPOResult:
    """Run an HPO job to the end and return its result.

    Args:
        spec: a path to a YAML/JSON spec, the spec as a mapping, or a :class:`JobSpec`.
        job_id: a stable id; the id of an unfinished job resumes it.
        **overrides: spec fields to replace, e.g. ``num_iterations=4``.

    Raises:
        SpecError: the spec has problems (all of them are listed); nothing was started.

    Example:
        >>> result = ultron.run("examples/quickstart/job.yaml")        # doctest: +SKIP
        >>> result.best_config, result.best_score                      # doctest: +SKIP
    """
    prefect_defaults()
    from ultron.flows.hpo_job import hpo_job

    job = spec if isinstance(spec, JobSpec) else load_spec(spec)
    if overrides:
        job = load_spec({**job.model_dump(mode="json"), **overrides})
    check_options(job)  # a built-in's options are checked before Prefect starts
    summary = hpo_job(job.model_dump(mode="json"), job_id=job_id)
    return HPOResult.from_summary(summary)
