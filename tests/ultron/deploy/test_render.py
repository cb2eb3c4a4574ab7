"""``ultron infra render``: the committed manifests are the defaults' rendering, values flow
into every object, and a bad values file gets one clean error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner, Result

from ultron.cli.main import app
from ultron.deploy import InfraValues, load_values, render
from ultron.errors import SpecError

REPO = Path(__file__).resolve().parents[3]
K8S = REPO / "infra" / "k8s"
TEMPLATE_PATH = REPO / "infra" / "prefect" / "kubernetes-base-job-template.json"
TEMPLATE = json.loads(TEMPLATE_PATH.read_text())
runner = CliRunner()


def _ultron(*args: str) -> Result:
    return runner.invoke(app, ["infra", *args], env={"COLUMNS": "200"})


def _objects(values: InfraValues) -> list[dict[str, Any]]:
    return [
        doc for text in render(values, TEMPLATE).values() for doc in yaml.safe_load_all(text) if doc
    ]


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return [value] if isinstance(value, str) else []


def test_committed_manifests_are_the_defaults_rendering() -> None:
    result = _ultron(
        "render", "--check", "--out", str(K8S), "--base-job-template", str(TEMPLATE_PATH)
    )
    assert result.exit_code == 0, f"infra/k8s is stale, run `ultron infra render`:\n{result.output}"
    rendered = render(InfraValues(), TEMPLATE)
    assert sorted(p.name for p in K8S.glob("*.yaml")) == sorted(rendered)
    for name, text in rendered.items():
        assert (K8S / name).read_text() == text, name


def test_namespace_flows_everywhere() -> None:
    objects = _objects(InfraValues.model_validate({"namespace": "team-a"}))
    for obj in objects:
        where = obj["metadata"]["name"] if obj["kind"] == "Namespace" else obj["metadata"]
        assert (where if isinstance(where, str) else where["namespace"]) == "team-a", obj["kind"]
        for subject in obj.get("subjects", []):
            assert subject["namespace"] == "team-a"
    text = "\n".join(s for obj in objects for s in _strings(obj))
    assert ".team-a.svc.cluster.local" in text
    # No address still names the default namespace (service DNS names, the template's).
    assert ".ultron.svc" not in text and '"default": "ultron"' not in text
    assert '"default": "team-a"' in text  # the worker's base job template


def _dask_worker(values: dict[str, Any]) -> dict[str, Any]:
    (cluster,) = [
        o for o in _objects(InfraValues.model_validate(values)) if o["kind"] == "DaskCluster"
    ]
    return dict(cluster["spec"]["worker"])


def test_gpu_limits_and_worker_resources() -> None:
    worker = _dask_worker({"dask": {"worker_gpus": 4, "workers": 3, "worker_memory": "64Gi"}})
    box = worker["spec"]["containers"][0]
    assert worker["replicas"] == 3
    assert box["resources"]["limits"] == {"cpu": "4", "memory": "64Gi", "nvidia.com/gpu": "4"}
    assert box["args"][-2:] == ["--resources", "GPU=4"]
    cpu = _dask_worker({"dask": {"worker_gpus": 0, "node_selector": {"pool": "cpu"}}})
    assert "nvidia.com/gpu" not in cpu["spec"]["containers"][0]["resources"]["limits"]
    assert "--resources" not in cpu["spec"]["containers"][0]["args"]
    assert cpu["spec"]["nodeSelector"] == {"pool": "cpu"}


def test_images_secrets_and_replicas_flow() -> None:
    values = InfraValues.model_validate(
        {
            "worker_image": "registry.example.com/ultron/worker:7",
            "redis": {"replicas": 5, "sentinels": 5, "password_secret": "redis-pw"},
            "prefect": {"database": "postgres", "postgres_password_secret": "pg-pw"},
            "data_service": {"workers": 6},
        }
    )
    objects = {(o["kind"], o["metadata"]["name"]): o for o in _objects(values)}
    assert objects["StatefulSet", "ultron-redis"]["spec"]["replicas"] == 5
    assert objects["StatefulSet", "ultron-data-worker"]["spec"]["replicas"] == 6
    assert ("PersistentVolumeClaim", "prefect-data") not in objects  # postgres instead of SQLite
    server = objects["Deployment", "prefect-server"]["spec"]["template"]["spec"]
    env = {e["name"]: e for e in server["containers"][0]["env"]}
    assert env["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "pg-pw"
    assert "@prefect-postgres:5432/" in env["PREFECT_API_DATABASE_CONNECTION_URL"]["value"]
    redis_env = objects["StatefulSet", "ultron-redis"]["spec"]["template"]["spec"]["containers"][0]
    (password,) = [e for e in redis_env["env"] if e["name"] == "REDIS_PASSWORD"]
    assert password["valueFrom"]["secretKeyRef"]["name"] == "redis-pw"
    # Every sentinel is in the jobs' REDIS_URL (the worker's base job template).
    assert "ultron-redis-sentinel-4.ultron-redis-sentinel" in json.dumps(list(objects.values()))
    images = {
        c["image"]
        for o in objects.values()
        if o["kind"] == "DaskCluster"
        for part in ("worker", "scheduler")
        for c in o["spec"][part]["spec"]["containers"]
    }
    assert images == {"registry.example.com/ultron/worker:7"}


def test_disabled_data_service_is_removed_from_the_folder(tmp_path: Path) -> None:
    (tmp_path / "notes.yaml").write_text("# mine, not rendered\n")
    assert (
        _ultron(
            "render", "--out", str(tmp_path), "--base-job-template", str(TEMPLATE_PATH)
        ).exit_code
        == 0
    )
    assert (tmp_path / "50-data-service.yaml").is_file()
    values = tmp_path / "values.yaml"
    values.write_text("data_service: {enabled: false}\n")
    args = [
        "--values",
        str(values),
        "--out",
        str(tmp_path),
        "--base-job-template",
        str(TEMPLATE_PATH),
    ]
    stale = _ultron("render", "--check", *args)
    assert stale.exit_code == 1 and "50-data-service.yaml" in stale.output
    assert _ultron("render", *args).exit_code == 0
    assert not (tmp_path / "50-data-service.yaml").exists()
    assert (tmp_path / "notes.yaml").is_file()  # not ours: left alone
    assert _ultron("render", "--check", *args).exit_code == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("namespace: Team_A\n", ["namespace", "'Team_A'", "Kubernetes name"]),
        ("dask: {worker_gpus: -1}\n", ["dask.worker_gpus", "-1", "greater than or equal to 0"]),
        ("redis: {storage: lots}\n", ["redis.storage", "lots", "Kubernetes quantity"]),
        ("[1, 2]\n", ["(top level)", "[1, 2]", "mapping of settings"]),
        (
            "redis: {pasword_secret: x}\n",
            ["redis.pasword_secret", "not a setting", "password_secret"],
        ),
    ],
)
def test_bad_values_name_field_value_rule_and_fix(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as caught:
        load_values(path)
    assert len(caught.value.issues) == 1 and caught.value.issues[0].fix
    result = _ultron("render", "--values", str(path), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2
    for part in expected:
        assert part in result.output
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()


def test_missing_base_job_template_is_named(tmp_path: Path) -> None:
    result = _ultron(
        "render", "--out", str(tmp_path), "--base-job-template", str(tmp_path / "no.json")
    )
    assert result.exit_code == 2
    assert "--base-job-template" in result.output and "Traceback" not in result.output


def test_the_jobs_redis_url_is_one_ultron_reads() -> None:
    """REDIS_URL as a job pod sees it (Kubernetes substitutes $(REDIS_PASSWORD)) names every
    sentinel, the master's name and both passwords to ultron's own parser."""
    from ultron.deploy.redis import redis_env
    from ultron.redis.client import parse_sentinel_url

    values = InfraValues.model_validate({"redis": {"sentinels": 5, "master_name": "hpo"}})
    env = {e["name"]: e for e in redis_env(values)}
    url = env["REDIS_URL"]["value"].replace("$(REDIS_PASSWORD)", "9f3a1c")
    address = parse_sentinel_url(url)
    assert [host.split(".")[0] for host, _ in address.sentinels] == [
        f"ultron-redis-sentinel-{i}" for i in range(5)
    ]
    assert {port for _, port in address.sentinels} == {26379}
    assert address.service_name == "hpo"
    assert address.master_options["password"] == "9f3a1c"
    assert address.sentinel_options["password"] == "9f3a1c"
