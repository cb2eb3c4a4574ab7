"""Batches per second into torch tensors: the data service, a local tf.data pipeline, a DataLoader.

``python -m benchmarks.data_throughput [--epochs 20] [--step-epochs 3] [--batches 40] [--rounds 5]
[--step-ms 30]``

All three read the same 256 x 32 x 32 x 3 float32 batches with the same small augmentation (a
random horizontal flip and a random brightness shift per image):

- ``service``: the job's tf.data service as a job runs it by default (``placement:
  colocated``): the dispatcher in its own process, a worker of it in this (the trial's)
  process, read through :func:`ultron.data.batches` into torch tensors;
- ``service, remote``: the same with ``placement: service``: the worker in the service's
  process, the batches sent over gRPC;
- ``local tf.data``: the same pipeline (built by the same function, with the same shuffle
  buffer, batch size and augmentation) in this process, handed to torch through DLPack;
- ``torch DataLoader``: a map-style dataset with 2 worker processes.

Each is measured over whole epochs after a warm-up epoch (each epoch a pass in its own
shuffled order, read one after the other as a trial reads them: the service and the local
pipeline keep one dataset for all epochs), twice: as fast as it goes (batches per second, over
``--epochs``), and with a simulated training step (a sleep, as a GPU step leaves the CPU free;
over ``--step-epochs``) to show the share of time the step waits. The methods take turns for
``--rounds`` rounds and the median of each is shown (the machine may be shared); the
service / local ratio is the median of the rounds' ratios, each round's two runs having run
next to each other under the same load.
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

BATCH = 256
Result = tuple[float, float, float]  # batches/s, share of time waiting, CPU ms per batch
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
    """Batches per second, share of time waiting and CPU per batch over ``epochs`` epochs.

    Each epoch is a pass in its own shuffled order, read the way a trial's training loop
    reads it (one epoch after the other) after a warm-up epoch, which takes the start-up
    costs (imports, graph building, registering the pipeline, the first shuffle buffer). CPU
    time counts this process and its children (the service, the DataLoader's workers): unlike
    batches per second it does not depend on what else runs on the machine.
    """
    for _ in epoch(0):
        pass
    waited, count = 0.0, 0
    cpu, started = _cpu_seconds(), time.perf_counter()
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
    return count / elapsed, waited / elapsed, 1e3 * (_cpu_seconds() - cpu) / count


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its live child processes (Linux ``/proc``)."""
    total = time.process_time()
    me, tick = str(os.getpid()), os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if fields[1] == me:  # the parent's pid
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def service_epochs(config: dict[str, Any], *, seed: int) -> Callable[[int], Iterable[Any]]:
    """Epochs through :func:`ultron.data.batches`, as a trial reads them."""
    import ultron.data

    ultron.data.set_service(config, seed=seed)

    def epoch(number: int) -> Iterator[Any]:
        with ultron.data.batches(epoch=number) as stream:
            yield from stream

    return epoch


def local_epochs(
    config: dict[str, Any], *, seed: int, epochs: int
) -> Callable[[int], Iterable[Any]]:
    """The same pipeline, built by the same function with the same settings, run here.

    As in the service, one dataset covers all epochs and an epoch is cut after its number
    of batches, so the next epoch's shuffle buffer fills while this one drains.
    """
    import torch

    from ultron.datamanager.pipeline import (
        build_dataset,
        epoch_length,
        import_tensorflow,
        load_function,
    )

    tf = import_tensorflow()
    pipeline = load_function(config["pipeline"])  # the service's own settings, all of them
    size, drop = int(config["batch_size"]), bool(config["drop_remainder"])
    dataset = build_dataset(
        config["manifest"],
        batch_size=size,
        seed=seed,
        epochs=epochs,
        shuffle_buffer=int(config["shuffle_buffer"]),
        drop_remainder=drop,
        pipeline=pipeline,
        hyperparameters={},
    )
    count = epoch_length(
        config["manifest"],
        batch_size=size,
        drop_remainder=drop,
        pipeline=pipeline,
        hyperparameters={},
    )
    if count is None:
        raise RuntimeError(f"{config['pipeline']} changes the number of batches of an epoch")
    iterator = iter(dataset)

    def epoch(number: int) -> Iterator[Any]:
        for _ in range(count):
            tag, batch = next(iterator)
            assert int(tag) == number
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
    parser.add_argument("--epochs", type=int, default=20, help="epochs measured for batches/s")
    parser.add_argument(
        "--step-epochs", type=int, default=3, help="epochs measured with the training step"
    )
    parser.add_argument("--batches", type=int, default=40, help="batches per epoch")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the median is shown")
    parser.add_argument("--step-ms", type=float, default=30.0, help="simulated training step")
    args = parser.parse_args(argv)
    from ultron.datamanager import DataSpec, start_data_service

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        make_data(folder, batches=args.batches)

        def start(placement: str) -> Any:
            spec = DataSpec(
                url="train.npz",
                batch_size=BATCH,
                pipeline="benchmarks.data_throughput:augment",
                placement=placement,
            )
            return start_data_service(
                spec, job_id="bench", seed=0, base_dir=folder, work_dir=folder / placement
            )

        with start("colocated") as handle, start("service") as remote:
            config = handle.trial_config()
            most = max(args.epochs, args.step_epochs)
            runs = {
                "service": lambda: service_epochs(config, seed=1),
                "service, remote": lambda: service_epochs(remote.trial_config(), seed=1),
                "local tf.data": lambda: local_epochs(config, seed=1, epochs=1 + most),
                "torch DataLoader": lambda: loader_epochs(folder / "train.npz"),
            }
            rounds: dict[str, list[tuple[float, ...]]] = {name: [] for name in runs}
            for _ in range(args.rounds):  # interleaved: other load on the machine hits all alike
                for name, make in runs.items():
                    rate, _, cpu = _run(make, epochs=args.epochs, step_s=0.0)
                    step_rate, share, _ = _run(
                        make, epochs=args.step_epochs, step_s=args.step_ms / 1e3
                    )
                    rounds[name].append((rate, cpu, step_rate, share))
    _print(rounds, step_ms=args.step_ms)


def _run(make: Callable[[], Callable[[int], Iterable[Any]]], **kwargs: Any) -> Result:
    """One timed run; afterwards nothing of it keeps reading ahead while the next one runs."""
    import ultron.data

    try:
        return timed(make(), **kwargs)
    finally:
        ultron.data.set_service(None)  # stops the trial's reader and its service job
        gc.collect()  # the local iterator, the DataLoader's workers


def _print(rounds: dict[str, list[tuple[float, ...]]], *, step_ms: float) -> None:
    results = {name: np.median(np.array(values), axis=0) for name, values in rounds.items()}
    step = f"with {step_ms:g} ms step"
    print(f"{'':18}{'batches/s':>10}{'CPU ms/batch':>14}{step:>20}{'waiting':>9}")
    for name, (rate, cpu, step_rate, share) in results.items():
        print(f"{name:18}{rate:10.1f}{cpu:14.1f}{step_rate:20.1f}{100 * share:8.0f}%")
    # Each round's service run is compared with the local run next to it, under the same load.
    for name in ("service", "service, remote"):
        pairs = list(zip(rounds[name], rounds["local tf.data"], strict=True))
        ratios = [service[0] / local[0] for service, local in pairs]
        each = ", ".join(f"{100 * r:.0f}%" for r in ratios)
        cpu_ratio = float(np.median([local[1] / service[1] for service, local in pairs]))
        print(
            f"{name} / local tf.data: {100 * float(np.median(ratios)):.0f}% (rounds: {each}); "
            f"local / {name} CPU per batch: {100 * cpu_ratio:.0f}%"
        )
    print("(CPU per batch: what the ratio would be with both bound by this machine's CPU alone)")


if __name__ == "__main__":
    main()
