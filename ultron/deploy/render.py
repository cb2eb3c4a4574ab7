"""Render the manifests of ``infra/k8s/`` from :class:`~ultron.deploy.values.InfraValues`.

One file per piece, numbered so that ``kubectl apply -f infra/k8s/`` creates them in order
(the namespace first; the ``DaskCluster`` last, as it needs the Dask operator's CRDs).

Example:
    >>> import json
    >>> from ultron.deploy.values import InfraValues
    >>> template = json.loads(BASE_JOB_TEMPLATE.read_text())  # doctest: +SKIP
    >>> sorted(render(InfraValues(), template))  # doctest: +SKIP
    ['00-namespace.yaml', '10-redis.yaml', ...]
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from ultron.deploy import daskcluster, dataservice, prefect
from ultron.deploy.network import network_policies
from ultron.deploy.objects import Obj, labels
from ultron.deploy.redis import redis
from ultron.deploy.values import InfraValues

__all__ = ["BASE_JOB_TEMPLATE", "HEADER", "render", "stale_files", "write"]

BASE_JOB_TEMPLATE = Path("infra/prefect/kubernetes-base-job-template.json")
HEADER = "# Rendered by `ultron infra render` (ultron/deploy/): change the values, not this file."


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings (the scripts), so the files read as written."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


# Kubernetes' own admission (Pod Security Admission) refuses any pod of the namespace that
# breaks the "restricted" standard: one of a user's DaskCluster, or made by hand, as ours.
_POD_SECURITY = {
    f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "audit", "warn")
}


def _namespace(values: InfraValues) -> list[Obj]:
    meta = {"name": values.namespace, "labels": {**labels("namespace"), **_POD_SECURITY}}
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": meta}]


def documents(values: InfraValues, template: dict[str, Any]) -> dict[str, list[Obj]]:
    """Each file's name and its Kubernetes objects."""
    pieces: dict[str, Callable[[], list[Obj]]] = {
        "00-namespace.yaml": lambda: _namespace(values),
        # Right after the namespace: no trial pod runs before its policy holds.
        "05-network-policy.yaml": lambda: network_policies(values),
        "10-redis.yaml": lambda: redis(values),
        "20-prefect-server.yaml": lambda: prefect.server(values),
        "30-prefect-worker.yaml": lambda: prefect.worker(values, template),
        "40-job-rbac.yaml": lambda: daskcluster.job_rbac(values),
        "50-data-service.yaml": lambda: dataservice.data_service(values),
        "60-dask-cluster.yaml": lambda: [daskcluster.dask_cluster(values)],
    }
    if not values.data_service.enabled:
        del pieces["50-data-service.yaml"]
    if not values.network.enabled:
        del pieces["05-network-policy.yaml"]
    return {name: make() for name, make in pieces.items()}


def render(values: InfraValues, template: dict[str, Any]) -> dict[str, str]:
    """Each file's name and its text: the header, then its objects as YAML documents.

    Args:
        values: what varies between clusters.
        template: the Prefect base job template (``infra/prefect/...json``) the worker
            creates its work pool with.
    """
    out = {}
    for name, objects in documents(values, template).items():
        body = yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, width=100)
        out[name] = f"{HEADER}\n{body}"
    return out


def _ours(path: Path) -> bool:
    with path.open() as handle:
        return handle.readline().rstrip("\n") == HEADER


def stale_files(files: dict[str, str], out_dir: Path) -> list[str]:
    """The files of ``out_dir`` that differ from ``files``: missing, changed, or rendered
    earlier and no longer part of the rendering."""
    stale = [
        n
        for n, text in files.items()
        if not (out_dir / n).is_file() or (out_dir / n).read_text() != text
    ]
    extra = [p.name for p in sorted(out_dir.glob("*.yaml")) if p.name not in files and _ours(p)]
    return stale + extra


def write(files: dict[str, str], out_dir: Path) -> list[str]:
    """Write ``files`` into ``out_dir`` and remove the files an earlier rendering left there
    that this one does not make; returns the names written or removed."""
    out_dir.mkdir(parents=True, exist_ok=True)
    changed = stale_files(files, out_dir)
    for name in changed:
        if name in files:
            (out_dir / name).write_text(files[name])
        else:
            (out_dir / name).unlink()
    return changed
