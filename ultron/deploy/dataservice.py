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

from ultron.deploy.objects import Obj, claim, container, deployment, service, statefulset
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


def _dispatcher(values: InfraValues, volumes: list[Obj]) -> Obj:
    s = values.data_service
    env = [
        {"name": "ULTRON_HOME", "value": HOME},
        {"name": "PORT", "value": str(s.dispatcher_port)},
    ]
    box = container(
        "dispatcher", s.image, values.image_pull_policy, command=["python", "-c", _DISPATCHER_CODE],
        ports={"grpc": s.dispatcher_port}, mounts={"home": HOME}, env=env,
        probe={"tcpSocket": {"port": "grpc"}, "periodSeconds": 10},
    )  # fmt: skip
    # recreate: one dispatcher at a time owns the journal.
    return deployment(_DISPATCHER, values.namespace, [box], recreate=True, volumes=volumes)


def _workers(values: InfraValues, volumes: list[Obj]) -> Obj:
    s, ns = values.data_service, values.namespace
    dispatcher = f"{_DISPATCHER}.{ns}.svc.cluster.local:{s.dispatcher_port}"
    env: list[Obj] = [
        {"name": "ULTRON_HOME", "value": HOME},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "PORT", "value": str(s.worker_port)},
        # The address the dispatcher hands to readers: this pod's name in the headless Service.
        {
            "name": "ADDRESS",
            "value": f"$(POD_NAME).{_WORKER}.{ns}.svc.cluster.local:{s.worker_port}",
        },
        {"name": "DISPATCHER", "value": dispatcher},
    ]
    box = container(
        "worker", s.image, values.image_pull_policy, command=["python", "-c", _WORKER_CODE],
        ports={"grpc": s.worker_port}, env=env, mounts={"home": HOME},
        probe={"tcpSocket": {"port": "grpc"}, "periodSeconds": 10},
    )  # fmt: skip
    return statefulset(_WORKER, ns, [box], s.workers, parallel=True, volumes=volumes)


def data_service(values: InfraValues) -> list[Obj]:
    """The shared volume, the dispatcher and the workers, with their Services."""
    s, ns = values.data_service, values.namespace
    pvc = claim("ultron-home", ns, s.shared_storage, values.storage_class, access="ReadWriteMany")
    volumes = [{"name": "home", "persistentVolumeClaim": {"claimName": "ultron-home"}}]
    return [
        pvc,
        _dispatcher(values, volumes),
        service(_DISPATCHER, ns, _DISPATCHER, {"grpc": s.dispatcher_port}),
        service(_WORKER, ns, _WORKER, {"grpc": s.worker_port}, headless=True),
        _workers(values, volumes),
    ]
