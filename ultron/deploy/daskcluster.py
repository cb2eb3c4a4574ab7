"""The Dask side: the role that lets the job pods create Dask clusters through the Dask
Kubernetes operator (``cluster: {type: kubernetes}``), and a standing ``DaskCluster`` of
workers for ``cluster: {type: address}``.

The operator itself (its CRDs and controller) is installed from upstream's Helm chart (see
``infra/README.md``); its resources are not in the Kubernetes schema, so the ``DaskCluster``
here is checked against the CRD's own schema (``tests/data/crds/``).

Example:
    >>> from ultron.deploy.values import InfraValues
    >>> values = InfraValues.model_validate({"dask": {"worker_gpus": 2}})
    >>> box = dask_cluster(values)["spec"]["worker"]["spec"]["containers"][0]
    >>> box["resources"]["limits"]["nvidia.com/gpu"], box["args"][-1]
    ('2', 'GPU=2')
"""

from __future__ import annotations

from ultron.deploy.objects import Obj, container, meta, rbac
from ultron.deploy.redis import redis_env
from ultron.deploy.security import restrict
from ultron.deploy.values import InfraValues

__all__ = ["CLUSTER_NAME", "dask_cluster", "job_rbac"]

CLUSTER_NAME = "ultron-workers"
_DASK_GROUP = "kubernetes.dask.org"


def job_rbac(values: InfraValues) -> list[Obj]:
    """The job pods' service account, allowed to make and remove Dask clusters (and to watch
    the pods and services the operator makes for them) in this namespace only."""
    rules = [
        {"apiGroups": [_DASK_GROUP],
         "resources": ["daskclusters", "daskworkergroups", "daskworkergroups/scale",
                       "daskautoscalers", "daskjobs"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["pods", "pods/log", "services"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list", "watch"]},
    ]  # fmt: skip
    name = values.dask.job_service_account
    return rbac(name, values.namespace, "ultron-job", rules)


def _worker(values: InfraValues) -> Obj:
    d = values.dask
    limits = {"cpu": d.worker_cpu, "memory": d.worker_memory}
    # One thread per worker: a worker runs one trial at a time, its trial process does the work.
    args = ["--name", "$(DASK_WORKER_NAME)", "--nthreads", "1",
            "--dashboard", "--dashboard-address", "8788"]  # fmt: skip
    if d.worker_gpus:
        limits["nvidia.com/gpu"] = str(d.worker_gpus)
        args += ["--resources", f"GPU={d.worker_gpus}"]
    box = container(
        "worker",
        values.worker_image,
        values.image_pull_policy,
        command=["dask", "worker"],
        args=args,
        env=redis_env(values),
        resources={"requests": limits, "limits": limits},
    )
    spec: Obj = {"containers": [box]}
    if d.node_selector:
        spec["nodeSelector"] = dict(d.node_selector)
    return {"replicas": d.workers, "spec": restrict(spec)}


def dask_cluster(values: InfraValues) -> Obj:
    """A ``DaskCluster``: its scheduler (Service ``ultron-workers-scheduler``, port 8786) and
    ``dask.workers`` workers, each with ``dask.worker_gpus`` GPUs advertised as the Dask
    resource ``GPU``."""
    ports = {"tcp-comm": 8786, "http-dashboard": 8787}
    scheduler = container(
        "scheduler",
        values.worker_image,
        values.image_pull_policy,
        command=["dask", "scheduler"],
        ports=ports,
        probe={"httpGet": {"port": "http-dashboard", "path": "/health"}},
    )
    selector = {"dask.org/cluster-name": CLUSTER_NAME, "dask.org/component": "scheduler"}
    service_ports = [
        {"name": name, "protocol": "TCP", "port": port, "targetPort": name}
        for name, port in ports.items()
    ]
    return {
        "apiVersion": f"{_DASK_GROUP}/v1",
        "kind": "DaskCluster",
        "metadata": meta(CLUSTER_NAME, values.namespace, "dask"),
        "spec": {
            "worker": _worker(values),
            "scheduler": {
                "spec": restrict({"containers": [scheduler]}),
                "service": {"type": "ClusterIP", "selector": selector, "ports": service_ports},
            },
        },
    }
