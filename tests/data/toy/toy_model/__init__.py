"""Tiny models for ultron's tests.

Every ``score`` call appends one line to the file named by ``TOY_CALLS_FILE`` (when set), so a
test can count how often each configuration was really trained.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time

import ultron


def _log(**entry: object) -> None:
    """Append one JSON line to the file named by ``TOY_CALLS_FILE`` (when set)."""
    path = os.environ.get("TOY_CALLS_FILE")
    if path:
        with open(path, "a") as handle:
            handle.write(json.dumps(entry, sort_keys=True) + "\n")


def _record(hyperparameters: dict) -> None:
    _log(**hyperparameters)


class Quadratic:
    """Loss (x - 2)^2 + y, with a few reports along the way."""

    def score(self, hyperparameters: dict, checkpoint_path: str, resume: bool) -> float:
        _record(hyperparameters)
        loss = (float(hyperparameters["x"]) - 2.0) ** 2 + float(hyperparameters.get("y", 0.0))
        for step in range(3):
            ultron.report(step, loss=loss + 1.0 / (step + 1))
        return loss


class Layered:
    """A network of ``layers`` (a list of dicts with a width), trained with ``optimizer``:
    refuses a configuration that holds an inactive parameter or lacks an active one."""

    def score(self, hyperparameters: dict, checkpoint_path: str, resume: bool) -> float:
        _record(hyperparameters)
        sgd = hyperparameters["optimizer"] == "sgd"
        if ("momentum" in hyperparameters) != sgd:
            raise ValueError(f"momentum must come with sgd and only then: {hyperparameters}")
        widths = [layer["width"] for layer in hyperparameters["layers"]]
        if any(set(layer) != {"width"} for layer in hyperparameters["layers"]):
            raise ValueError(f"a layer holds more than its width: {hyperparameters}")
        return sum(abs(w - 64) for w in widths) / 64 + (1 - hyperparameters.get("momentum", 0))


class Behaves:
    """Does what ``hyperparameters["behaviour"]`` says: ok, raise, nan, exit, exit_once (exits
    in its first attempt only), hang, no_metric."""

    def score(self, hyperparameters: dict, checkpoint_path: str, resume: bool) -> dict:
        _record(hyperparameters)
        behaviour = hyperparameters["behaviour"]
        if behaviour == "raise":
            raise ValueError("this configuration always fails")
        if behaviour == "exit":
            os._exit(1)
        marker = os.path.join(checkpoint_path, "attempted")
        if behaviour == "exit_once" and not os.path.exists(marker):
            open(marker, "w").close()  # the marker survives in the trial's checkpoint folder
            os._exit(1)
        if behaviour == "hang":
            time.sleep(3600)
        if behaviour == "nan":
            return {"loss": math.nan}
        if behaviour == "no_metric":
            return {"accuracy": 1.0}
        return {"loss": float(hyperparameters.get("x", 1.0)), "pid": float(os.getpid())}


class CountingSearch:
    """A user's own search algorithm (paper Fig. 5): x = 0, 1, 2, ... in order."""

    def __init__(self, search_space, *, start: int = 0, fail_at: int | None = None) -> None:
        self.names = list(search_space)
        self.next = start
        self.seen: list[float] = []
        self.fail_at = fail_at  # the master dies once when asked for x = fail_at

    def sample_hyperparameter_candidates(self, n: int) -> list[dict]:
        marker = f"{os.environ.get('TOY_CALLS_FILE')}.failed"
        if self.fail_at is not None and self.next >= self.fail_at and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("the master dies here, once")
        batch = [{"x": self.next + i} for i in range(n)]
        self.next += n
        return batch

    def update_state(self, hyperparameter_candidates: list, validation_scores: list) -> None:
        self.seen.extend(validation_scores)

    def state_dict(self) -> dict:
        return {"next": self.next}

    def load_state_dict(self, state: dict) -> None:
        self.next = state["next"]


class Stubborn:
    """Reports a loss of ``x`` every 0.2 s for ``steps`` steps and never listens to a stop."""

    def score(self, hyperparameters: dict, checkpoint_path: str, resume: bool) -> float:
        _record(hyperparameters)
        x = float(hyperparameters["x"])
        for step in range(1, int(hyperparameters.get("steps", 20)) + 1):
            ultron.report(step, loss=x)  # the decision is ignored on purpose
            time.sleep(0.2)
        return x


class Sleepy:
    """Logs its start and end, sleeps ``sleep`` seconds (default 0.6), returns ``x``; with
    ``gate`` (a path) it first waits for that file to exist, so a test holds its trials."""

    def score(self, hyperparameters: dict, checkpoint_path: str, resume: bool) -> float:
        x = float(hyperparameters["x"])
        _log(event="start", x=x, resume=resume)
        gate = hyperparameters.get("gate")
        while gate and not os.path.exists(gate):
            time.sleep(0.05)
        time.sleep(float(hyperparameters.get("sleep", 0.6)))
        _log(event="end", x=x)
        return x


class Epochs:
    """Trains ``epochs`` epochs of ``epoch_s`` seconds, checkpointing after each one.

    Each finished epoch is logged with the Dask worker's pid (this process's parent), so a test
    can kill the worker of a chosen trial and count the epochs trained in total.
    """

    def score(self, hyperparameters: dict, checkpoint_path: str, resume: bool) -> float:
        x = float(hyperparameters["x"])
        state = os.path.join(checkpoint_path, "state.json")
        start = 0
        if resume and os.path.exists(state):
            with open(state) as handle:
                start = json.load(handle)["epoch"] + 1
        for epoch in range(start, int(hyperparameters.get("epochs", 8))):
            time.sleep(float(hyperparameters.get("epoch_s", 0.4)))
            with open(state + ".tmp", "w") as handle:
                json.dump({"epoch": epoch}, handle)
            os.replace(state + ".tmp", state)
            _log(event="epoch", x=x, epoch=epoch, worker_pid=os.getppid(), resume=resume)
            if not ultron.report(epoch, loss=x):
                break  # stopped or suspended: the checkpoint is saved
        return x


class Streamer:
    """Reads ``epochs`` epochs from the job's data service and logs the example ids it saw."""

    def score(self, hyperparameters: dict, checkpoint_path: str, resume: bool) -> float:
        import ultron.data

        for epoch in range(int(hyperparameters.get("epochs", 2))):
            started = time.time()
            ids: list[int] = []
            with ultron.data.batches(epoch=epoch, framework="numpy") as stream:
                for batch in stream:
                    ids.extend(int(i) for i in batch["id"])
                    time.sleep(0.05)  # a training step (long enough for the trials to overlap)
            _log(
                x=float(hyperparameters["x"]), epoch=epoch, ids=ids, start=started, end=time.time()
            )
        return float(hyperparameters["x"])


class Checkpointed:
    """Checkpoints every epoch with ``ultron.checkpoints``; with ``lose_disk_once`` its first
    attempt wipes its local checkpoints at epoch 3 and dies, as a node that is lost would."""

    def score(self, hyperparameters: dict, checkpoint_path: str, resume: bool) -> float:
        import shutil

        from ultron.checkpoints import latest_local, mark_complete, new_checkpoint_dir

        x = float(hyperparameters["x"])
        start = 0
        latest = latest_local(checkpoint_path) if resume else None
        if latest is not None:
            with open(os.path.join(latest, "state.json")) as handle:
                start = json.load(handle)["epoch"] + 1
        for epoch in range(start, 6):
            time.sleep(0.3)
            folder = new_checkpoint_dir(checkpoint_path, epoch)
            with open(os.path.join(folder, "state.json"), "w") as handle:
                json.dump({"epoch": epoch}, handle)
            mark_complete(folder)
            _log(event="epoch", x=x, epoch=epoch, resume=resume)
            marker = f"{os.environ.get('TOY_CALLS_FILE')}.lost-{x}"
            if hyperparameters.get("lose_disk_once") and epoch == 3 and not os.path.exists(marker):
                time.sleep(1.5)  # the side thread uploads epoch 3 meanwhile
                open(marker, "w").close()
                shutil.rmtree(checkpoint_path)
                os._exit(1)
        return x


class Chatty:
    """Prints for the trial-log tests, and waits for the test between its two halves.

    Prints ``first-out``/``first-err`` (stdout/stderr) with its trial's ``x`` and the content of
    ``<folder>/secret.txt``, waits until ``<folder>/release`` exists, then prints
    ``second-out``/``second-err``; with ``fail`` it prints 30 numbered lines and raises.
    """

    def score(self, hyperparameters: dict, checkpoint_path: str, resume: bool) -> float:
        import sys

        folder, x = hyperparameters["folder"], float(hyperparameters.get("x", 0.0))
        with open(os.path.join(folder, "secret.txt")) as handle:
            secret = handle.read().strip()
        print(f"first-out x={x} token={secret}")
        print(f"first-err x={x}", file=sys.stderr)
        release, deadline = os.path.join(folder, "release"), time.monotonic() + 300
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.05)  # the test creates the file once it has seen the first half
        print(f"second-out x={x}")
        print(f"second-err x={x}", file=sys.stderr)
        if hyperparameters.get("fail"):
            for line in range(30):
                print(f"failing line {line}")
            raise RuntimeError("chatty failed on purpose")
        return x


class Timed:
    """Sleeps ``sleep`` seconds and returns ``x`` as the loss with the wall-clock ``start`` and
    ``end`` of its run: the trial table then tells how many trials ran at once."""

    def score(self, hyperparameters: dict, checkpoint_path: str, resume: bool) -> dict:
        start = time.time()
        time.sleep(float(hyperparameters.get("sleep", 2.0)))
        return {"loss": float(hyperparameters["x"]), "start": start, "end": time.time()}


class Clocked:
    """Trains ``sleep`` seconds (default 2) in steps of 0.25 s, reporting ``score`` = ``x`` after
    each (it stops when told to); logs its start and end with the wall time."""

    def score(self, hyperparameters: dict, checkpoint_path: str, resume: bool) -> float:
        x = float(hyperparameters["x"])
        _log(event="start", x=x, at=time.time())
        for step in range(round(float(hyperparameters.get("sleep", 2.0)) / 0.25)):
            time.sleep(0.25)
            if not ultron.report(step, score=x):
                break
        _log(event="end", x=x, at=time.time())
        return x


class ReadsText:
    """Reads ``hyperparameters["epochs"]`` epochs of the job's streamed text data (each line
    ``<id> <words>``) and logs, per epoch, the ids in the order they came."""

    def score(self, hyperparameters: dict, checkpoint_path: str, resume: bool) -> float:
        import ultron.data

        seen = 0
        for epoch in range(int(hyperparameters["epochs"])):
            with ultron.data.batches(epoch=epoch, framework="numpy") as stream:
                ids = [int(line.split(" ", 1)[0]) for batch in stream for line in batch["text"]]
            _log(event="epoch", tag=hyperparameters["tag"], epoch=epoch, ids=ids)
            seen += len(ids)
            ultron.report(epoch, records=float(seen))
        return float(seen)


class Population:
    """For population-based training: the weights are one number that grows by ``lr`` per
    epoch, checkpointed after every epoch.

    Every checkpoint it writes is registered by its content's sha256 in the folder named by
    ``TOY_REGISTRY``; every checkpoint it loads is looked up there and the load logged (with
    the trial that wrote it), so a test sees that each exploit got a checkpoint some trial
    wrote and nothing else. The trial's id is its checkpoint folder's name.
    """

    def score(self, hyperparameters: dict, checkpoint_path: str, resume: bool) -> float:
        from ultron.checkpoints import latest_local, mark_complete, new_checkpoint_dir

        me, registry = os.path.basename(checkpoint_path), os.environ["TOY_REGISTRY"]
        weight, start = 0.0, 1
        latest = latest_local(checkpoint_path) if resume else None
        if latest is not None:
            data = (latest / "state.json").read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            state = json.loads(data)
            known = os.path.exists(os.path.join(registry, digest))
            _log(event="load", trial=me, writer=state["writer"], epoch=state["epoch"], known=known)
            if not known:
                raise RuntimeError(f"checkpoint {latest} was written by no trial")
            weight, start = state["weight"], state["epoch"] + 1
        for epoch in range(start, int(hyperparameters["epochs"]) + 1):
            time.sleep(float(hyperparameters.get("epoch_s", 0.0)))
            weight += float(hyperparameters["lr"])
            data = json.dumps({"writer": me, "epoch": epoch, "weight": weight}).encode()
            folder = new_checkpoint_dir(checkpoint_path, epoch)
            (folder / "state.json").write_bytes(data)
            open(os.path.join(registry, hashlib.sha256(data).hexdigest()), "w").close()
            mark_complete(folder)
            if not ultron.report(epoch, accuracy=weight):
                break  # suspended: the checkpoint is saved
        return weight
