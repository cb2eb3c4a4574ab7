"""Task 1 of a job: build the trial environment from the user's code base (paper V-B)."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from ultron.containerize.environment import TrialEnvironment, build_environment
from ultron.services.paths import ultron_home
from ultron.spec.job import JobSpec

__all__ = ["containerize"]


@task(name="containerize", task_run_name="containerize-{job_id}", cache_policy=NONE)
def containerize(spec: JobSpec, job_id: str) -> TrialEnvironment:
    """A virtual environment layered over the installed base, with the user's package in it.

    Cached by the hash of the code base: a second job with the same code reuses it.
    """
    logger = get_run_logger()
    env = build_environment(spec.code, cache_dir=ultron_home())
    verb = "reused" if env.reused else "built"
    logger.info("%s trial environment %s (code %s)", verb, env.root, env.code_hash[:12])
    return env
