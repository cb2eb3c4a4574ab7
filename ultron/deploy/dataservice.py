"""A standing tf.data service: a dispatcher (Deployment and Service ``ultron-data-dispatcher``)
and workers (a StatefulSet behind a headless Service, so each worker has the stable address
the dispatcher hands to readers), all on a shared volume mounted as ``ULTRON_HOME``.

The servers are the ones a job's data service runs (:class:`ultron.datamanager.service.
LocalDataService`): the dispatcher journals its state (fault-tolerant mode) and forgets a
reader's job after 30 s. The workers read the staged shards from the shared volume, so the
pods that stage data must mount it at the same path.

Example:
    >>> from ultron.deploy.values import InfraValues
    >>> [d["kind"] for d in data_service(InfraValues())]
    ['PersistentVolumeClaim', 'Deployment', 'Service', 'Service', 'StatefulSet']
"""

from __future__ import annotations

from ultron.deploy.objects import Obj, container, meta, pod_template, service, volume_claim
from ultron.deploy.values import InfraValues

__all__ = ["HOME", "data_service"]

HOME = "/var/lib/ultron"
_DISPATCHER = "ultron-data-dispatcher"
_WORKER = "ultron-data-worker"

_DISPATCHER_CODE = """\
import os
import tensorflow as tf
svc = tf.data.experimental.service
journal = os.path.join(os.environ["ULTRON_HOME"], "data-service", "journal")
svc.DispatchServer(svc.DispatcherConfig(
    port=int(os.environ["PORT"]), work_dir=journal, fault_tolerant_mode=True,
    job_gc_check_interval_ms=15000, job_gc_timeout_ms=30000)).join()
"""

_WORKER_CODE = """\
import os
import tensorflow as tf
svc = tf.data.experimental.service
port = int(os.environ["PORT"])
svc.WorkerServer(svc.WorkerConfig(
    dispatcher_address=os.environ["DISPATCHER"], worker_address=os.environ["ADDRESS"],
    port=port)).join()
"""


def data_service(values: InfraValues) -> list[Obj]:
    """The shared volume, the dispatcher and the workers, with their Services."""
    s, ns = values.data_service, values.namespace
    claim = volume_claim(
        "ultron-home", s.shared_storage, values.storage_class, access="ReadWriteMany"
    )
    pvc: Obj = {"apiVersion": "v1", "kind": "PersistentVolumeClaim"} | claim
    pvc["metadata"] = meta("ultron-home", ns, "ultron-home")
    home = [{"name": "ULTRON_HOME", "value": HOME}]
    volumes = [{"name": "home", "persistentVolumeClaim": {"claimName": "ultron-home"}}]
    pull, mounts = values.image_pull_policy, {"home": HOME}
    dispatcher = container(
        "dispatcher", s.image, pull, command=["python", "-c", _DISPATCHER_CODE],
        ports={"grpc": s.dispatcher_port}, mounts=mounts,
        env=[*home, {"name": "PORT", "value": str(s.dispatcher_port)}],
        probe={"tcpSocket": {"port": "grpc"}, "periodSeconds": 10},
    )  # fmt: skip
    worker_host = f"$(POD_NAME).{_WORKER}.{ns}.svc.cluster.local"
    worker_env: list[Obj] = [
        *home,
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "PORT", "value": str(s.worker_port)},
        {"name": "ADDRESS", "value": f"{worker_host}:{s.worker_port}"},
        {
            "name": "DISPATCHER",
            "value": f"{_DISPATCHER}.{ns}.svc.cluster.local:{s.dispatcher_port}",
        },
    ]
    worker = container(
        "worker", s.image, pull, command=["python", "-c", _WORKER_CODE],
        ports={"grpc": s.worker_port}, env=worker_env, mounts=mounts,
        probe={"tcpSocket": {"port": "grpc"}, "periodSeconds": 10},
    )  # fmt: skip
    selector = {"app.kubernetes.io/component": _DISPATCHER}
    return [
        pvc,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta(_DISPATCHER, ns, _DISPATCHER),
            "spec": {
                "replicas": 1,
                # Recreate: one dispatcher at a time owns the journal.
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": selector},
                "template": pod_template(_DISPATCHER, [dispatcher], volumes=volumes),
            },
        },
        service(_DISPATCHER, ns, _DISPATCHER, {"grpc": s.dispatcher_port}),
        service(_WORKER, ns, _WORKER, {"grpc": s.worker_port}, headless=True),
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": meta(_WORKER, ns, _WORKER),
            "spec": {
                "serviceName": _WORKER,
                "replicas": s.workers,
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": {"app.kubernetes.io/component": _WORKER}},
                "template": pod_template(_WORKER, [worker], volumes=volumes),
            },
        },
    ]
