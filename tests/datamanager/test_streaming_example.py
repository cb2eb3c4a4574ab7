"""The streaming example's pieces without the flow: its data, its expectations, its model."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import ultron.data
from ultron.datamanager import DataSpec, DataValidationError, start_data_service, validate_data

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "streaming"


def _data_spec(url: str) -> DataSpec:
    section = yaml.safe_load((EXAMPLE / "job.yaml").read_text())["data"]
    return DataSpec.model_validate({**section, "url": url})


def test_broken_label_stops_before_any_trial(tmp_path: Path, streaming_make_data: Any) -> None:
    pytest.importorskip("great_expectations")
    target = streaming_make_data.write(str(tmp_path), rows=256)
    with np.load(target) as arrays:
        x, y = arrays["x"], arrays["y"].copy()
    y[10] = 9
    np.savez(target, x=x, y=y)
    with pytest.raises(DataValidationError) as info:
        validate_data(_data_spec(target), base_dir=tmp_path)
    assert [f.expectation for f in info.value.failures] == ["y in_set [0, 1, 2, 3]"]


@pytest.mark.slow
def test_model_trains_on_the_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, streaming_make_data: Any
) -> None:
    pytest.importorskip("tensorflow")
    pytest.importorskip("great_expectations")
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    target = streaming_make_data.write(str(tmp_path / "store"), rows=1024)
    spec = _data_spec(target)
    validate_data(spec, base_dir=tmp_path)
    monkeypatch.syspath_prepend(str(EXAMPLE / "code"))
    from streaming_cnn.train import Model

    hyperparameters = {"lr": 0.01, "width": 8, "flip": 0.3, "epochs": 2}
    with start_data_service(
        spec,
        job_id="example",
        seed=3,
        base_dir=tmp_path,
        work_dir=tmp_path / "w",
        in_process=True,
    ) as handle:
        ultron.data.set_service(handle.trial_config(), seed=1, hyperparameters=hyperparameters)
        try:
            result = Model().score(hyperparameters, str(tmp_path / "ckpt"), False)
        finally:
            ultron.data.set_service(None)
            sys.modules.pop("streaming_cnn.train", None)
    assert result["accuracy"] > 0.5
    assert result["data_wait_seconds"] >= 0.0
