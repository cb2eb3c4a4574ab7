"""Task 1 of a job: build the trial environment from the user's code base (paper V-B) and check
that the model class loads in it."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from ultron.containerize.environment import TrialEnvironment, build_environment
from ultron.containerize.modelcheck import check_model
from ultron.errors import ConfigIssue, SpecError
from ultron.paths import ultron_home
from ultron.spec.cluster import KubernetesCluster
from ultron.spec.job import JobSpec
from ultron.usercode import import_paths

__all__ = ["containerize"]


@task(name="containerize", task_run_name="containerize-{job_id}", cache_policy=NONE)
def containerize(spec: JobSpec, job_id: str) -> TrialEnvironment:
    """A virtual environment layered over the installed base, with the user's package in it;
    for ``cluster.type: kubernetes`` without ``cluster.image``, also the job's OCI image, built
    and pushed to ``cluster.registry`` (an :class:`~ultron.containerize.image.ImageEnvironment`).

    Both are cached by content: a second job with the same code reuses them. The spec's
    ``model`` is then imported in the environment (:func:`check_model`): a missing class or a
    wrong ``score`` signature fails the job here, before any resource is taken.
    """
    logger = get_run_logger()
    env = build_environment(spec.code, cache_dir=ultron_home())
    verb = "reused" if env.reused else "built"
    logger.info("%s trial environment %s (code %s)", verb, env.root, env.code_hash[:12])
    if not spec.execution.hopper:  # a hopper model has train_epoch (checked by the flow)
        check_model(env.python, import_paths(env.source), spec.model)
    cluster = spec.cluster
    if not isinstance(cluster, KubernetesCluster) or cluster.image is not None:
        return env
    return _with_job_image(spec, env, cluster)


def _with_job_image(
    spec: JobSpec, env: TrialEnvironment, cluster: KubernetesCluster
) -> TrialEnvironment:
    """``env`` with the job's image, built and pushed unless the registry has its tag."""
    import dataclasses

    from ultron.containerize.image import ImageEnvironment, build_job_image

    registry = cluster.registry
    if registry is None:
        raise SpecError(
            [
                ConfigIssue(
                    "cluster.registry",
                    None,
                    "a kubernetes job without cluster.image needs a registry to push its "
                    "image to, one the cluster's nodes can pull from",
                    "set cluster.registry (e.g. registry.example.com/hpo), or cluster.image "
                    "to an image that holds your code",
                )
            ]
        )
    image = build_job_image(
        spec.code,
        registry=registry,
        base_image=cluster.base_image,
        work_dir=ultron_home() / "images",
    )
    verb = "reused" if image.reused else "built and pushed"
    get_run_logger().info("%s the job's image %s", verb, image.reference)
    fields = {f.name: getattr(env, f.name) for f in dataclasses.fields(env)}
    return ImageEnvironment(**fields, image=image)
