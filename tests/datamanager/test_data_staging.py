"""Staging reads NumPy and Parquet through fsspec and writes fixed-length record shards."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ultron.datamanager.errors import DataServiceError, DataValidationError
from ultron.datamanager.service import DataServiceHandle
from ultron.datamanager.spec import DataSpec
from ultron.datamanager.staging import stage


def _records(manifest: dict) -> np.ndarray:
    root = Path(manifest["root"])
    return np.concatenate(
        [
            np.fromfile(root / s["file"], np.uint8).reshape(-1, manifest["row_bytes"])
            for s in manifest["shards"]
        ]
    )


def test_numpy_files_become_shards(tmp_path: Path) -> None:
    for part in range(2):
        ids = np.arange(part * 5, part * 5 + 5)
        np.savez(tmp_path / f"part-{part}.npz", x=np.stack([ids, ids], 1).astype("float32"), y=ids)
    spec = DataSpec(url="part-*.npz", shard_rows=4)
    manifest = stage(spec, base_dir=tmp_path, out_dir=tmp_path / "out")
    assert [s["rows"] for s in manifest["shards"]] == [4, 4, 2]
    assert json.loads((tmp_path / "out" / "manifest.json").read_text()) == manifest
    rows = _records(manifest)
    x = rows[:, :8].copy().view(np.float32)
    y = rows[:, 8:].copy().view(np.int64)[:, 0]
    assert y.tolist() == list(range(10))
    assert x[:, 0].tolist() == list(range(10))


def test_parquet_list_column_takes_the_declared_shape(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table({"x": [[float(i)] * 6 for i in range(3)], "y": [0, 1, 2]})
    pq.write_table(table, tmp_path / "d.parquet")
    spec = DataSpec.model_validate({"url": "d.parquet", "features": {"x": {"shape": [2, 3]}}})
    manifest = stage(spec, base_dir=tmp_path, out_dir=tmp_path / "out")
    x_column = manifest["columns"][0]
    assert (x_column["name"], x_column["shape"], manifest["rows"]) == ("x", [2, 3], 3)


def test_missing_data_is_named(tmp_path: Path) -> None:
    with pytest.raises(DataValidationError, match="no numpy file found"):
        stage(DataSpec(url="nothing.npz"), base_dir=tmp_path, out_dir=tmp_path / "out")


def test_strings_are_refused_with_a_fix(tmp_path: Path) -> None:
    np.savez(tmp_path / "s.npz", name=np.array(["a", "b"]))
    with pytest.raises(DataServiceError, match=r"'name'.*Fix"):
        stage(DataSpec(url="s.npz"), base_dir=tmp_path, out_dir=tmp_path / "out")


def test_the_data_fingerprint_follows_content_and_batching(tmp_path: Path) -> None:
    def fingerprint(y: np.ndarray, **fields: object) -> str:
        np.savez(tmp_path / "d.npz", x=np.ones((len(y), 2), "float32"), y=y)
        spec = DataSpec(url="d.npz", **fields)  # type: ignore[arg-type]
        manifest = stage(spec, base_dir=tmp_path, out_dir=tmp_path / "out")
        return DataServiceHandle("grpc://localhost:1", manifest, spec).fingerprint()

    first = fingerprint(np.arange(10))
    assert fingerprint(np.arange(10)) == first  # the same data, staged again
    assert fingerprint(np.arange(10), placement="service") == first  # where it runs: no matter
    assert fingerprint(np.arange(1, 11)) != first  # other values
    assert fingerprint(np.arange(10), batch_size=5) != first  # other batches
