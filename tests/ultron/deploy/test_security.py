"""Least privilege: every pod spec ultron ships or makes runs as a non-root user, without
privilege escalation or capabilities, with the default seccomp profile and a read-only root
filesystem (scratch on emptyDir volumes); the images run as that same non-root user.

The pod specs are found by walking every object for a ``containers`` list, whatever its kind:
a manifest added under ``infra/`` (any kind, any nesting) is checked without a change here.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from ultron.containerize.image import _CONTAINERFILE
from ultron.deploy import InfraValues, render
from ultron.deploy.prefect import job_template
from ultron.deploy.security import GID, HOME, UID, restrict


def _manifests_module() -> ModuleType:
    # pytest runs in importlib mode, so test folders are not packages to import from: load
    # the flow-run Job maker and the variants from the test that defines them, by path.
    path = Path(__file__).with_name("test_manifests.py")
    spec = importlib.util.spec_from_file_location("_deploy_manifests", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_manifests = _manifests_module()
VARIANTS, flow_run_job = _manifests.VARIANTS, _manifests.flow_run_job
REPO = Path(__file__).resolve().parents[3]
INFRA = REPO / "infra"
TEMPLATE = json.loads((INFRA / "prefect" / "kubernetes-base-job-template.json").read_text())
TOY = REPO / "tests" / "data" / "toy"
# Kinds that run pods: each must hold at least one pod spec, so the walk cannot miss one.
WORKLOADS = {"Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob",
             "DaskCluster", "DaskWorkerGroup", "DaskJob"}  # fmt: skip

Obj = dict[str, Any]


def pod_specs(node: Any) -> Iterator[Obj]:
    """Every pod spec in ``node``: each mapping with a ``containers`` list."""
    if isinstance(node, dict):
        if isinstance(node.get("containers"), list):
            yield node
        for value in node.values():
            yield from pod_specs(value)
    elif isinstance(node, list):
        for item in node:
            yield from pod_specs(item)


def problems(pod: Obj, claims: frozenset[str] = frozenset()) -> list[str]:
    """What in ``pod`` breaks least privilege; empty when nothing does."""
    found = []
    context = pod.get("securityContext") or {}
    if context.get("runAsNonRoot") is not True:
        found.append("pod: runAsNonRoot is not true")
    for field in ("runAsUser", "runAsGroup"):
        if not isinstance(context.get(field), int) or context[field] == 0:
            found.append(f"pod: {field} is {context.get(field)!r}, not a fixed non-root id")
    if (context.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        found.append("pod: seccompProfile is not RuntimeDefault")
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            found.append(f"pod: {field}")
    volumes = {v["name"] for v in pod.get("volumes", [])} | set(claims)
    for box in [*pod.get("initContainers", []), *pod["containers"]]:
        name, sc = box["name"], box.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation is not false")
        if sc.get("privileged") or sc.get("runAsUser") == 0 or sc.get("runAsNonRoot") is False:
            found.append(f"{name}: privileged or root")
        caps = sc.get("capabilities") or {}
        if "ALL" not in caps.get("drop", []) or caps.get("add"):
            found.append(f"{name}: capabilities not dropped (ALL)")
        if sc.get("readOnlyRootFilesystem") is not True:
            found.append(f"{name}: the root filesystem is writable")
        mounts = {m["mountPath"]: m["name"] for m in box.get("volumeMounts", [])}
        if "/tmp" not in mounts:
            found.append(f"{name}: no writable /tmp")
        missing = [v for v in mounts.values() if v not in volumes]
        found += [f"{name}: mounts {v!r}, no such volume" for v in missing]
    return found


def _checked(obj: Obj) -> int:
    """Assert every pod spec of ``obj`` holds; return how many there are."""
    templates = obj.get("spec", {}).get("volumeClaimTemplates", [])
    claims = frozenset(c["metadata"]["name"] for c in templates)
    pods = list(pod_specs(obj))
    if obj.get("kind") in WORKLOADS:
        assert pods, f"{obj['kind']} {obj['metadata'].get('name')}: no pod spec found"
    for pod in pods:
        assert not problems(pod, claims), (obj.get("kind"), obj["metadata"], problems(pod, claims))
    return len(pods)


def _rendered(values: InfraValues) -> list[Obj]:
    return [doc for text in render(values, TEMPLATE).values() for doc in yaml.safe_load_all(text)]


@pytest.mark.parametrize(
    "path", sorted(INFRA.rglob("*.y*ml")), ids=lambda p: p.relative_to(REPO).as_posix()
)
def test_every_pod_in_infra_is_least_privilege(path: Path) -> None:
    for obj in yaml.safe_load_all(path.read_text()):
        if obj is not None:
            _checked(obj)


def test_every_rendered_pod_is_least_privilege() -> None:
    """The defaults, the variants (PostgreSQL, CPU workers, another namespace) and the job
    pods a flow run gets from either base job template (ours, the worker's copy)."""
    pods = 0
    for values in [InfraValues(), *(InfraValues.model_validate(v) for v in VARIANTS.values())]:
        for obj in _rendered(values):
            pods += _checked(obj)
        for template in (TEMPLATE, job_template(values, TEMPLATE)):
            pods += _checked(flow_run_job(template))
    # redis, sentinel, prefect server, worker, data dispatcher and workers, dask worker and
    # scheduler, 2 job pods; the postgres variant adds one.
    assert pods >= 3 * 10


def test_the_namespace_admits_only_restricted_pods() -> None:
    """Pod Security Admission holds every pod of the namespace (ours, a job's, one made by
    hand) to the "restricted" standard, which the pods above meet."""
    (namespace,) = [o for o in _rendered(InfraValues()) if o["kind"] == "Namespace"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_job_pods_have_a_home_and_their_label() -> None:
    """The worker's copy of the template sets HOME (the emptyDir) and labels the pod as the
    NetworkPolicy's ingress rule expects."""
    job = flow_run_job(job_template(InfraValues(), TEMPLATE))
    pod = job["spec"]["template"]
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "ultron-job"
    assert (
        pod["spec"]["securityContext"]["runAsUser"],
        pod["spec"]["securityContext"]["runAsGroup"],
    ) == (UID, GID)
    (box,) = pod["spec"]["containers"]
    assert {e["name"]: e.get("value") for e in box["env"]}["HOME"] == HOME
    assert {m["mountPath"] for m in box["volumeMounts"]} == {"/tmp", HOME}


def test_a_jobs_dask_cluster_is_least_privilege() -> None:
    pytest.importorskip("dask_kubernetes", reason="needs the kubernetes extra")
    from ultron.cluster.kubernetes import kube_cluster_spec
    from ultron.spec.loader import load_spec

    for resources in ({"cpu": 1}, {"cpu": 2, "memory": "4Gi", "gpu": 0.25}):
        spec = load_spec(
            {
                "name": "secure",
                "code": str(TOY),
                "model": "toy_model:Quadratic",
                "search_space": {"x": {"type": "uniform", "low": 0.0, "high": 1.0}},
                "resources": resources,
                "cluster": {"type": "kubernetes", "image": "r.example.com/ultron-job:1"},
            }
        )
        body = kube_cluster_spec(spec, "ultron-secure")
        assert _checked(body) == 2
        for part in ("worker", "scheduler"):  # users' code: no Kubernetes API token
            assert body["spec"][part]["spec"]["automountServiceAccountToken"] is False


def test_the_check_catches_each_breach() -> None:
    """The checks above can fail: each rule, broken alone, is named."""
    good = restrict({"containers": [{"name": "box", "image": "i"}]})
    assert problems(good) == []
    breaches = {
        "runAsNonRoot": lambda p: p["securityContext"].pop("runAsNonRoot"),
        "runAsUser": lambda p: p["securityContext"].update(runAsUser=0),
        "seccompProfile": lambda p: p["securityContext"].pop("seccompProfile"),
        "allowPrivilegeEscalation": lambda p: p["containers"][0].pop("securityContext"),
        "privileged": lambda p: p["containers"][0]["securityContext"].update(privileged=True),
        "capabilities": lambda p: p["containers"][0]["securityContext"].update(
            capabilities={"add": ["NET_ADMIN"], "drop": ["ALL"]}
        ),
        "root filesystem": lambda p: p["containers"][0]["securityContext"].update(
            readOnlyRootFilesystem=False
        ),
        "/tmp": lambda p: p["containers"][0]["volumeMounts"].pop(0),
        "no such volume": lambda p: p["volumes"].pop(),
        "hostNetwork": lambda p: p.update(hostNetwork=True),
    }
    for rule, breach in breaches.items():
        pod = copy.deepcopy(good)
        breach(pod)
        assert any(rule in found for found in problems(pod)), rule
    # A workload whose pod spec the walk cannot find fails too.
    with pytest.raises(AssertionError, match="no pod spec"):
        _checked({"kind": "Deployment", "metadata": {"name": "x"}, "spec": {}})


def _final_user(dockerfile: str) -> str:
    users = re.findall(r"^USER\s+(\S+)\s*$", dockerfile, flags=re.MULTILINE)
    assert users, "no USER: the image would run as root"
    return users[-1]


@pytest.mark.parametrize("name", ["worker-cpu.Dockerfile", "worker-cuda.Dockerfile"])
def test_the_worker_images_run_as_the_pods_user(name: str) -> None:
    text = (INFRA / "docker" / name).read_text()
    assert _final_user(text) == f"{UID}:{GID}"
    assert f"ENV HOME={HOME}" in text
    assert f"ultron:x:{UID}:{GID}:ultron:{HOME}:" in text  # the passwd entry


def test_a_jobs_image_runs_as_the_pods_user() -> None:
    """Root installs the user's package; the image then runs as the non-root user."""
    assert _final_user(_CONTAINERFILE) == f"{UID}:{GID}"
    assert _CONTAINERFILE.index("USER 0:0") < _CONTAINERFILE.index("pip install")
