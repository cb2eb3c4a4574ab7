"""The manifests against a real Kubernetes API server: ``kubectl apply --dry-run=server``
runs the server's own validation and admission (RBAC rules, quantities, immutable fields)
without creating anything. Marked ``k8s``; they skip where no API server answers (CI has none:
the offline schema checks of test_manifests.py run there)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from ultron.deploy import InfraValues, render, write

pytestmark = pytest.mark.k8s

TEMPLATE = Path(__file__).resolve().parents[3] / "infra/prefect/kubernetes-base-job-template.json"


def _kubectl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture(scope="module")
def api_server() -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("needs a Kubernetes API server: kubectl is not installed here")
    if _kubectl("version", "--request-timeout=5s").returncode != 0:
        pytest.skip("needs a Kubernetes API server: kubectl reaches none (no current context)")


def test_server_dry_run_accepts_every_manifest(api_server: None, tmp_path: Path) -> None:
    # The "default" namespace exists on every cluster: a dry run creates no namespace, so the
    # namespaced objects would otherwise be refused for a namespace that is not there.
    values = InfraValues.model_validate({"namespace": "default"})
    files = render(values, json.loads(TEMPLATE.read_text()))
    if _kubectl("get", "crd", "daskclusters.kubernetes.dask.org").returncode != 0:
        del files["60-dask-cluster.yaml"]  # the Dask operator is not installed there
    write(files, tmp_path)
    result = _kubectl("apply", "--dry-run=server", "--validate=strict", "-f", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "serviceaccount/ultron-job" in result.stdout
