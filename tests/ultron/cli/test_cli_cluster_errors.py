"""A wrong ``cluster:`` section at the terminal: one clean error naming the field, the value,
the rule and the fix, no traceback, before any compute. (A scheduler that does not answer:
tests/ultron/services/test_cluster_backends.py.)

Each case runs the real ``ultron`` command in a process of its own, as a user types it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).parents[3]
ULTRON = str(Path(sys.executable).with_name("ultron"))
TOY = REPO / "tests" / "data" / "toy"


def _run(folder: Path, cluster: dict[str, object], timeout: float = 120) -> tuple[int, str]:
    """``ultron run`` of a toy job with this ``cluster:`` section: exit code, all it printed."""
    spec = {
        "name": "cluster-errors",
        "code": str(TOY),
        "model": "toy_model:Quadratic",
        "search_space": {"x": {"type": "uniform", "low": 0.0, "high": 4.0}},
        "num_iterations": 2,
        "storage": str(folder / "runs"),
        "cluster": cluster,
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "ULTRON_DASK_ADDRESS")}
    env["ULTRON_HOME"] = str(folder / "home")
    done = subprocess.run(
        [ULTRON, "run", str(path)], capture_output=True, text=True, env=env, cwd=folder,
        timeout=timeout,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


# One run per backend, all its bad fields at once (a spec error lists every problem).
CASES = {
    "address": (
        {"type": "address", "address": "10.0.0.5:8786"},
        [("address", "'10.0.0.5:8786'", "a Dask scheduler address with its protocol",
          "tcp://HOST:PORT")],
    ),
    "kubernetes": (
        {"type": "kubernetes", "namespace": "Prod_NS", "service_account": "ultron worker",
         "min_workers": -1},
        [
            ("namespace", "'Prod_NS'", "a Kubernetes name", "kubectl get namespaces"),
            ("service_account", "'ultron worker'", "a Kubernetes name", "serviceaccounts"),
            ("min_workers", "-1", "greater than or equal to 0", "set it to 0 or more"),
        ],
    ),
    "slurm": (
        {"type": "slurm", "walltime": "90 minutes"},
        [("walltime", "'90 minutes'", "[D-]HH:MM[:SS]", "01:30:00")],
    ),
}  # fmt: skip


@pytest.mark.parametrize("backend", list(CASES))
def test_bad_cluster_fields_are_named_with_their_rule_and_fix(tmp_path: Path, backend: str) -> None:
    cluster, expected = CASES[backend]

    code, out = _run(tmp_path, cluster)

    assert code == 2, out
    assert "Traceback" not in out
    lines = [line for line in out.splitlines() if line.strip().startswith("- cluster.")]
    assert len(lines) == len(expected), out
    for field, value, rule, fix in expected:
        # The loader may name the union's tag in the path too (cluster.kubernetes.namespace).
        (line,) = [x for x in lines if re.search(rf"cluster\.(\w+\.)?{field} is ", x)]
        assert f" is {value}; " in line
        assert rule in line.split("Fix:", 1)[0] and fix in line.split("Fix:", 1)[1]
    assert not (tmp_path / "home" / "envs").exists()  # refused before any environment was built
