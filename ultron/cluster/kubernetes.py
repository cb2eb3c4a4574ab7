"""The ``kubernetes`` backend: a Dask cluster made by the Dask Kubernetes operator.

:func:`kube_cluster_spec` is pure: it builds the ``DaskCluster`` resource that
:func:`kube_cluster` hands to dask-kubernetes' ``KubeCluster`` (so it can be read and checked
without an API server). One worker pod holds what its trials need, from ``resources``: CPU,
memory and ``nvidia.com/gpu`` as requests equal to limits (the Guaranteed class: a trial is
neither starved nor evicted first). A trial of a fraction of a GPU (``gpu: 0.25``) shares a
whole-GPU pod with the trials that fit on it (four, here): Kubernetes hands out whole GPUs. The
cluster adapts between ``cluster.min_workers`` and the pods that ``parallelism`` trials fill.

A hopper job (``execution: hopper``) does not adapt: its cluster has one worker group of one pod
per partition (:func:`partition_worker_groups`), whose worker holds ``partition-<k>: 1``. The
operator runs each worker pod as a Deployment of one replica, so a lost pod is replaced by one
with the same arguments, which fetches the partition again.

dask-kubernetes is optional (the ``kubernetes`` extra): it is imported on first use.
"""

from __future__ import annotations

import copy
import hashlib
import math
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ultron.cluster.partitions import worker_args as partition_args
from ultron.deploy.security import restrict
from ultron.errors import ConfigIssue, SpecError, UltronError
from ultron.spec.cluster import KubernetesCluster
from ultron.spec.job import JobSpec
from ultron.spec.sections import Resources

__all__ = [
    "WorkerShape",
    "cluster_name",
    "kube_cluster",
    "kube_cluster_spec",
    "partition_worker_groups",
    "worker_shape",
]

EXTRA = "pip install 'ultron-automl[kubernetes]'"
# A worker pod's Dask dashboard; the operator's scheduler service expects these ports.
_WORKER_COMMAND = ["dask", "worker"]
_SCHEDULER_ARGS = ["dask", "scheduler", "--host", "0.0.0.0"]
# The scheduler only keeps the books: small, and never on a GPU.
_SCHEDULER_RESOURCES = {"requests": {"cpu": "500m", "memory": "1Gi"}}
# A DaskCluster whose scheduler idled this long (its job died without closing it) is deleted.
_IDLE_TIMEOUT_S = 900


@dataclass(frozen=True)
class WorkerShape:
    """What one worker pod is: how many trials it runs at once, and its GPUs.

    Attributes:
        trials: trials at once (the worker's threads).
        gpus: ``nvidia.com/gpu`` of the pod, 0 without GPUs.
        gpu_resource: the ``GPU`` resource the worker advertises to Dask (trials ask
            ``resources.gpu`` each), 0 without GPUs.
    """

    trials: int
    gpus: int
    gpu_resource: float


def worker_shape(resources: Resources) -> WorkerShape:
    """The pod for trials of ``resources``: one trial per pod, or, for a fraction of a GPU,
    as many trials as fit on one GPU.

    Example:
        >>> worker_shape(Resources(gpu=2))
        WorkerShape(trials=1, gpus=2, gpu_resource=2.0)
    """
    gpu = float(resources.gpu)
    if gpu <= 0:
        return WorkerShape(1, 0, 0.0)
    if gpu >= 1:
        return WorkerShape(1, math.ceil(gpu), float(math.ceil(gpu)))
    # 1e-9: 1 / (1/3) is 2.9999999999999996 in floats, and three thirds do fit.
    return WorkerShape(max(1, math.floor(1 / gpu + 1e-9)), 1, 1.0)


def _pod_shape(spec: JobSpec) -> WorkerShape:
    """The worker pod of ``spec``'s job: :func:`worker_shape`, but a hopper job's worker runs one
    sub-epoch at a time (its partition's), so its pod holds one, with whole GPUs."""
    shape = worker_shape(spec.resources)
    return WorkerShape(1, shape.gpus, float(shape.gpus)) if spec.execution.hopper else shape


def _quantity_times(quantity: str, times: int) -> str:
    """``times`` the Kubernetes quantity ``quantity`` (bytes when it must be multiplied)."""
    from dask.utils import parse_bytes

    return quantity if times == 1 else str(parse_bytes(quantity) * times)


def pod_resources(resources: Resources, shape: WorkerShape) -> dict[str, dict[str, str]]:
    """Requests and limits of a worker pod: CPU, memory and ``nvidia.com/gpu``, as strings."""
    amounts = {"cpu": f"{resources.cpu * shape.trials:g}"}
    if resources.memory is not None:
        amounts["memory"] = _quantity_times(resources.memory, shape.trials)
    if shape.gpus:
        amounts["nvidia.com/gpu"] = str(shape.gpus)
    return {"requests": dict(amounts), "limits": dict(amounts)}


def cluster_name(job_id: str) -> str:
    """A name of the job's DaskCluster that Kubernetes accepts (an RFC 1035 label, short enough
    for the names the operator derives from it), the same on every resume of the job.

    Example:
        >>> cluster_name("My_Job.v2")
        'ultron-my-job-v2-57ff1672'
    """
    plain = re.sub(r"[^a-z0-9-]+", "-", job_id.lower()).strip("-")[:24].strip("-")
    digest = hashlib.sha256(job_id.encode()).hexdigest()[:8]
    return f"ultron-{plain}-{digest}" if plain else f"ultron-{digest}"


def adapt_bounds(spec: JobSpec, cluster: KubernetesCluster) -> tuple[int, int]:
    """Worker pods kept at least (``min_workers``) and at most (what ``parallelism`` fills)."""
    most = math.ceil(spec.parallelism / worker_shape(spec.resources).trials)
    return min(cluster.min_workers, most), most


def _kubernetes(spec: JobSpec) -> KubernetesCluster:
    cluster = spec.cluster
    if not isinstance(cluster, KubernetesCluster):
        raise TypeError(f"cluster.type is {cluster.type!r}, not 'kubernetes'")
    if cluster.image is None:
        issue = ConfigIssue(
            "cluster.image",
            None,
            "the kubernetes backend needs the workers' image, and containerize built none",
            "set cluster.registry (containerize then builds and pushes the job's image) or "
            "cluster.image (an image that holds ultron and your code)",
        )
        raise SpecError([issue])
    return cluster


def _operator() -> ModuleType:
    """``dask_kubernetes.operator``, or an error naming the extra that brings it."""
    try:
        import dask_kubernetes.operator as operator
    except ImportError as exc:
        raise UltronError(
            f"cluster.type 'kubernetes' needs dask-kubernetes, which is not installed ({exc}). "
            f"Fix: {EXTRA}"
        ) from None
    return operator


def kube_cluster_spec(spec: JobSpec, name: str) -> dict[str, Any]:
    """The ``DaskCluster`` resource of a job's cluster (dask-kubernetes' ``make_cluster_spec``,
    completed): the image, the pods' resources, environment, service account and node
    selector, ``min_workers`` workers to start with (none for a hopper job: its workers are
    :func:`partition_worker_groups`), and the pods held to least privilege
    (:func:`ultron.deploy.security.restrict`).

    Raises:
        SpecError: no image (``cluster.image`` unset and containerize built none).
        UltronError: dask-kubernetes is not installed.
    """
    cluster = _kubernetes(spec)
    shape = _pod_shape(spec)
    command = [*_WORKER_COMMAND, "--nthreads", str(shape.trials)]
    if shape.gpus and not spec.execution.hopper:  # a hopper worker's are its group's
        command += ["--resources", f"GPU={shape.gpu_resource:g}"]
    body: dict[str, Any] = _operator().make_cluster_spec(
        name=name,
        image=cluster.image,
        n_workers=0 if spec.execution.hopper else adapt_bounds(spec, cluster)[0],
        resources=pod_resources(spec.resources, shape),
        env=dict(cluster.env),
        worker_command=command,
        idle_timeout=_IDLE_TIMEOUT_S,
    )
    worker = body["spec"]["worker"]["spec"]
    scheduler = body["spec"]["scheduler"]["spec"]
    (scheduler_container,) = scheduler["containers"]
    scheduler_container["args"] = list(_SCHEDULER_ARGS)
    # make_cluster_spec gives the scheduler the workers' resources: it would hold a GPU too.
    scheduler_container["resources"] = {k: dict(v) for k, v in _SCHEDULER_RESOURCES.items()}
    # A trial whose worker is lost fails at once, and ultron retries it from its checkpoint
    # (Dask would rerun it from scratch).
    scheduler_container["env"] = [
        *(scheduler_container["env"] or []),
        {"name": "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES", "value": "0"},
    ]
    if cluster.service_account:
        worker["serviceAccountName"] = cluster.service_account
        scheduler["serviceAccountName"] = cluster.service_account
    if cluster.node_selector:
        worker["nodeSelector"] = dict(cluster.node_selector)
    # Users' code runs in these pods: a non-root user, no capabilities, a read-only root
    # (scratch in /tmp and the home), no Kubernetes API token (infra/k8s's pods alike).
    body["spec"]["worker"]["spec"] = restrict(worker)
    body["spec"]["scheduler"]["spec"] = restrict(scheduler)
    return body


def partition_worker_groups(spec: JobSpec, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A hopper job's worker groups, by name (``partition-<k>``): each one pod of the cluster's
    worker pod (``body``, from :func:`kube_cluster_spec`) whose worker holds ``partition-<k>``
    (and its GPUs), for ``KubeCluster.add_worker_group(name, custom_spec=...)``.

    Example:
        >>> spec = JobSpec.model_validate({
        ...     "name": "x", "code": ".", "model": "m:M", "search_space": {"a": [1]},
        ...     "parallelism": 2, "data": {"url": "s3://b/d/", "format": "numpy"},
        ...     "execution": {"mode": "hopper", "epochs": 1},
        ...     "cluster": {"type": "kubernetes", "image": "img"}})
        >>> groups = partition_worker_groups(spec, kube_cluster_spec(spec, "ultron-x"))
        >>> sorted(groups), groups["partition-1"]["replicas"]
        (['partition-0', 'partition-1'], 1)
        >>> groups["partition-1"]["spec"]["containers"][0]["args"][-2:]
        ['--resources', 'partition-1=1']
    """
    shape = _pod_shape(spec)
    others = {"GPU": shape.gpu_resource} if shape.gpus else {}
    groups = {}
    for k in range(spec.parallelism):
        group = copy.deepcopy(body["spec"]["worker"])
        group["replicas"] = 1
        (container,) = group["spec"]["containers"]
        container["args"] = [*container["args"], *partition_args(k, others)]
        groups[f"partition-{k}"] = group
    return groups


def _check_api_server(namespace: str) -> None:
    """One request to the Kubernetes API server, so that a machine without credentials or
    without a reachable server fails with one clear error (and no half-made cluster)."""
    import kr8s  # comes with dask-kubernetes

    try:
        kr8s.api(namespace=namespace).version()
    except Exception as exc:
        raise UltronError(
            "cluster.type 'kubernetes' needs a Kubernetes API server that this process reaches "
            f"with its credentials, and none answered ({type(exc).__name__}: {str(exc)[:200]}). "
            "Fix: run the job in the cluster (a pod with a service account, e.g. the "
            "hpo-job-k8s deployment) or point KUBECONFIG at the cluster's kubeconfig"
        ) from exc


def kube_cluster(spec: JobSpec, job_id: str) -> Any:
    """Create (or, on a resume, connect to) the job's ``KubeCluster`` and make it adaptive
    between ``cluster.min_workers`` and the workers ``parallelism`` trials fill.

    Raises:
        SpecError: no image (``cluster.image`` unset and containerize built none).
        UltronError: dask-kubernetes is missing, no API server answers, or the cluster could
            not be made (no Dask operator, no rights in the namespace): the cause is chained.
    """
    cluster = _kubernetes(spec)
    body = kube_cluster_spec(spec, cluster_name(job_id))
    operator = _operator()
    _check_api_server(cluster.namespace)
    try:
        kube = operator.KubeCluster(
            custom_cluster_spec=body,
            namespace=cluster.namespace,
            shutdown_on_close=True,
            quiet=True,
        )
    except Exception as exc:
        raise UltronError(
            f"the Dask cluster {body['metadata']['name']} could not be made in namespace "
            f"{cluster.namespace!r} ({type(exc).__name__}: {str(exc)[:200]}). Fix: install the "
            "Dask Kubernetes operator there, and let this pod's service account manage "
            "daskclusters, daskworkergroups and daskautoscalers (kubernetes.dask.org), pods "
            "and services (infra/)"
        ) from exc
    try:
        if spec.execution.hopper:
            _add_partition_groups(kube, partition_worker_groups(spec, body))
        else:
            minimum, maximum = adapt_bounds(spec, cluster)
            kube.adapt(minimum=minimum, maximum=maximum)
    except BaseException:
        kube.close()
        raise
    return kube


def _add_partition_groups(kube: Any, groups: dict[str, dict[str, Any]]) -> None:
    """Add a hopper job's worker groups; those a resumed job's cluster has already stay."""
    import kr8s

    for name, group in groups.items():
        try:
            kube.add_worker_group(name, custom_spec=group)
        except kr8s.ServerError as exc:
            response = getattr(exc, "response", None)
            if getattr(response, "status_code", None) != 409:  # 409: it exists (a resume)
                raise
