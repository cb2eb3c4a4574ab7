"""The kubernetes backend: the DaskCluster it would create, checked offline with the real
dask-kubernetes ``make_cluster_spec`` and the operator's own CRD schema; and, marked ``k8s``,
a real ``KubeCluster`` where a Kubernetes API server with the Dask operator answers."""

from __future__ import annotations

import socket
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from ultron.cluster.kubernetes import (
    adapt_bounds,
    cluster_name,
    kube_cluster,
    kube_cluster_spec,
    partition_worker_groups,
    worker_shape,
)
from ultron.errors import SpecError, UltronError
from ultron.spec.cluster import KubernetesCluster
from ultron.spec.job import JobSpec
from ultron.spec.loader import load_spec

pytest.importorskip("dask_kubernetes", reason="needs the kubernetes extra")

TOY = Path(__file__).parents[2] / "data" / "toy"
IMAGE = "registry.example.com/hpo/ultron-toy:3f2a9c"


def _spec(
    resources: dict[str, Any], parallelism: int = 4, hopper: bool = False, **cluster: Any
) -> JobSpec:
    fields = {
        "name": "kube",
        "code": str(TOY),
        "model": "toy_model:Quadratic",
        "search_space": {"x": {"type": "uniform", "low": 0.0, "high": 1.0}},
        "parallelism": parallelism,
        "resources": resources,
        "cluster": {"type": "kubernetes", "image": IMAGE, **cluster},
    }
    if hopper:  # model hopper parallelism: one worker per partition
        fields["execution"] = {"mode": "hopper", "epochs": 2}
        fields["data"] = {"url": "s3://bucket/corpus/", "format": "numpy"}
    return load_spec(fields)


def _containers(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    (worker,) = body["spec"]["worker"]["spec"]["containers"]
    (scheduler,) = body["spec"]["scheduler"]["spec"]["containers"]
    return worker, scheduler


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container["env"] or []}


def _crd_schema(kind: str = "daskcluster") -> dict[str, Any]:
    """The schema of ``kind`` that ships with the operator (the API server checks this)."""
    import dask_kubernetes

    crd = (
        Path(dask_kubernetes.__file__).parent
        / f"operator/deployment/helm/dask-kubernetes-operator/crds/{kind}.yaml"
    )
    (version,) = yaml.safe_load(crd.read_text())["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def test_a_gpu_job_gets_one_gpu_pod_per_trial_with_its_settings() -> None:
    spec = _spec(
        {"cpu": 2, "memory": "4Gi", "gpu": 1},
        namespace="hpo",
        service_account="ultron-worker",
        node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        env={"WANDB_MODE": "offline"},
        min_workers=1,
    )
    body = kube_cluster_spec(spec, cluster_name("kube-1a2b"))
    worker, scheduler = _containers(body)

    assert (body["kind"], body["metadata"]["name"]) == ("DaskCluster", cluster_name("kube-1a2b"))
    assert worker["image"] == scheduler["image"] == IMAGE
    per_pod = {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}
    assert worker["resources"] == {"requests": per_pod, "limits": per_pod}
    args = worker["args"]
    assert args[:2] == ["dask", "worker"]
    assert args[args.index("--nthreads") + 1] == "1"
    assert args[args.index("--resources") + 1] == "GPU=1"
    # HOME: the pod's emptyDir (a read-only root filesystem; ultron.deploy.security).
    assert _env(worker) == {"HOME": "/home/ultron", "WANDB_MODE": "offline"}
    pod = body["spec"]["worker"]["spec"]
    assert pod["serviceAccountName"] == "ultron-worker"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert body["spec"]["worker"]["replicas"] == 1  # min_workers to start with
    assert adapt_bounds(spec, spec.cluster) == (1, 4)  # type: ignore[arg-type]
    # The scheduler holds no GPU, runs anywhere, and fails a lost worker's trial at once.
    assert "nvidia.com/gpu" not in str(scheduler["resources"])
    assert "nodeSelector" not in body["spec"]["scheduler"]["spec"]
    assert body["spec"]["scheduler"]["spec"]["serviceAccountName"] == "ultron-worker"
    assert scheduler["args"][:2] == ["dask", "scheduler"]
    assert _env(scheduler)["DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES"] == "0"


def test_trials_of_a_quarter_gpu_share_one_gpu_pod() -> None:
    spec = _spec({"cpu": 1, "memory": "2Gi", "gpu": 0.25}, parallelism=6)
    worker, _ = _containers(kube_cluster_spec(spec, "ultron-share"))

    assert worker_shape(spec.resources).trials == 4
    per_pod = {"cpu": "4", "memory": str(4 * 2 * 2**30), "nvidia.com/gpu": "1"}
    assert worker["resources"]["limits"] == per_pod
    args = worker["args"]
    assert args[args.index("--nthreads") + 1] == "4"
    assert args[args.index("--resources") + 1] == "GPU=1"  # four trials of GPU=0.25 fit
    assert adapt_bounds(spec, spec.cluster) == (0, 2)  # type: ignore[arg-type]  # 6 trials


def test_a_cpu_job_asks_no_gpu() -> None:
    spec = _spec({"cpu": 0.5}, parallelism=3)
    worker, _ = _containers(kube_cluster_spec(spec, "ultron-cpu"))

    assert worker["resources"]["limits"] == {"cpu": "0.5"}
    assert "--resources" not in worker["args"]
    assert adapt_bounds(spec, spec.cluster) == (0, 3)  # type: ignore[arg-type]


def test_the_cluster_validates_against_the_operators_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    spec = _spec(
        {"cpu": 2, "memory": "4Gi", "gpu": 2},
        service_account="ultron-worker",
        node_selector={"pool": "gpu"},
        env={"A": "1"},
    )
    body = kube_cluster_spec(spec, cluster_name("schema"))
    jsonschema.validate(body, _crd_schema())
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    for part in ("worker", "scheduler"):  # each pod template is a valid Pod spec
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
        kubernetes_validate.validate(
            {**pod, "spec": body["spec"][part]["spec"]}, "1.33", strict=True
        )


def test_a_hopper_job_has_one_worker_group_per_partition_holding_it() -> None:
    spec = _spec(
        {"cpu": 2, "memory": "4Gi", "gpu": 0.5}, parallelism=3, hopper=True,
        service_account="ultron-worker", node_selector={"pool": "gpu"}, min_workers=2,
    )  # fmt: skip
    body = kube_cluster_spec(spec, cluster_name("hop"))
    default, _ = _containers(body)
    assert body["spec"]["worker"]["replicas"] == 0  # no worker alike: each holds a partition
    assert "--resources" not in default["args"]

    groups = partition_worker_groups(spec, body)
    assert list(groups) == ["partition-0", "partition-1", "partition-2"]
    for k, group in enumerate(groups.values()):
        assert group["replicas"] == 1
        (container,) = group["spec"]["containers"]
        args = container["args"]
        assert args[args.index("--resources") + 1] == f"GPU=1,partition-{k}=1"
        # One sub-epoch at a time (its partition's): one thread, one trial's CPU and memory,
        # a whole GPU though the trials asked for half of one.
        assert args[args.index("--nthreads") + 1] == "1"
        per_pod = {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}
        assert container["resources"] == {"requests": per_pod, "limits": per_pod}
        # The cluster's pod otherwise: account, placement, least privilege.
        assert group["spec"] == {**body["spec"]["worker"]["spec"], "containers": [container]}
        assert group["spec"]["serviceAccountName"] == "ultron-worker"
        assert group["spec"]["automountServiceAccountToken"] is False

    jsonschema = pytest.importorskip("jsonschema")
    resource = {
        "apiVersion": "kubernetes.dask.org/v1",
        "kind": "DaskWorkerGroup",
        "metadata": {"name": f"{cluster_name('hop')}-partition-0"},
        "spec": {"cluster": cluster_name("hop"), "worker": groups["partition-0"]},
    }  # as KubeCluster.add_worker_group(name, custom_spec=...) makes it
    jsonschema.validate(resource, _crd_schema("daskworkergroup"))
    jsonschema.validate(body, _crd_schema())


def test_names_are_kubernetes_labels_and_stable() -> None:
    for job_id in ("Quickstart_2026.11.24", "a" * 128, "x", "--"):
        name = cluster_name(job_id)
        assert name == cluster_name(job_id)
        assert KubernetesCluster(type="kubernetes", namespace=name[:63]).namespace == name
        assert len(name) <= 40  # the operator adds -scheduler, -default-worker-<hash>
    assert cluster_name("job-a") != cluster_name("job-b")


def test_no_image_is_a_spec_error_naming_the_field() -> None:
    spec = _spec({"cpu": 1}, image=None)
    with pytest.raises(SpecError) as info:
        kube_cluster_spec(spec, "ultron-x")
    assert "cluster.image" in str(info.value) and "cluster.registry" in str(info.value)


def test_without_dask_kubernetes_the_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # sys.modules entries of None make the import fail as if the package were not installed.
    for name in [m for m in sys.modules if m.startswith("dask_kubernetes")] or ["dask_kubernetes"]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(UltronError) as info:
        kube_cluster_spec(_spec({"cpu": 1}), "ultron-x")
    assert "ultron-automl[kubernetes]" in str(info.value)


def test_no_api_server_is_one_clear_error_and_no_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as sock:  # an API server address where nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(config))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    from dask_kubernetes.operator.kubecluster import kubecluster

    before = len(kubecluster.KubeCluster._instances)

    with pytest.raises(UltronError) as info:
        kube_cluster(_spec({"cpu": 1}), "no-server")

    assert "needs a Kubernetes API server" in str(info.value) and "KUBECONFIG" in str(info.value)
    assert len(kubecluster.KubeCluster._instances) == before  # nothing left to reap at exit


def _api_server_with_operator() -> str | None:
    """Why no real KubeCluster can be made here, or None when it can."""
    try:
        from kubernetes import client, config

        config.load_kube_config()
        client.VersionApi().get_code(_request_timeout=5)
        crds = client.ApiextensionsV1Api().list_custom_resource_definition(_request_timeout=5)
    except Exception as exc:
        return f"no Kubernetes API server answers ({type(exc).__name__}: {str(exc)[:100]})"
    if not any(c.metadata.name == "daskclusters.kubernetes.dask.org" for c in crds.items):
        return "the Kubernetes cluster has no Dask operator (daskclusters CRD)"
    return None


@pytest.mark.k8s
def test_a_real_kube_cluster_runs_a_task_and_is_deleted() -> None:
    reason = _api_server_with_operator()
    if reason:
        pytest.skip(reason)
    from distributed import Client

    # A public image with dask (the job's own image needs a registry: see the containerize tests).
    spec = _spec({"cpu": 0.5, "memory": "512Mi"}, parallelism=1, image="ghcr.io/dask/dask:latest")
    cluster = kube_cluster(spec, f"k8s-test-{uuid.uuid4().hex[:6]}")
    try:
        with Client(cluster) as client:
            assert client.submit(sum, [1, 2, 3]).result(timeout=300) == 6
    finally:
        cluster.close()


@pytest.mark.k8s
def test_a_real_hopper_kube_cluster_has_one_worker_per_partition() -> None:
    reason = _api_server_with_operator()
    if reason:
        pytest.skip(reason)
    from distributed import Client

    spec = _spec(
        {"cpu": 0.5, "memory": "512Mi"}, parallelism=2, hopper=True,
        image="ghcr.io/dask/dask:latest",
    )  # fmt: skip
    cluster = kube_cluster(spec, f"k8s-hopper-{uuid.uuid4().hex[:6]}")
    try:
        with Client(cluster) as client:
            client.wait_for_workers(2, timeout=300)
            workers = client.scheduler_info()["workers"].values()
            held = sorted(name for worker in workers for name in worker["resources"])
            assert held == ["partition-0", "partition-1"]
            on_one = client.submit(sum, [1, 2], resources={"partition-1": 1}, pure=False)
            assert on_one.result(timeout=300) == 3
    finally:
        cluster.close()
