"""A real tf.data service: concurrent trials, exactly-once epochs, seeded orders, clean stops."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ultron.data
from ultron.datamanager import (
    DataServiceError,
    DataServiceHandle,
    DataSpec,
    colocated,
    start_data_service,
)

pytest.importorskip("tensorflow")
pytest.importorskip("torch")


def read_epoch(config: dict[str, Any], **kwargs: Any) -> tuple[np.ndarray, np.ndarray, Any]:
    """The ids and x values of one epoch, in the order they came, and the stream's stats."""
    ultron.data.set_service(config)
    with ultron.data.batches(**kwargs) as stream:
        parts = [(batch["y"].numpy().copy(), batch["x"].numpy().copy()) for batch in stream]
    ids = np.concatenate([p[0] for p in parts])
    xs = np.concatenate([p[1] for p in parts])
    return ids, xs, stream.stats


def test_two_trials_read_one_service_at_once(service: DataServiceHandle) -> None:
    config = service.trial_config()
    results: dict[int, Any] = {}

    def trial(seed: int) -> None:
        results[seed] = read_epoch(config, seed=seed)

    threads = [threading.Thread(target=trial, args=(seed,)) for seed in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    rows = service.manifest["rows"]
    for ids, xs, stats in results.values():
        assert sorted(ids.tolist()) == list(range(rows))  # every example once
        assert np.allclose(xs[:, 0, 0, 0], ids / rows)  # and its own values
        assert stats.batches == -(-rows // service.spec.batch_size)
    assert results[1][0].tolist() != results[2][0].tolist()  # each its own order


def test_same_seed_same_order_other_epoch_other_order(service: DataServiceHandle) -> None:
    config = service.trial_config()
    first = read_epoch(config, seed=5)[0]
    again = read_epoch(config, seed=5)[0]
    next_epoch = read_epoch(config, seed=5, epoch=1)[0]
    assert first.tolist() == again.tolist()
    assert first.tolist() != next_epoch.tolist()
    assert sorted(next_epoch.tolist()) == sorted(first.tolist())


def test_trial_seed_comes_from_set_service(service: DataServiceHandle) -> None:
    ultron.data.set_service(service.trial_config(), seed=5)
    with ultron.data.batches(framework="numpy") as stream:
        ids = np.concatenate([batch["y"] for batch in stream])
    assert ids.tolist() == read_epoch(service.trial_config(), seed=5)[0].tolist()


def test_pipeline_function_gets_hyperparameters(
    service: DataServiceHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "user_pipeline.py").write_text(
        "def scale(dataset, *, hyperparameters, seed):\n"
        "    factor = hyperparameters['scale']\n"
        "    return dataset.map(lambda b: {**b, 'x': b['x'] * factor})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    config = {**service.trial_config(), "pipeline": "user_pipeline:scale"}
    ids, xs, _ = read_epoch(config, seed=1, hyperparameters={"scale": 10.0}, batch_size=64)
    assert np.allclose(xs[:, 0, 0, 0], 10.0 * ids / service.manifest["rows"])


def test_leaving_early_stops_the_reader(service: DataServiceHandle) -> None:
    ultron.data.set_service(service.trial_config(), seed=3)
    stream = ultron.data.batches(framework="tf")
    for index, _ in enumerate(stream):
        if index == 1:
            break
    stream.close()
    assert stream.stats.batches == 2
    assert not stream._thread.is_alive()
    assert ultron.data.stats().batches == 2


def _port_open(address: str) -> bool:
    host, port = address.removeprefix("grpc://").rsplit(":", 1)
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex((host, int(port))) == 0


@pytest.mark.slow
@pytest.mark.parametrize("placement", ["colocated", "service"])
def test_service_in_its_own_process_serves_and_stops_clean(
    dataset_dir: Path, tmp_path: Path, placement: str
) -> None:
    spec = DataSpec(url="train.npz", batch_size=100, shard_rows=256, placement=placement)
    handle = start_data_service(
        spec, job_id="test-child", seed=4, base_dir=dataset_dir, work_dir=tmp_path
    )
    try:
        assert handle.running and _port_open(handle.dispatcher_address)
        assert handle.service_workers == (0 if placement == "colocated" else 1)
        ids, _, _ = read_epoch(handle.trial_config())
        assert sorted(ids.tolist()) == list(range(handle.manifest["rows"]))
        # colocated: the batches came from this process's own worker (the service has none)
        assert colocated.running(handle.service_id) == (placement == "colocated")
    finally:
        ultron.data.set_service(None)  # the trial ends before the job stops the service
        assert handle._child is not None
        process = handle._child.process
        handle.stop()
    assert process is not None and process.returncode == 0
    assert not handle.running
    assert not _port_open(handle.dispatcher_address)
    assert not colocated.running(handle.service_id)  # stopped with the service


def read_epochs(config: dict[str, Any], epochs: list[int], **kwargs: Any) -> list[Any]:
    """The ids of each epoch in ``epochs``, read one after the other by one trial."""
    ultron.data.set_service(config, seed=kwargs.pop("seed", 5))
    out = []
    for epoch in epochs:
        with ultron.data.batches(epoch=epoch, framework="numpy", **kwargs) as stream:
            out.append((np.concatenate([batch["y"] for batch in stream]), stream))
    return out


def test_one_reader_serves_all_epochs_of_a_trial(service: DataServiceHandle) -> None:
    rows = service.manifest["rows"]
    epochs = read_epochs(service.trial_config(), [0, 1, 2])
    readers = {id(stream._reader) for _, stream in epochs}
    assert len(readers) == 1  # registered once, not once per epoch
    for ids, stream in epochs:
        assert sorted(ids.tolist()) == list(range(rows))
        assert stream.stats.batches == -(-rows // service.spec.batch_size)
    orders = [ids.tolist() for ids, _ in epochs]
    assert orders[0] != orders[1] != orders[2]
    # a resumed trial that starts at epoch 2 gets the same epoch 2
    assert read_epochs(service.trial_config(), [2])[0][0].tolist() == orders[2]
    assert read_epochs(service.trial_config(), [0])[0][0].tolist() == orders[0]
    ultron.data.set_service(None)


def test_leaving_an_epoch_early_then_the_next_epoch_is_whole(service: DataServiceHandle) -> None:
    expected = read_epochs(service.trial_config(), [0, 1])[1][0].tolist()
    ultron.data.set_service(service.trial_config(), seed=5)
    with ultron.data.batches(epoch=0, framework="numpy") as stream:
        next(stream)
    with ultron.data.batches(epoch=1, framework="numpy") as stream:
        assert np.concatenate([batch["y"] for batch in stream]).tolist() == expected
    ultron.data.set_service(None)


def test_a_pipeline_that_rebatches_still_gets_whole_epochs(
    service: DataServiceHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "rebatch_pipeline.py").write_text(
        "def rebatch(dataset, *, hyperparameters, seed):\n    return dataset.unbatch().batch(64)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    config = {**service.trial_config(), "pipeline": "rebatch_pipeline:rebatch"}
    epochs = read_epochs(config, [0, 1])
    rows = service.manifest["rows"]
    assert epochs[0][1]._reader is epochs[1][1]._reader
    for ids, stream in epochs:
        assert sorted(ids.tolist()) == list(range(rows))
        assert stream.stats.batches == -(-rows // 64)
    ultron.data.set_service(None)


def test_two_workers_share_each_epoch_out(dataset_dir: Path, tmp_path: Path) -> None:
    spec = DataSpec(
        url="train.npz",
        batch_size=50,
        shard_rows=64,
        shuffle_buffer=100,
        placement="service",
        workers=2,
    )
    with start_data_service(
        spec, job_id="test-two", seed=1, base_dir=dataset_dir, work_dir=tmp_path, in_process=True
    ) as handle:
        for ids, _ in read_epochs(handle.trial_config(), [0, 1]):
            assert sorted(ids.tolist()) == list(range(handle.manifest["rows"]))
        ultron.data.set_service(None)


@pytest.mark.parametrize("framework", ["torch", "tf", "numpy"])
def test_batches_come_as_the_framework_asks(service: DataServiceHandle, framework: str) -> None:
    import tensorflow as tf
    import torch

    kind = {"torch": torch.Tensor, "tf": tf.Tensor, "numpy": np.ndarray}[framework]
    ultron.data.set_service(service.trial_config(), seed=2)
    try:
        with ultron.data.batches(framework=framework) as stream:  # type: ignore[arg-type]
            batches = list(stream)
    finally:
        ultron.data.set_service(None)
    assert all(isinstance(b["x"], kind) and isinstance(b["y"], kind) for b in batches)
    ids = np.concatenate([np.asarray(b["y"]) for b in batches])
    assert sorted(ids.tolist()) == list(range(service.manifest["rows"]))
    assert tuple(batches[0]["x"].shape) == (service.spec.batch_size, 4, 4, 3)


def test_a_colocated_worker_needs_the_data_and_the_dispatcher(tmp_path: Path) -> None:
    config = {"service": "gone", "dispatcher": "grpc://localhost:1", "manifest": {"root": "/no"}}
    with pytest.raises(DataServiceError, match="placement: service"):
        colocated.acquire(config)  # the staged data is not on this machine
    with pytest.raises(DataServiceError, match="cannot be reached"):
        colocated.acquire({**config, "manifest": {"root": str(tmp_path)}})  # nothing on port 1
    assert not colocated.running("gone")


@pytest.mark.slow
def test_a_service_process_that_dies_comes_back_and_trials_read_on(
    dataset_dir: Path, tmp_path: Path
) -> None:
    spec = DataSpec(url="train.npz", batch_size=20, shard_rows=128, shuffle_buffer=200)
    handle = start_data_service(
        spec, job_id="test-crash", seed=4, base_dir=dataset_dir, work_dir=tmp_path
    )
    rows = handle.manifest["rows"]
    try:
        assert handle._child is not None
        first = handle._child.process
        ultron.data.set_service(handle.trial_config(), seed=1)
        ids: list[int] = []
        with ultron.data.batches(framework="numpy") as stream:
            for index, batch in enumerate(stream):
                ids.extend(batch["y"].tolist())
                if index == 2:
                    first.kill()  # the dispatcher's process dies in the middle of the epoch
        assert sorted(ids) == list(range(rows))  # this epoch still whole, each example once
        for _ in range(600):  # the job starts the service again
            if handle.restarts and handle.running:
                break
            time.sleep(0.1)
        assert handle.restarts == 1 and handle._child.process.pid != first.pid
        with ultron.data.batches(framework="numpy", epoch=1) as stream:  # the same reader
            assert sorted(np.concatenate([b["y"] for b in stream]).tolist()) == list(range(rows))
        ids, _, _ = read_epoch(handle.trial_config(), seed=2)  # and a new trial
        assert sorted(ids.tolist()) == list(range(rows))
    finally:
        ultron.data.set_service(None)
        handle.stop()
    assert not handle.running
