"""Batches per second into torch tensors: the data service, a local tf.data pipeline, a DataLoader.

``python -m benchmarks.data_throughput [--epochs 3] [--batches 40] [--rounds 3] [--step-ms 30]``

All three read the same 256 x 32 x 32 x 3 float32 batches with the same small augmentation (a
random horizontal flip and a random brightness shift per image):

- ``service``: the job's tf.data service in its own process (as a job runs it), read through
  :func:`ultron.data.batches` into torch tensors;
- ``local tf.data``: the same pipeline in this process, handed to torch through DLPack;
- ``torch DataLoader``: a map-style dataset with 2 worker processes.

Each is measured over whole epochs (each a fresh pass in its own shuffled order, as a trial
reads them), twice: as fast as it goes (batches per second), and with a simulated training step
(a sleep, as a GPU step leaves the CPU free) to show the share of time the step waits. The
methods take turns for ``--rounds`` rounds and the median of each is shown (the machine may
be shared).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

BATCH = 256
Result = tuple[float, float]
SHAPE = (32, 32, 3)


def augment(dataset: Any, *, hyperparameters: dict[str, Any], seed: int) -> Any:
    """The pipeline function: per image a random flip and a brightness shift, seeded."""
    import tensorflow as tf

    strength = float(hyperparameters.get("brightness", 0.1))
    seeds = tf.data.Dataset.random(seed=seed).batch(2)

    def apply(batch: dict[str, Any], pair: Any) -> dict[str, Any]:
        x = tf.image.stateless_random_flip_left_right(batch["x"], seed=pair)
        shift = tf.random.stateless_uniform(
            [tf.shape(x)[0], 1, 1, 1], seed=pair + 1, minval=-strength, maxval=strength
        )
        return {**batch, "x": x + shift}

    return tf.data.Dataset.zip((dataset, seeds)).map(apply, num_parallel_calls=tf.data.AUTOTUNE)


def make_data(folder: Path, *, batches: int) -> None:
    rng = np.random.default_rng(0)
    rows = BATCH * batches
    x = rng.random((rows, *SHAPE), dtype=np.float32)
    np.savez(folder / "train.npz", x=x, y=rng.integers(0, 10, rows))


def timed(epoch: Callable[[int], Iterable[Any]], *, epochs: int, step_s: float) -> Result:
    """(batches per second, share of time waiting) over ``epochs`` epochs after a warm-up one.

    Each epoch starts a fresh pass in its own shuffled order, as a trial's training loop does.
    """
    for _ in epoch(0):  # warm-up: imports, graph building, worker start
        pass
    waited, count, started = 0.0, 0, time.perf_counter()
    for number in range(1, epochs + 1):
        iterator = iter(epoch(number))
        while True:
            before = time.perf_counter()
            try:
                next(iterator)
            except StopIteration:
                break
            waited += time.perf_counter() - before
            count += 1
            if step_s:
                time.sleep(step_s)
    elapsed = time.perf_counter() - started
    return count / elapsed, waited / elapsed


def service_epochs(config: dict[str, Any], *, seed: int) -> Callable[[int], Iterable[Any]]:
    import ultron.data

    ultron.data.set_service(config, seed=seed)

    def epoch(number: int) -> Iterator[Any]:
        with ultron.data.batches(epoch=number) as stream:
            yield from stream

    return epoch


def local_epochs(manifest: dict[str, Any], *, seed: int) -> Callable[[int], Iterable[Any]]:
    import torch

    from datamanager.pipeline import build_dataset, epoch_seed, import_tensorflow

    tf = import_tensorflow()

    def epoch(number: int) -> Iterator[Any]:
        dataset = build_dataset(
            manifest,
            batch_size=BATCH,
            seed=epoch_seed(seed, number),
            pipeline=augment,
            hyperparameters={},
        )
        for batch in dataset:
            yield tf.nest.map_structure(torch.from_dlpack, batch)

    return epoch


class _Images:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.x: Any = None
        self.y: Any = None

    def __len__(self) -> int:
        with np.load(self.path) as arrays:
            return len(arrays["y"])

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        if self.x is None:
            with np.load(self.path) as arrays:
                self.x, self.y = arrays["x"], arrays["y"]
        rng = np.random.default_rng(index)
        image = self.x[index]
        if rng.random() < 0.5:
            image = image[:, ::-1]
        return (image + rng.uniform(-0.1, 0.1)).astype(np.float32), self.y[index]


def loader_epochs(path: Path) -> Callable[[int], Iterable[Any]]:
    import torch

    images: Any = _Images(path)
    loader: Any = torch.utils.data.DataLoader(
        images,
        batch_size=BATCH,
        shuffle=True,
        num_workers=2,
        persistent_workers=True,
        prefetch_factor=4,
    )
    return lambda number: loader


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3, help="epochs measured per run")
    parser.add_argument("--batches", type=int, default=40, help="batches per epoch")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the median is shown")
    parser.add_argument("--step-ms", type=float, default=30.0, help="simulated training step")
    args = parser.parse_args(argv)
    from datamanager import DataSpec, start_data_service

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        make_data(folder, batches=args.batches)
        spec = DataSpec(
            url="train.npz", batch_size=BATCH, pipeline="benchmarks.data_throughput:augment"
        )
        with start_data_service(
            spec, job_id="bench", seed=0, base_dir=folder, work_dir=folder / "service"
        ) as handle:
            runs = {
                "service": lambda: service_epochs(handle.trial_config(), seed=1),
                "local tf.data": lambda: local_epochs(handle.manifest, seed=1),
                "torch DataLoader": lambda: loader_epochs(folder / "train.npz"),
            }
            rounds: dict[str, list[tuple[float, float, float]]] = {name: [] for name in runs}
            for _ in range(args.rounds):  # interleaved: other load on the machine hits all alike
                for name, make in runs.items():
                    rate, _ = timed(make(), epochs=args.epochs, step_s=0.0)
                    step = timed(make(), epochs=args.epochs, step_s=args.step_ms / 1e3)
                    rounds[name].append((rate, *step))
            results = {name: _median(values) for name, values in rounds.items()}
    _print(results, step_ms=args.step_ms)


def _median(values: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    columns = np.median(np.array(values), axis=0)
    return float(columns[0]), float(columns[1]), float(columns[2])


def _print(results: dict[str, tuple[float, float, float]], *, step_ms: float) -> None:
    print(f"{'':18}{'batches/s':>10}{f'with {step_ms:g} ms step':>20}{'waiting':>9}")
    for name, (rate, step_rate, share) in results.items():
        print(f"{name:18}{rate:10.1f}{step_rate:20.1f}{100 * share:8.0f}%")
    ratio = results["service"][0] / results["local tf.data"][0]
    print(f"service / local tf.data: {100 * ratio:.0f}%")


if __name__ == "__main__":
    main()
