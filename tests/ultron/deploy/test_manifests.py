"""Every manifest in ``infra/`` against the Kubernetes schema, offline.

kubernetes-validate ships the OpenAPI schemas of each Kubernetes release; we validate strictly
(an unknown field is an error, as ``kubectl apply --validate=strict`` makes it) against one
pinned release. The ``DaskCluster`` is a custom resource: it is checked against the schema of
the Dask operator's CRD, vendored in ``tests/data/crds/`` from the dask-kubernetes wheel.
"""

from __future__ import annotations

import copy
import functools
import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from prefect.utilities.templating import apply_values

from ultron.deploy import InfraValues, render

REPO = Path(__file__).resolve().parents[3]
K8S = REPO / "infra" / "k8s"
BASE_JOB_TEMPLATE = REPO / "infra" / "prefect" / "kubernetes-base-job-template.json"
CRDS = REPO / "tests" / "data" / "crds"
# The release the manifests must hold for: a current one that managed clusters run.
K8S_VERSION = "1.33.0"


def _strict(schema: Any) -> Any:
    """The CRD's schema with unknown fields refused, as the API server's strict field
    validation does (a structural schema prunes them unless it says to keep them)."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _strict(value) for key, value in schema.items()}
    keeps = schema.get("x-kubernetes-preserve-unknown-fields") or "additionalProperties" in schema
    if "properties" in schema and not keeps:
        out["additionalProperties"] = False
    return out


@functools.cache
def _crd_validator(kind: str) -> jsonschema.protocols.Validator:
    schema = json.loads((CRDS / f"{kind.lower()}.v1.json").read_text())["openAPIV3Schema"]
    return jsonschema.Draft7Validator(_strict(schema))


def validate(obj: dict[str, Any]) -> None:
    """Raise if ``obj`` breaks the schema of its kind (Kubernetes' or the Dask operator's)."""
    if obj["apiVersion"].startswith("kubernetes.dask.org/"):
        # The CRD's schema says nothing of metadata: the API server checks it, so do we.
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]},
            K8S_VERSION,
            strict=True,
        )
        # apiVersion, kind and metadata are every object's: a CRD's schema leaves them out.
        body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
        _crd_validator(obj["kind"]).validate(body)
        return
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def _objects(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


def flow_run_job(template: dict[str, Any]) -> dict[str, Any]:
    """The Job a Prefect Kubernetes worker makes from ``template`` for a flow run: the
    variables' defaults and a run's own values filled in with Prefect's templating, then the
    env and the command made lists as the worker does before it creates the Job
    (prefect-kubernetes 0.8's ``_populate_env_in_manifest`` and
    ``_populate_command_if_not_present``: it is not installed here, so they are written out)."""
    props = template["variables"]["properties"]
    values = {name: prop["default"] for name, prop in props.items() if "default" in prop}
    values |= {
        "name": "hpo-job-run",
        "command": "prefect flow-run execute",
        "env": {"PREFECT__FLOW_RUN_ID": "0f6c"},
        "labels": {"prefect.io/flow-run-id": "0f6c"},
    }
    job = apply_values(copy.deepcopy(template["job_configuration"]["job_manifest"]), values)
    box = job["spec"]["template"]["spec"]["containers"][0]
    run_env = [{"name": k, "value": v} for k, v in values["env"].items()]
    if isinstance(box.get("env"), list):  # hard-coded: the run's env goes in front, and wins
        names = set(values["env"])
        box["env"] = run_env + [e for e in box["env"] if e["name"] not in names]
    else:
        box["env"] = run_env
    if isinstance(box.get("args"), str):
        box["args"] = shlex.split(box["args"])
    return dict(job)


def _rendered(values: InfraValues) -> dict[str, list[dict[str, Any]]]:
    template = json.loads(BASE_JOB_TEMPLATE.read_text())
    return {name: _objects(text) for name, text in render(values, template).items()}


# Every YAML file under infra/, not only k8s/: a manifest added anywhere there is checked too.
@pytest.mark.parametrize(
    "path", sorted((REPO / "infra").rglob("*.y*ml")), ids=lambda p: p.relative_to(REPO).as_posix()
)
def test_every_manifest_in_infra_validates(path: Path) -> None:
    objects = _objects(path.read_text())
    assert objects, f"{path} holds no object"
    for obj in objects:
        validate(obj)


def test_the_rendered_manifests_are_among_them() -> None:
    assert {p.name for p in K8S.glob("*.yaml")} >= {"00-namespace.yaml", "60-dask-cluster.yaml"}


def test_base_job_template_makes_a_valid_job() -> None:
    job = flow_run_job(json.loads(BASE_JOB_TEMPLATE.read_text()))
    validate(job)
    limits = job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 0}


def test_the_workers_copy_of_the_template_makes_a_valid_job() -> None:
    """The template in the worker's ConfigMap: our namespace, account, image and Redis."""
    values = InfraValues.model_validate({"namespace": "hpo"})
    (config,) = [o for o in _rendered(values)["30-prefect-worker.yaml"] if o["kind"] == "ConfigMap"]
    job = flow_run_job(json.loads(config["data"]["base-job-template.json"]))
    validate(job)
    pod = job["spec"]["template"]["spec"]
    assert (job["metadata"]["namespace"], pod["serviceAccountName"]) == ("hpo", "ultron-job")
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["PREFECT__FLOW_RUN_ID"]["value"] == "0f6c"  # the run's env kept, ours added
    assert env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "ultron-redis"
    assert ".hpo.svc.cluster.local:26379" in env["REDIS_URL"]["value"]


def test_a_killed_masters_pod_is_started_again_and_runs_the_same_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Job of a flow run starts a new pod when its pod fails (killed, OOM-killed, evicted),
    never while the old one still terminates, and every pod of it runs the same flow run: the
    HPO job keeps its id (``hpo_job`` derives it from the flow run id) and resumes. Both the
    repository's template and the worker's copy."""
    from ultron.flows.hpo_job import _stable_job_id

    worker = [o for o in _rendered(InfraValues())["30-prefect-worker.yaml"] if "data" in o]
    templates = [json.loads(BASE_JOB_TEMPLATE.read_text())]
    templates += [json.loads(worker[0]["data"]["base-job-template.json"])]
    ids = set()
    for template in templates:
        job = flow_run_job(template)
        validate(job)
        spec = job["spec"]
        assert spec["backoffLimit"] >= 1  # a failed pod is replaced by a new one
        assert spec["podReplacementPolicy"] == "Failed"  # after the old one is gone
        assert (spec["parallelism"], spec["completions"]) == (1, 1)  # one pod at a time
        pod = spec["template"]["spec"]
        assert pod["restartPolicy"] == "Never"  # a new pod, on any node
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        monkeypatch.setenv("PREFECT__FLOW_RUN_ID", env["PREFECT__FLOW_RUN_ID"])
        ids |= {_stable_job_id("digits"), _stable_job_id("digits")}  # a first pod, a second
    assert ids == {"digits-0f6c"}
    props = templates[0]["variables"]["properties"]["backoff_limit"]
    assert props["minimum"] == 0 and props["description"]  # a run or deployment may change it


VARIANTS = {
    "postgres-cpu": {
        "prefect": {"database": "postgres"},
        "storage_class": "fast",
        "dask": {"worker_gpus": 0, "node_selector": {"pool": "cpu"}},
    },
    "many-gpus": {"namespace": "team-a", "dask": {"worker_gpus": 8, "workers": 4}},
    "minio-no-data-service": {
        "data_service": {"enabled": False},
        "network": {
            "object_store": [{"cidr": "10.0.5.0/24", "exclude": ["10.0.5.1/32"], "ports": [9000]}]
        },
    },
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_rendered_variants_validate(name: str) -> None:
    for objects in _rendered(InfraValues.model_validate(VARIANTS[name])).values():
        for obj in objects:
            validate(obj)


def test_validation_catches_a_bad_manifest() -> None:
    """The checks above can fail: a misspelt field and a wrong type are caught."""
    (deployment,) = [
        o for o in _rendered(InfraValues())["20-prefect-server.yaml"] if o["kind"] == "Deployment"
    ]
    bad = copy.deepcopy(deployment)
    bad["spec"]["replica"] = 1
    with pytest.raises(kubernetes_validate.ValidationError, match="replica"):
        validate(bad)
    bad = copy.deepcopy(deployment)
    bad["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "api"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(bad)
    cluster = _rendered(InfraValues())["60-dask-cluster.yaml"][0]
    cluster["spec"]["worker"]["replica"] = 2
    with pytest.raises(jsonschema.ValidationError, match="replica"):
        validate(cluster)


def test_scripts_parse() -> None:
    """The shell scripts (Redis, sentinels) and Python programs (data service) the
    containers run are at least well-formed."""
    objects = [o for docs in _rendered(InfraValues()).values() for o in docs]
    scripts = [
        text
        for o in objects
        if o["kind"] == "ConfigMap"
        for name, text in o["data"].items()
        if name.endswith(".sh")
    ]
    assert len(scripts) == 2
    for text in scripts:
        subprocess.run(["sh", "-n"], input=text, text=True, check=True)
    programs = [
        c["command"][2]
        for o in objects
        if o["kind"] in ("Deployment", "StatefulSet")
        for c in o["spec"]["template"]["spec"]["containers"]
        if c.get("command", [])[:2] == ["python", "-c"]
    ]
    assert len(programs) == 2
    for code in programs:
        compile(code, "<container>", "exec")
