"""``ultron validate`` over one spec per closed hole: the real CLI script, in a subprocess.

Each spec differs from a valid one in one place. The CLI must exit 2 and print one ``error:``
line with the problem below it: the field's name, a ``Fix:``, and no traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ULTRON = Path(sys.executable).parent / "ultron"

MODEL = """
class Model:
    def score(self, hyperparameters, checkpoint_path, resume):
        return float(hyperparameters["lr"])


class Search:
    def __init__(self, search_space, seed=0, sigma=1.0):
        self.search_space = search_space

    def sample_hyperparameter_candidates(self, n):
        return []

    def update_state(self, hyperparameter_candidates, validation_scores):
        pass
"""

GOOD = """\
code: proj
model: pkg.train:Model
search_space:
  lr: {type: uniform, low: 0.0, high: 1.0}
num_iterations: 3
"""

# name -> (the spec file's bytes, the field its error names)
HOLES: dict[str, tuple[bytes, str]] = {
    "inf_bound": (GOOD.replace("high: 1.0", "high: .inf").encode(), "search_space.lr.high"),
    "nan_bound": (GOOD.replace("low: 0.0", "low: .nan").encode(), "search_space.lr.low"),
    "duplicate_key": ((GOOD + "num_iterations: 5000\n").encode(), "num_iterations"),
    "not_utf8": ("name: café\n".encode("latin-1") + GOOD.encode(), "spec"),
    "missing_model": (GOOD.replace("train:Model", "train:Modle").encode(), "model"),
    "unknown_strategy_option": (
        (GOOD + "strategy: pkg.train:Search\nstrategy_options: {sigma: 2.0, temp: 3}\n").encode(),
        "strategy_options",
    ),
    "too_many_iterations": (
        GOOD.replace("num_iterations: 3", "num_iterations: 10000000").encode(),
        "num_iterations",
    ),
}


def _validate(tmp_path: Path, content: bytes) -> subprocess.CompletedProcess[str]:
    """Write a code base defining ``pkg.train:Model`` and ``Search``, the spec, and validate it."""
    package = tmp_path / "proj" / "pkg"
    package.mkdir(parents=True, exist_ok=True)
    (tmp_path / "proj" / "pyproject.toml").write_text("[project]\nname = 'proj'\n")
    (package / "__init__.py").write_text("")
    (package / "train.py").write_text(MODEL)
    spec = tmp_path / "job.yaml"
    spec.write_bytes(content)
    return subprocess.run(
        [str(ULTRON), "validate", str(spec)],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=120,
        env={**os.environ, "ULTRON_HOME": str(tmp_path / "home")},
        stdin=subprocess.DEVNULL,
    )


def test_the_unchanged_spec_is_valid(tmp_path: Path) -> None:
    """Every hole below is the only change to this spec."""
    out = _validate(tmp_path, GOOD.encode())
    assert out.returncode == 0, out.stdout + out.stderr
    assert "valid job spec" in out.stdout


@pytest.mark.parametrize(("content", "field"), list(HOLES.values()), ids=list(HOLES))
def test_each_hole_is_one_clean_error_naming_its_field(
    tmp_path: Path, content: bytes, field: str
) -> None:
    out = _validate(tmp_path, content)
    text = out.stdout + out.stderr
    assert out.returncode == 2, text
    assert "Traceback" not in text
    assert [line for line in text.splitlines() if line.startswith("error:")] == [
        f"error: {tmp_path / 'job.yaml'} has 1 problem(s):"
    ], text
    problems = [line.strip() for line in text.splitlines() if line.startswith("  - ")]
    assert len(problems) == 1, text
    assert problems[0].startswith(f"- {field} is "), text
    assert "Fix:" in problems[0]
