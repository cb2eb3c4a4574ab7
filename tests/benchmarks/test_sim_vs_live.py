"""The live side of ``benchmarks/sim_vs_live.py``: its model resumes from the checkpoint it
writes as it returns, and refuses a configuration its table does not hold."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

MODEL = Path(__file__).resolve().parents[2] / "benchmarks" / "lcbench_sleep_model"


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The model's package, imported from its code base as a trial process would."""
    monkeypatch.syspath_prepend(str(MODEL))
    import lcbench_sleep_model

    yield lcbench_sleep_model
    sys.modules.pop("lcbench_sleep_model", None)


def test_the_model_checkpoints_as_it_returns_and_resumes_after_it(
    model: ModuleType, tmp_path: Path
) -> None:
    table = tmp_path / "curves.json"
    row = {"config": {"lr": 0.1}, "values": [10.0, 20.0, 30.0], "durations": [0.0, 0.0, 0.0]}
    table.write_text(json.dumps({"checkpoint_bytes": 1000, "rows": [row]}))
    hyperparameters = {"lr": 0.1, "table": str(table)}
    checkpoints = tmp_path / "checkpoints"
    # Outside a trial every report answers "go on": the model trains its 3 epochs.
    assert model.Model().score(hyperparameters, str(checkpoints), False) == {"accuracy": 30.0}
    assert model.load(str(checkpoints)) == 3
    assert (checkpoints / "epoch-0003" / "state.bin").stat().st_size == 1000
    # Resumed with nothing left, it returns its last accuracy and writes nothing new.
    assert model.Model().score(hyperparameters, str(checkpoints), True) == {"accuracy": 30.0}
    assert sorted(p.name for p in checkpoints.iterdir()) == ["epoch-0003"]
    with pytest.raises(KeyError, match="is not in"):
        model.curve({"lr": 0.2, "table": str(table)})
