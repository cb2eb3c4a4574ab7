"""The streaming example as a real HPO job, its data read from S3 by the job's data service."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

import ultron

pytest.importorskip("tensorflow", reason="the data service needs the tf extra")
pytest.importorskip("torch", reason="the example's model is a PyTorch CNN")
pytest.importorskip("great_expectations", reason="data validation needs the data extra")
pytest.importorskip("s3fs", reason="S3 needs the s3 extra")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "streaming"
RECORDING = Path(__file__).parents[1] / "data" / "streaming" / "recording.py"
ROWS = 1024

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


def _recording_code(tmp_path: Path) -> Path:
    """A copy of the example's code base whose package also holds the recording model."""
    code = tmp_path / "code"
    shutil.copytree(EXAMPLE / "code", code)
    shutil.copy(RECORDING, code / "streaming_cnn" / "recording.py")
    return code


def _spec(tmp_path: Path, redis_url: str, url: str) -> dict:
    """The example's job.yaml, on the S3 data, with the recording model: two trials at once."""
    spec = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    spec["search_space"]["tag"] = [uuid.uuid4().hex]  # new configurations: no score cache hit
    spec["data"]["url"] = url
    return {
        **spec,
        "code": str(_recording_code(tmp_path)),
        "model": "streaming_cnn.recording:Model",
        "num_iterations": 2,
        "parallelism": 2,
        "storage": str(tmp_path / "runs"),
        "redis_url": redis_url,
    }


def test_two_trials_read_the_example_from_s3_each_epoch_once_in_its_own_order(
    tmp_path: Path,
    redis_url: str,
    s3_url: str,
    monkeypatch: pytest.MonkeyPatch,
    streaming_make_data: Any,
    service_processes: Callable[[str], list[str]],
) -> None:
    url = streaming_make_data.write(f"{s3_url}/{tmp_path.name}", rows=ROWS)
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv("STREAMING_RECORD_FILE", str(record))
    monkeypatch.setenv("STREAMING_MEET", "2")  # each trial waits at its first batch for the other
    result = ultron.run(_spec(tmp_path, redis_url, url))
    assert result.status == "completed"
    assert [t.status for t in result.trials] == ["completed", "completed"]
    assert all(0.0 <= t.metrics["accuracy"] <= 1.0 for t in result.trials)
    log = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(log) == 4  # two trials x two epochs
    for entry in log:
        assert sorted(entry["ids"]) == list(range(ROWS))  # every example of the epoch, once
    trials: dict[str, dict[int, dict]] = {}
    for entry in log:
        key = json.dumps(entry["hyperparameters"], sort_keys=True)
        trials.setdefault(key, {})[entry["epoch"]] = entry
    assert sorted(trials) == sorted(
        json.dumps(t.hyperparameters, sort_keys=True) for t in result.trials
    )
    first, second = trials.values()
    for epoch in (0, 1):
        assert first[epoch]["ids"] != second[epoch]["ids"]  # each trial its own shuffled order
    for trial in (first, second):
        assert trial[0]["ids"] != trial[1]["ids"]  # and a new order each epoch
    overlap = min(first[1]["end"], second[1]["end"]) - max(first[0]["first"], second[0]["first"])
    assert overlap > 0  # both had batches from the one service before either was done
    assert service_processes(url) == []
