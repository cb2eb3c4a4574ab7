"""Small builders of Kubernetes objects as plain dictionaries (what ``kubectl apply`` reads).

Every object gets the namespace and the labels ``app.kubernetes.io/part-of: ultron`` and
``app.kubernetes.io/component: <component>``; selectors use the component label alone.

Example:
    >>> service("prefect-server", "hpo", "prefect-server", {"api": 4200})["spec"]["ports"]
    [{'name': 'api', 'port': 4200, 'targetPort': 'api'}]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ultron.deploy.security import GID, UID, Obj, restrict

__all__ = [
    "COMPONENT",
    "claim",
    "container",
    "deployment",
    "labels",
    "meta",
    "pod_template",
    "rbac",
    "secret_env",
    "service",
    "statefulset",
    "volume_claim",
]

COMPONENT = "app.kubernetes.io/component"


def labels(component: str) -> dict[str, str]:
    """The labels of every object of ``component``."""
    return {"app.kubernetes.io/part-of": "ultron", COMPONENT: component}


def meta(name: str, namespace: str, component: str) -> Obj:
    """``metadata`` of a namespaced object."""
    return {"name": name, "namespace": namespace, "labels": labels(component)}


def service(
    name: str, namespace: str, component: str, ports: dict[str, int], *, headless: bool = False
) -> Obj:
    """A Service in front of the pods of ``component``; ``ports`` maps a port name to its
    number, which the containers declare under the same name."""
    spec: Obj = {
        "selector": {COMPONENT: component},
        "ports": [
            {"name": port, "port": number, "targetPort": port} for port, number in ports.items()
        ],
    }
    if headless:
        # Stable DNS names per pod (pod-0.name...), and readiness does not gate them: Redis
        # replicas and sentinels find each other before they are ready.
        spec |= {"clusterIP": "None", "publishNotReadyAddresses": True}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(name, namespace, component),
        "spec": spec,
    }


def container(
    name: str,
    image: str,
    pull: str,
    *,
    command: list[str] | None = None,
    args: list[str] | None = None,
    ports: dict[str, int] | None = None,
    env: list[Obj] | None = None,
    resources: Obj | None = None,
    mounts: dict[str, str] | None = None,
    probe: Obj | None = None,
) -> Obj:
    """A container; ``mounts`` maps a volume name to its mount path, ``probe`` is its
    readiness probe."""
    spec: Obj = {"name": name, "image": image, "imagePullPolicy": pull}
    optional = {
        "command": command,
        "args": args,
        "ports": [{"name": p, "containerPort": n} for p, n in (ports or {}).items()],
        "env": env,
        "resources": resources,
        "volumeMounts": [{"name": v, "mountPath": p} for v, p in (mounts or {}).items()],
        "readinessProbe": probe,
    }
    return spec | {key: value for key, value in optional.items() if value}


def secret_env(name: str, secret: str, key: str = "password") -> Obj:
    """An environment variable read from a Secret."""
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def pod_template(
    component: str,
    containers: list[Obj],
    *,
    user: int = UID,
    group: int = GID,
    writable: Mapping[str, str] | None = None,
    api_access: bool = False,
    **spec: Any,
) -> Obj:
    """A pod template of ``component``, held to least privilege
    (:func:`~ultron.deploy.security.restrict`: ``user``, ``group``, the ``writable``
    folders beyond ``/tmp`` and the home, ``api_access``); ``spec`` adds pod fields
    (volumes, serviceAccountName)."""
    pod = {"containers": containers, **spec}
    pod = restrict(pod, user=user, group=group, writable=writable, api_access=api_access)
    return {"metadata": {"labels": labels(component)}, "spec": pod}


def volume_claim(
    name: str, size: str, storage_class: str | None, *, access: str = "ReadWriteOnce"
) -> Obj:
    """The spec of a PersistentVolumeClaim (in a StatefulSet's ``volumeClaimTemplates`` or
    a claim of its own)."""
    spec: Obj = {"accessModes": [access], "resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {"metadata": {"name": name}, "spec": spec}


def rbac(name: str, namespace: str, component: str, rules: list[Obj]) -> list[Obj]:
    """A ServiceAccount ``name`` and a Role and RoleBinding that give it ``rules``."""
    group = "rbac.authorization.k8s.io"
    subject = {"kind": "ServiceAccount", "name": name, "namespace": namespace}
    metadata = meta(name, namespace, component)
    role_ref = {"apiGroup": group, "kind": "Role", "name": name}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata},
        {"apiVersion": f"{group}/v1", "kind": "Role", "metadata": metadata, "rules": rules},
        {"apiVersion": f"{group}/v1", "kind": "RoleBinding", "metadata": metadata,
         "subjects": [subject], "roleRef": role_ref},
    ]  # fmt: skip


def claim(name: str, namespace: str, size: str, storage_class: str | None, **kw: str) -> Obj:
    """A PersistentVolumeClaim of its own (``kw``: ``access``)."""
    spec = volume_claim(name, size, storage_class, **kw)["spec"]
    metadata = meta(name, namespace, name)
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata, "spec": spec}


def deployment(
    name: str, namespace: str, containers: list[Obj], *, recreate: bool = False, **pod: Any
) -> Obj:
    """A Deployment of one pod of component ``name``; ``recreate``: the old pod stops before
    the new one starts (it holds a volume or a journal only one may write)."""
    spec: Obj = {"replicas": 1}
    if recreate:
        spec["strategy"] = {"type": "Recreate"}
    spec |= {
        "selector": {"matchLabels": {COMPONENT: name}},
        "template": pod_template(name, containers, **pod),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(name, namespace, name),
        "spec": spec,
    }


def statefulset(
    name: str,
    namespace: str,
    containers: list[Obj],
    replicas: int,
    *,
    claims: list[Obj] | None = None,
    parallel: bool = False,
    **pod: Any,
) -> Obj:
    """A StatefulSet of component ``name`` behind the headless Service of the same name;
    ``claims`` are its volume claim templates, ``parallel`` starts its pods all at once."""
    spec: Obj = {
        "serviceName": name,
        "replicas": replicas,
        "selector": {"matchLabels": {COMPONENT: name}},
        "template": pod_template(name, containers, **pod),
    }
    if parallel:
        spec["podManagementPolicy"] = "Parallel"
    if claims:
        spec["volumeClaimTemplates"] = claims
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": meta(name, namespace, name),
        "spec": spec,
    }
