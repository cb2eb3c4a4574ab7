"""prefect.yaml: every deployment points at a real flow and carries a valid job spec."""

from __future__ import annotations

from pathlib import Path

import yaml

from ultron.spec.loader import load_spec

REPO = Path(__file__).parents[2]


def test_deployments_load_their_flow_and_spec() -> None:
    from prefect.flows import load_flow_from_entrypoint

    config = yaml.safe_load((REPO / "prefect.yaml").read_text())
    names = [d["name"] for d in config["deployments"]]
    assert names == ["hpo-job", "nightly-quickstart-benchmark"]
    for deployment in config["deployments"]:
        flow = load_flow_from_entrypoint(deployment["entrypoint"])  # a module path: ultron.*
        assert flow.name == "hpo-job"
        assert "spec" in flow.parameters.properties
        if "spec" in deployment["parameters"]:
            # The worker runs in the repository (the pull step), so paths are relative to it.
            spec = load_spec(deployment["parameters"]["spec"], base_dir=REPO)
            assert spec.code == (REPO / "examples" / "quickstart" / "code").resolve()
    nightly = config["deployments"][1]
    assert nightly["schedules"][0]["cron"] == "0 3 * * *"
