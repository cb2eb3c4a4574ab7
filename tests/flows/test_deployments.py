"""prefect.yaml: every deployment points at a real flow and carries a valid job spec."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ultron.spec.loader import load_spec

REPO = Path(__file__).parents[2]


def test_deployments_load_their_flow_and_spec() -> None:
    from prefect.flows import load_flow_from_entrypoint

    config = yaml.safe_load((REPO / "prefect.yaml").read_text())
    names = [d["name"] for d in config["deployments"]]
    assert names == ["hpo-job", "hpo-job-k8s", "nightly-benchmark", "scale-job"]
    jobs = [d for d in config["deployments"] if d["entrypoint"].endswith(":hpo_job")]
    assert [d["name"] for d in jobs] == ["hpo-job", "hpo-job-k8s"]
    for deployment in jobs:
        flow = load_flow_from_entrypoint(deployment["entrypoint"])  # a module path: ultron.*
        assert flow.name == "hpo-job"
        assert "spec" in flow.parameters.properties
        if "spec" in deployment["parameters"]:
            # The worker runs in the repository (the pull step), so paths are relative to it.
            spec = load_spec(deployment["parameters"]["spec"], base_dir=REPO)
            assert spec.code == (REPO / "examples" / "quickstart" / "code").resolve()
    scale = next(d for d in config["deployments"] if d["name"] == "scale-job")
    flow = load_flow_from_entrypoint(scale["entrypoint"])
    assert flow.name == "scale-job"
    assert {"job_id", "parallelism"} <= set(flow.parameters.properties)


def _resolve(schema: dict, node: dict) -> dict:
    ref = node.get("$ref")
    return schema["definitions"][ref.rsplit("/", 1)[1]] if ref else node


@pytest.mark.slow
def test_the_registered_parameter_schema_is_the_typed_spec(prefect_server) -> None:
    """What `prefect deploy` registered (and the UI renders): every field of the spec with its
    type, default and description; choices as enums; search-space entries as typed objects."""
    from prefect.client.base import ServerType
    from prefect.client.orchestration import SyncPrefectClient

    from ultron.algorithms.registry import BUILTIN_STRATEGIES
    from ultron.spec.job import JobSpec

    with SyncPrefectClient(prefect_server.api_url, server_type=ServerType.SERVER) as client:
        deployment = client.read_deployment_by_name("hpo-job/hpo-job")
    schema = deployment.parameter_openapi_schema
    assert schema["required"] == ["spec"]
    spec = _resolve(schema, schema["properties"]["spec"])
    fields = spec["properties"]
    assert set(fields) == set(JobSpec.model_fields)
    assert all(field.get("description") for field in fields.values())
    assert fields["num_iterations"]["type"] == "integer" and fields["num_iterations"]["default"]
    assert fields["name"]["type"] == "string" and fields["name"]["default"] == "hpo-job"
    built_in = fields["strategy"]["anyOf"][0]
    assert built_in["enum"] == list(BUILTIN_STRATEGIES)  # the choices, kept in step
    assert fields["strategy"]["anyOf"][1]["title"] == "Your own strategy"  # BYO stays open
    assert _resolve(schema, fields["objective"])["properties"]["mode"]
    mode = _resolve(schema, _resolve(schema, fields["objective"])["properties"]["mode"])
    assert mode["enum"] == ["minimize", "maximize"]
    assert fields["loop"]["anyOf"][0]["enum"] == ["batch", "async"]
    stopping = _resolve(schema, fields["early_stopping"]["anyOf"][0])
    kinds = stopping["properties"]["type"]["anyOf"]
    assert kinds[0]["enum"] == [
        *("asha", "hyperband", "median", "pop", "pbt", "bandit", "earlyterm")
    ]
    assert kinds[1]["title"] == "Your own stopper"  # BYO stays open
    entry = fields["search_space"]["additionalProperties"]["anyOf"][0]
    assert entry["discriminator"]["propertyName"] == "type"
    kinds = {_resolve(schema, e)["properties"]["type"]["const"] for e in entry["oneOf"]}
    assert kinds == {"uniform", "loguniform", "int", "choice", "list"}
    int_entry = schema["definitions"]["IntSpec"]["properties"]
    assert int_entry["low"]["type"] == "integer" and int_entry["log"]["default"] is False


def test_nightly_benchmark_runs_the_benchmark_suite_on_a_schedule() -> None:
    from prefect.flows import load_flow_from_entrypoint

    from ultron.flows.benchmark import SUITES

    config = yaml.safe_load((REPO / "prefect.yaml").read_text())
    nightly = next(d for d in config["deployments"] if d["name"] == "nightly-benchmark")
    flow = load_flow_from_entrypoint(nightly["entrypoint"])
    assert flow.name == "benchmark"
    assert set(nightly["parameters"]) <= set(flow.parameters.properties)
    assert nightly["parameters"]["suite"] in SUITES
    assert nightly["schedules"][0]["cron"] == "0 3 * * *"


@pytest.mark.slow
def test_the_scale_job_deployment_asks_a_job_to_scale(prefect_server, redis_url: str) -> None:
    """The Prefect UI's way to ``ultron scale``: a run of ``scale-job`` on the process worker
    (whose REDIS_URL is the session's) writes the request where the job's master reads it."""
    import time
    import uuid

    import redis
    from prefect.client.base import ServerType
    from prefect.client.orchestration import SyncPrefectClient

    from ultron.master.scaling import requested_parallelism
    from ultron.redis import keys

    store = redis.Redis.from_url(redis_url)
    job_id = f"ui-scaled-{uuid.uuid4().hex[:8]}"
    store.hset(keys.job(job_id), "status", "running")  # as a running job's master keeps it
    with SyncPrefectClient(prefect_server.api_url, server_type=ServerType.SERVER) as client:
        deployment = client.read_deployment_by_name("scale-job/scale-job")
        run = client.create_flow_run_from_deployment(
            deployment.id, parameters={"job_id": job_id, "parallelism": 3}
        )
        deadline = time.monotonic() + 300
        while not client.read_flow_run(run.id).state.is_final():
            assert time.monotonic() < deadline, "the scale-job run never ended"
            time.sleep(0.5)
        assert client.read_flow_run(run.id).state.is_completed()
    assert requested_parallelism(store, job_id) == 3
