"""The streaming example's model, recording which examples each epoch of a trial was handed.

``tests/flows/test_streaming_example_job.py`` copies this module into its copy of the example's
package, as ``streaming_cnn.recording``. Each epoch appends one JSON line to the file named by
``STREAMING_RECORD_FILE``: the trial's hyper-parameters, the epoch, the ``id`` of each example
in the order it came, and when its first batch came and its last one was done (``time.time()``).

With ``STREAMING_MEET=n``, a trial that has its first batch waits (up to a minute) until ``n``
trials have had theirs, so that the trials are reading at the same time whatever their start-up
took; trials that cannot read at the same time wait out the minute and then read one after the
other, which the record shows.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import ultron.data

MEET_TIMEOUT = 60.0


class Model:
    """The example's ``Model``, trained as it is, with ``ultron.data.batches`` wrapped.

    The wrapper exists so that the example's own training loop runs on the real batches while
    the ids are taken down on the way; a copy of the loop could drift from the example.
    """

    def score(
        self, hyperparameters: dict[str, Any], checkpoint_path: str, resume: bool
    ) -> dict[str, float]:
        from streaming_cnn.train import Model as Example

        real = ultron.data.batches

        def recorded(**kwargs: Any) -> _Recorded:
            epoch = kwargs.get("epoch", 0)
            return _Recorded(real(**kwargs), epoch=epoch, hyperparameters=hyperparameters)

        ultron.data.batches = recorded
        try:
            return Example().score(hyperparameters, checkpoint_path, resume)
        finally:
            ultron.data.batches = real


class _Recorded:
    """One epoch's stream, passed through; its example ids and times go to the record file."""

    def __init__(self, stream: Any, *, epoch: int, hyperparameters: dict[str, Any]) -> None:
        self._stream = stream
        self._entry: dict[str, Any] = {"hyperparameters": hyperparameters, "epoch": epoch}
        self._ids: list[int] = []
        self._closed = False

    @property
    def stats(self) -> Any:
        return self._stream.stats

    def __iter__(self) -> _Recorded:
        return self

    def __next__(self) -> Any:
        batch = next(self._stream)
        if not self._ids:
            self._entry["first"] = time.time()
            if self._entry["epoch"] == 0 and os.environ.get("STREAMING_MEET"):
                _meet(int(os.environ["STREAMING_MEET"]))
        self._ids.extend(batch["id"].tolist())
        return batch

    def close(self) -> None:
        self._stream.close()
        if self._closed:
            return
        self._closed = True
        entry = {**self._entry, "ids": self._ids, "end": time.time()}
        with open(os.environ["STREAMING_RECORD_FILE"], "a") as handle:
            handle.write(json.dumps(entry, sort_keys=True) + "\n")

    def __enter__(self) -> _Recorded:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _meet(count: int) -> None:
    """Say this trial is reading, then wait until ``count`` trials are (or the timeout)."""
    path = os.environ["STREAMING_RECORD_FILE"] + ".reading"
    with open(path, "a") as handle:
        handle.write(f"{os.getpid()}\n")
    deadline = time.monotonic() + MEET_TIMEOUT
    while time.monotonic() < deadline:
        with open(path) as handle:
            if len(handle.readlines()) >= count:
                return
        time.sleep(0.05)
