"""Write the example's training data to the object store (a folder, or any fsspec URL).

``python examples/streaming/make_data.py [URL]``; the default is ``data/`` next to this file,
which is where ``job.yaml`` looks. For S3: ``python make_data.py s3://bucket/streaming`` and
set ``data.url`` in job.yaml to ``s3://bucket/streaming/train.npz``.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import fsspec
import numpy as np

sys.path.insert(0, str(Path(__file__).parent / "code"))
from streaming_cnn.synthetic import make


def write(url: str, *, rows: int = 4096, seed: int = 0) -> str:
    """Write ``train.npz`` under ``url`` and return its full URL.

    Besides the images ``x`` and labels ``y`` it holds ``id`` (0 to rows - 1): an example id,
    so a trial can tell which examples it saw. The model ignores it.
    """
    x, y = make(rows, seed=seed)
    buffer = io.BytesIO()
    np.savez(buffer, x=x, y=y, id=np.arange(rows, dtype=np.int64))
    target = f"{url.rstrip('/')}/train.npz"
    fs, path = fsspec.core.url_to_fs(target)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    with fs.open(path, "wb") as handle:
        handle.write(buffer.getvalue())
    return target


if __name__ == "__main__":
    where = sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).parent / "data")
    print(write(where))
