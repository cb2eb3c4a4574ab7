"""Checkpoint overhead: how much checkpointing slows the training loop (paper V-H).

Trains the same small PyTorch MLP (:mod:`benchmarks.checkpoint_model`, about 7.8 MB per
checkpoint) four ways, interleaved round by round so that the load of a shared machine falls
on all of them alike:

- ``off``: no checkpoints;
- ``local``: ``save_torch`` into a new epoch folder + ``COMPLETE`` every epoch, no upload;
- ``s3-side``: the same, with a :class:`~ultron.worker.syncer.CheckpointSyncer` in another
  process (as in the Dask worker, whose trial process trains) uploading each epoch to S3;
- ``s3-thread``: the syncer thread in the training process itself (shares its GIL).

S3 is moto's server in a child process on loopback (or ``--endpoint``); the syncer keeps the
last two checkpoints. The loop time excludes the final ``stop()`` (the finalizer's wait),
shown apart. Each row gives medians over the rounds (and the best round): wall time of the
loop and of one epoch, and this process's CPU time (the syncer's counts only in ``s3-thread``;
the server's never).

After each run with checkpoints, a resume is timed as a resumed trial pays it: in ``local``
the newest checkpoint is loaded from its folder (the same worker); in the S3 modes it is first
restored from the store into an empty folder (``restore_latest``: another worker), then loaded;
both end with the weights and optimizer state in a fresh model (``resume s``). The simulator's
checkpoint costs (:class:`ultron.simulation.costs.SimulationCosts`) come from ``save s`` and
``resume s``.

    python -m benchmarks.checkpoint_overhead --epochs 6 --rounds 5 [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.checkpoint_model import DigitsTrainer
from ultron.checkpoints import load_latest_torch, save_torch
from ultron.worker.checkpoint_store import remote_fs, restore_latest
from ultron.worker.syncer import CheckpointSyncer

MODES = ("off", "local", "s3-side", "s3-thread")


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    """moto's S3 server in a child process on a free loopback port; returns it and its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return server, f"http://127.0.0.1:{port}"


def make_bucket(endpoint: str, bucket: str, timeout_s: float = 60.0) -> None:
    """Wait until the server at ``endpoint`` accepts connections, then create ``bucket``."""
    import s3fs

    host, port = endpoint.split("://")[1].split(":")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint}, skip_instance_cache=True)
    if not fs.exists(bucket):
        fs.mkdir(bucket)


def _side_syncer(local: Path, remote: str, options: dict, ready: Any, stop: Any, out: Any) -> None:
    parent = os.getppid()
    fs, root = remote_fs(remote, options)
    fs.exists(root)  # a warm client, as in a long-lived worker (fsspec caches the instance)
    syncer = CheckpointSyncer(local, remote, storage_options=options)
    syncer.start()
    ready.set()
    while not stop.wait(1.0) and os.getppid() == parent:
        pass
    flushed = syncer.stop(timeout_s=120)
    out.put({"flushed": flushed, "uploaded": len(syncer.uploaded), "errors": len(syncer.errors)})


class SideSyncer:
    """A CheckpointSyncer in another process, as it runs in the worker beside the trial."""

    def __init__(self, local: Path, remote: str, options: dict[str, Any]) -> None:
        context = multiprocessing.get_context("spawn")
        self.ready, self.stop_event, self.out = context.Event(), context.Event(), context.Queue()
        self.process = context.Process(
            target=_side_syncer,
            args=(local, remote, options, self.ready, self.stop_event, self.out),
            daemon=True,
        )
        self.process.start()
        self.ready.wait(120)

    def stop(self) -> dict[str, Any]:
        self.stop_event.set()
        result: dict[str, Any] = self.out.get(timeout=180)
        self.process.join(30)
        return result


def run_once(mode: str, args: argparse.Namespace, remote: str, options: dict[str, Any]) -> dict:
    trainer = DigitsTrainer(args.samples, hidden=args.hidden, seed=0)
    local = Path(tempfile.mkdtemp(prefix=f"ckpt-{mode}-"))
    remote = f"{remote}/{uuid.uuid4().hex[:8]}"
    side = SideSyncer(local, remote, options) if mode == "s3-side" else None
    thread = CheckpointSyncer(local, remote, storage_options=options)
    if mode == "s3-thread":
        fs, root = remote_fs(remote, options)
        fs.exists(root)  # the same warm client as the side process
        thread.start()
    epochs: list[float] = []
    saves: list[float] = []
    started, cpu_started = time.perf_counter(), time.process_time()
    for epoch in range(args.epochs):
        begin = time.perf_counter()
        trainer.train_epoch()
        if mode != "off":
            save_started = time.perf_counter()
            save_torch(trainer.state(epoch), local, epoch)
            saves.append(time.perf_counter() - save_started)
        epochs.append(time.perf_counter() - begin)
    loop, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    row = {"mode": mode, "loop": loop, "cpu": cpu, "epochs": epochs, "saves": saves, "stop": 0.0}
    stop_started = time.perf_counter()
    if side is not None:
        row.update(side.stop())
    elif mode == "s3-thread":
        row["flushed"] = thread.stop(timeout_s=120)
        row["uploaded"], row["errors"] = len(thread.uploaded), len(thread.errors)
    row["stop"] = time.perf_counter() - stop_started
    if mode != "off":
        row["resume"] = time_resume(mode, args, local, remote, options)
    row["size_mb"] = sum(f.stat().st_size for f in local.rglob("*.pt")) / max(len(saves), 1) / 1e6
    shutil.rmtree(local, ignore_errors=True)
    return row


def time_resume(
    mode: str, args: argparse.Namespace, local: Path, remote: str, options: dict[str, Any]
) -> float:
    """Seconds to resume from the run's newest checkpoint into a fresh model: loaded from
    ``local`` (``local`` mode), or restored from the store into an empty folder first."""
    fresh = DigitsTrainer(args.samples, hidden=args.hidden, seed=1)
    folder = local
    target = Path(tempfile.mkdtemp(prefix=f"resume-{mode}-"))
    try:
        started = time.perf_counter()
        if mode != "local":
            restore_latest(remote, target, storage_options=options)
            folder = target
        fresh.restore(load_latest_torch(folder))
        return time.perf_counter() - started
    finally:
        shutil.rmtree(target, ignore_errors=True)


def report(rows: list[dict], args: argparse.Namespace) -> None:
    by_mode = {mode: [r for r in rows if r["mode"] == mode] for mode in MODES}
    off = by_mode["off"]
    base = {
        "loop": statistics.median(r["loop"] for r in off),
        "best": min(r["loop"] for r in off),
        "epoch": statistics.median(e for r in off for e in r["epochs"]),
        "cpu": statistics.median(r["cpu"] for r in off),
    }
    print(
        f"\n{args.epochs} epochs x {args.rounds} rounds, {args.samples} samples, hidden "
        f"{args.hidden}; torch threads {args.threads}; {os.cpu_count()} CPU cores"
    )
    print(
        f"{'mode':<10}{'loop s':>8}{'ratio':>7}{'best s':>8}{'ratio':>7}{'epoch s':>9}{'ratio':>7}"
        f"{'CPU s':>7}{'ratio':>7}{'save s':>8}{'resume s':>9}{'ckpt MB':>9}{'stop s':>8}"
        f"{'uploaded':>10}"
    )
    for mode, runs in by_mode.items():
        loop = statistics.median(r["loop"] for r in runs)
        best = min(r["loop"] for r in runs)
        epoch = statistics.median(e for r in runs for e in r["epochs"])
        cpu = statistics.median(r["cpu"] for r in runs)
        saves = [s for r in runs for s in r["saves"]]
        save = statistics.median(saves) if saves else 0.0
        resumes = [r["resume"] for r in runs if "resume" in r]
        resume = f"{statistics.median(resumes):>9.3f}" if resumes else f"{'-':>9}"
        stop = statistics.median(r["stop"] for r in runs)
        uploaded = str(sum(r["uploaded"] for r in runs)) if "uploaded" in runs[0] else "-"
        print(
            f"{mode:<10}{loop:>8.2f}{loop / base['loop']:>7.3f}"
            f"{best:>8.2f}{best / base['best']:>7.3f}{epoch:>9.3f}{epoch / base['epoch']:>7.3f}"
            f"{cpu:>7.2f}{cpu / base['cpu']:>7.3f}{save:>8.3f}{resume}"
            f"{runs[0]['size_mb']:>9.1f}{stop:>8.2f}{uploaded:>10}"
        )
    for mode, runs in by_mode.items():
        print(f"  {mode:<10} loop s per round: {[round(r['loop'], 2) for r in runs]}")
    errors = sum(r.get("errors", 0) for r in rows)
    flushed = all(r.get("flushed", True) for r in rows)
    print(f"upload errors: {errors}; every stop() flushed: {flushed}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=12000)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--threads", type=int, default=0, help="torch threads; 0: torch's own")
    parser.add_argument("--endpoint", default="", help="an S3 endpoint; default: start moto")
    parser.add_argument("--bucket", default="ultron-bench")
    parser.add_argument("--json", default="", help="also write every run's numbers here")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # runs the finally: stops moto
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    args.threads = torch.get_num_threads()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    server, endpoint = (None, args.endpoint) if args.endpoint else start_moto()
    try:
        make_bucket(endpoint, args.bucket)
        options = {"client_kwargs": {"endpoint_url": endpoint}}
        DigitsTrainer(args.samples, hidden=args.hidden).train_epoch()  # warm up torch
        rows = []
        for round_ in range(args.rounds):
            shift = round_ % len(MODES)
            for mode in MODES[shift:] + MODES[:shift]:
                rows.append(run_once(mode, args, f"s3://{args.bucket}/bench", options))
                print(f"round {round_} {mode}: loop {rows[-1]['loop']:.2f} s", flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows}))
        report(rows, args)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
