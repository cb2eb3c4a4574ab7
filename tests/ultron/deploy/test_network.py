"""The trial pods' NetworkPolicy: it selects the pods the Dask operator makes for workers, and
each place it lets them reach (or be reached from) is a pod of the rendering, on a port that
pod serves. Its schema is checked with every manifest (test_manifests.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from ultron.deploy import InfraValues, load_values, render
from ultron.deploy.prefect import job_template
from ultron.errors import SpecError

REPO = Path(__file__).resolve().parents[3]
TEMPLATE = json.loads((REPO / "infra/prefect/kubernetes-base-job-template.json").read_text())

Obj = dict[str, Any]


def _objects(values: InfraValues) -> list[Obj]:
    texts = render(values, TEMPLATE).values()
    return [doc for text in texts for doc in yaml.safe_load_all(text) if doc]


def _policy(values: InfraValues) -> Obj:
    (policy,) = [o for o in _objects(values) if o["kind"] == "NetworkPolicy"]
    return policy


def _pods(values: InfraValues) -> list[tuple[dict[str, str], Obj]]:
    """The labels and spec of every pod the cluster runs: the rendered workloads, the pods
    the Dask operator makes of the standing DaskCluster (its own builders), and a job pod."""
    controller = pytest.importorskip(
        "dask_kubernetes.operator.controller.controller", reason="needs the kubernetes extra"
    )
    pods = []
    for obj in _objects(values):
        if obj["kind"] in ("Deployment", "StatefulSet"):
            template = obj["spec"]["template"]
            pods.append((template["metadata"]["labels"], template["spec"]))
        if obj["kind"] == "DaskCluster":
            name, spec = obj["metadata"]["name"], obj["spec"]
            made = [
                controller.build_scheduler_deployment_spec(name, spec["scheduler"]["spec"], {}, {}),
                controller.build_worker_deployment_spec(
                    "default", values.namespace, name, "0", spec["worker"]["spec"], {}, {}
                ),
            ]
            pods += [(d["spec"]["template"]["metadata"]["labels"], d["spec"]["template"]["spec"])
                     for d in made]  # fmt: skip
    job = job_template(values, TEMPLATE)["job_configuration"]["job_manifest"]["spec"]["template"]
    pods.append((job["metadata"]["labels"], job["spec"]))
    return pods


def _selected(selector: Obj, pods: list[tuple[dict[str, str], Obj]]) -> list[Obj]:
    wanted = selector["matchLabels"].items()
    return [spec for labels, spec in pods if wanted <= labels.items()]


def _ports(pod: Obj) -> set[int]:
    return {p["containerPort"] for box in pod["containers"] for p in box.get("ports", [])}


@pytest.mark.parametrize("data_service", [True, False])
def test_the_policy_holds_the_trial_pods_to_what_they_need(data_service: bool) -> None:
    values = InfraValues.model_validate({"data_service": {"enabled": data_service}})
    spec, pods = _policy(values)["spec"], _pods(values)
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    trials = _selected(spec["podSelector"], pods)
    assert len(trials) == 1 and trials[0]["containers"][0]["name"] == "worker"  # the Dask worker

    reached = []
    for rule in spec["egress"]:
        (to,) = rule["to"]
        ports = {p["port"] for p in rule["ports"]}
        if "ipBlock" in to:
            reached.append(f"ipBlock:{to['ipBlock']['cidr']}")
        elif "namespaceSelector" in to:  # the cluster's DNS
            assert to["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
            assert {(p["protocol"], p["port"]) for p in rule["ports"]} == {("UDP", 53), ("TCP", 53)}
            reached.append("dns")
        else:  # pods of ours: they exist, and serve the port
            targets = _selected(to["podSelector"], pods)
            assert len(targets) == 1, f"{len(targets)} pods have the labels {to['podSelector']}"
            (target,) = targets
            assert ports <= _ports(target), (to, ports, _ports(target))
            reached.append(target["containers"][0]["name"])
    expected = ["scheduler", "redis", "sentinel", "dns"]
    expected += ["dispatcher", "worker"] if data_service else []
    assert reached == [*expected, "ipBlock:0.0.0.0/0"]

    (ingress,) = spec["ingress"]
    sources = [_selected(peer["podSelector"], pods) for peer in ingress["from"]]
    assert [[s["containers"][0]["name"] for s in found] for found in sources] == [
        ["scheduler"],
        ["prefect-job"],  # the job pod: the master
    ]
    assert "ports" not in ingress  # a Dask worker listens on a port of its choosing


def test_the_object_store_flows_and_the_policy_can_be_left_out(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        "network:\n  object_store:\n"
        "  - {cidr: 10.0.5.0/24, exclude: [10.0.5.1/32], ports: [9000, 9001]}\n"
        "  - {cidr: 'fd00::/8'}\n"
    )
    rules = _policy(load_values(values))["spec"]["egress"][-2:]
    assert rules == [
        {"to": [{"ipBlock": {"cidr": "10.0.5.0/24", "except": ["10.0.5.1/32"]}}],
         "ports": [{"protocol": "TCP", "port": 9000}, {"protocol": "TCP", "port": 9001}]},
        {"to": [{"ipBlock": {"cidr": "fd00::/8"}}], "ports": [{"protocol": "TCP", "port": 443}]},
    ]  # fmt: skip
    off = InfraValues.model_validate({"network": {"enabled": False}})
    assert "05-network-policy.yaml" not in render(off, TEMPLATE)
    assert all(o["kind"] != "NetworkPolicy" for o in _objects(off))


def test_a_bad_network_is_named(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("network: {object_store: [{cidr: 10.0.5.0/33}]}\n")
    with pytest.raises(SpecError) as caught:
        load_values(values)
    (issue,) = caught.value.issues
    assert issue.field == "network.object_store.0.cidr" and issue.value == "10.0.5.0/33"
    assert "CIDR" in issue.rule and issue.fix
