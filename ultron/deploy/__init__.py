"""The Kubernetes manifests of ``infra/k8s/``, rendered from typed values (``ultron infra
render``): the Prefect server and the worker of a Kubernetes work pool, Redis with Sentinel,
the job pods' RBAC for the Dask operator, a standing tf.data service and a ``DaskCluster``."""

from ultron.deploy.render import BASE_JOB_TEMPLATE, render, stale_files, write
from ultron.deploy.values import InfraValues, load_values

__all__ = ["BASE_JOB_TEMPLATE", "InfraValues", "load_values", "render", "stale_files", "write"]
