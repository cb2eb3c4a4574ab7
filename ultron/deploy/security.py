"""Least privilege for every pod ultron runs on Kubernetes: the pod's and its containers'
``securityContext``, and the scratch volumes a read-only root filesystem leaves writable.

Every pod runs as a fixed non-root user (:data:`UID`, the ``USER`` of the images in
``infra/docker/``), with the runtime's default seccomp profile; every container drops all
Linux capabilities, cannot gain privileges (no setuid), and has a read-only root filesystem
with an ``emptyDir`` at ``/tmp`` and at :data:`HOME` (``HOME`` points there). Whatever else a
container writes is a volume of its own (Redis's ``/data``, the Prefect database); ``fsGroup``
makes those writable by the pod's group.

The manifests of ``infra/k8s/`` (:mod:`ultron.deploy.objects` applies :func:`restrict` to
every pod template), the job pods of the Prefect work pool (its base job template) and the
Dask clusters of jobs (:mod:`ultron.cluster.kubernetes`) all hold to it.

Example:
    >>> pod = restrict({"containers": [{"name": "redis", "image": "redis:7.4"}]})
    >>> pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsNonRoot"]
    (10001, True)
    >>> pod["containers"][0]["securityContext"]["capabilities"]
    {'drop': ['ALL']}
    >>> [m["mountPath"] for m in pod["containers"][0]["volumeMounts"]]
    ['/tmp', '/home/ultron']
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = [
    "GID",
    "HOME",
    "SCRATCH",
    "UID",
    "container_security_context",
    "pod_security_context",
    "restrict",
]

Obj = dict[str, Any]

UID = 10001
"""The user of ultron's images (``USER 10001:10001`` in ``infra/docker/``) and of its pods."""
GID = 10001
"""Its group; the pods' ``fsGroup``, so their volumes are writable by it."""
HOME = "/home/ultron"
"""The home folder of :data:`UID` in the images; an ``emptyDir`` in every pod."""
SCRATCH = {"tmp": "/tmp", "home": HOME}
"""The writable folders of every container (volume name: mount path), each an ``emptyDir``."""


def pod_security_context(user: int = UID, group: int = GID) -> Obj:
    """The pod's ``securityContext``: a non-root user and group, volumes owned by the group,
    the container runtime's default seccomp profile."""
    return {
        "runAsNonRoot": True,
        "runAsUser": user,
        "runAsGroup": group,
        "fsGroup": group,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> Obj:
    """A container's ``securityContext``: no privilege escalation, no capabilities, a
    read-only root filesystem."""
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }


def restrict(
    pod: Obj,
    *,
    user: int = UID,
    group: int = GID,
    writable: Mapping[str, str] | None = None,
    api_access: bool = False,
) -> Obj:
    """A copy of the pod spec ``pod`` held to least privilege (the module's rules).

    Args:
        pod: a pod spec (``containers``, perhaps ``initContainers`` and ``volumes``).
        user: the user every container runs as; an image's own user where its files need it
            (PostgreSQL's data folder).
        group: the group, also the ``fsGroup`` of the pod's volumes.
        writable: more folders the containers write, each an ``emptyDir`` (name: path),
            beyond :data:`SCRATCH`.
        api_access: mount the service account's token, for a pod that talks to the
            Kubernetes API (the Prefect worker, the job pods); others get none.

    Returns:
        The pod spec with its security contexts, scratch volumes and mounts, and ``HOME``
        set in every container whose environment does not set it.
    """
    out = copy.deepcopy(pod)
    scratch = {**SCRATCH, **(writable or {})}
    out["securityContext"] = pod_security_context(user, group)
    out["automountServiceAccountToken"] = api_access
    for box in [*out.get("initContainers", []), *out["containers"]]:
        box["securityContext"] = container_security_context()
        mounts = box.setdefault("volumeMounts", [])
        taken = {m["mountPath"] for m in mounts}
        mounts += [{"name": n, "mountPath": p} for n, p in scratch.items() if p not in taken]
        env = box.get("env") or []
        if not any(e.get("name") == "HOME" for e in env):
            box["env"] = [{"name": "HOME", "value": HOME}, *env]
    volumes = out.setdefault("volumes", [])
    named = {v["name"] for v in volumes}
    volumes += [{"name": n, "emptyDir": {}} for n in scratch if n not in named]
    return out
