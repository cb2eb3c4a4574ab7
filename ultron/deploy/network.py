"""The NetworkPolicy of the trial pods: the Dask workers, where users' code runs.

It selects every Dask worker pod of the namespace by the label the Dask operator gives them
(``dask.org/component: worker``): the standing ``DaskCluster`` and the clusters jobs make. A
worker (and the trial processes it starts) may reach only

- the Dask schedulers (port 8786),
- Redis and its sentinels,
- the standing tf.data service, when it is rendered,
- the object store's networks and ports (``network.object_store``),
- the cluster's DNS;

and only the schedulers and the job pods (the master, ``app.kubernetes.io/component:
ultron-job``) may reach it. Kubernetes enforces it where the network plugin implements
NetworkPolicy (Calico, Cilium, ...); elsewhere it is accepted and has no effect.

Example:
    >>> from ultron.deploy.values import InfraValues
    >>> (policy,) = network_policies(InfraValues())
    >>> policy["spec"]["podSelector"], policy["spec"]["policyTypes"]
    ({'matchLabels': {'dask.org/component': 'worker'}}, ['Ingress', 'Egress'])
"""

from __future__ import annotations

from ultron.deploy.objects import COMPONENT, Obj, meta
from ultron.deploy.redis import SENTINEL_PORT
from ultron.deploy.values import InfraValues

__all__ = ["JOB_COMPONENT", "SCHEDULER_PORT", "network_policies"]

SCHEDULER_PORT = 8786
JOB_COMPONENT = "ultron-job"
"""The component label of the job pods (the Prefect work pool's base job template)."""
_DASK = "dask.org/component"


def _pods(labels: dict[str, str], *ports: int, protocol: str = "TCP") -> Obj:
    return {
        "to": [{"podSelector": {"matchLabels": labels}}],
        "ports": [{"protocol": protocol, "port": port} for port in ports],
    }


def _egress(values: InfraValues) -> list[Obj]:
    net = values.network
    dns = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": net.dns_namespace}},
        "podSelector": {"matchLabels": dict(net.dns_labels)},
    }
    rules = [
        _pods({_DASK: "scheduler"}, SCHEDULER_PORT),
        _pods({COMPONENT: "ultron-redis"}, 6379),
        _pods({COMPONENT: "ultron-redis-sentinel"}, SENTINEL_PORT),
        {"to": [dns], "ports": [{"protocol": p, "port": 53} for p in ("UDP", "TCP")]},
    ]
    if values.data_service.enabled:
        s = values.data_service
        rules += [
            _pods({COMPONENT: "ultron-data-dispatcher"}, s.dispatcher_port),
            _pods({COMPONENT: "ultron-data-worker"}, s.worker_port),
        ]
    for store in net.object_store:
        block: Obj = {"cidr": store.cidr}
        if store.exclude:
            block["except"] = list(store.exclude)
        ports = [{"protocol": "TCP", "port": port} for port in store.ports]
        rules.append({"to": [{"ipBlock": block}], "ports": ports})
    return rules


def network_policies(values: InfraValues) -> list[Obj]:
    """The trial pods' NetworkPolicy (none when ``network.enabled`` is false)."""
    if not values.network.enabled:
        return []
    ingress = [
        {
            "from": [
                {"podSelector": {"matchLabels": {_DASK: "scheduler"}}},
                {"podSelector": {"matchLabels": {COMPONENT: JOB_COMPONENT}}},
            ]
        }
    ]
    spec = {
        "podSelector": {"matchLabels": {_DASK: "worker"}},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": ingress,
        "egress": _egress(values),
    }
    return [
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": meta("ultron-trials", values.namespace, "ultron-trials"),
            "spec": spec,
        }
    ]
