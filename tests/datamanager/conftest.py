"""Fixtures of the Data Manager tests: a small labelled dataset and a real tf.data service."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ultron.datamanager import DataServiceHandle, DataSpec, start_data_service

ROWS = 600


def write_dataset(folder: Path, *, rows: int = ROWS, name: str = "train.npz") -> Path:
    """``x``: rows x 4 x 4 x 3 float32 in [0, 1) where x[i] is filled with i / rows;
    ``y``: the example's id (so a test can tell which examples a batch holds)."""
    folder.mkdir(parents=True, exist_ok=True)
    ids = np.arange(rows)
    x = np.broadcast_to((ids / rows).astype(np.float32)[:, None, None, None], (rows, 4, 4, 3))
    path = folder / name
    np.savez(path, x=np.ascontiguousarray(x), y=ids.astype(np.int64))
    return path


@pytest.fixture(name="make_dataset")
def make_dataset_fixture() -> object:
    """:func:`write_dataset`, for tests that need a dataset of their own."""
    return write_dataset


@pytest.fixture(name="dataset_dir", scope="session")
def dataset_dir_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("data")
    write_dataset(folder)
    return folder


@pytest.fixture(name="service", scope="session")
def service_fixture(
    dataset_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DataServiceHandle]:
    """One data service for the session, in this process (TensorFlow loads once)."""
    pytest.importorskip("tensorflow")
    spec = DataSpec(url="train.npz", batch_size=50, shard_rows=128, shuffle_buffer=1000)
    handle = start_data_service(
        spec,
        job_id="test-data",
        seed=11,
        base_dir=dataset_dir,
        work_dir=tmp_path_factory.mktemp("service"),
        in_process=True,
    )
    yield handle
    import ultron.data

    ultron.data.set_service(None)  # readers kept between epochs end before the service
    handle.stop()
