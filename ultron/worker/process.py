"""The trial process: a warm child of a Dask worker that runs the user's ``score``.

It is started with the trial environment's interpreter (``python -P -m ultron.worker.process FD
[CODE_PATH ...]``): the code base's names import from its folders first
(:func:`ultron.usercode.claim_names`) and the worker's current folder is not on
``sys.path``, so the user's modules own their names. It imports the user's model once,
then serves trial requests over a socket until the socket closes. A user error is caught and
reported, and the process serves the next trial; a crash kills only this process, which the
worker replaces (see :mod:`ultron.worker.runner`). What ``score`` returned becomes the trial's
score and metrics in :mod:`ultron.worker.return_values`; an allocation that failed is told
apart and explained in :mod:`ultron.worker.out_of_memory`.

The socket is the trial's only way out to the job: the process holds no Redis credentials (not
in its environment, its argv or its requests). ``ultron.report`` sends each report on it as
``{"op": "report", "entry": ...}`` and waits for the worker's ``{"op": "decision", "stop":
...}``; the worker writes the report under the job's keys (:mod:`ultron.worker.runner`).

Isolation (:mod:`ultron.worker.isolation`): the process holds itself to the spec's
``resources.memory`` (``RLIMIT_DATA``, soft and hard, set before the user's code is imported)
and, with a fractional ``resources.gpu``, to that share of its GPU's memory
(:mod:`ultron.worker.gpu_memory`), and it is a child subreaper, so a process that a trial
starts stays below it even when it calls ``setsid``: every such process is killed when
``score`` returns and when this process gets SIGTERM.
"""

from __future__ import annotations

import importlib
import io
import os
import random
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

from ultron.model import TrialContext, set_current_trial
from ultron.usercode import claim_names
from ultron.worker.cuda_warmup import start_cuda
from ultron.worker.determinism import apply_determinism
from ultron.worker.gpu_memory import cap_gpu_memory
from ultron.worker.isolation import become_subreaper, end_descendants, limit_memory
from ultron.worker.out_of_memory import is_out_of_memory, memory_error
from ultron.worker.return_values import add_asked_metrics, objective_and_metrics, recordable

__all__ = ["main"]


def _on_sigterm(signum: int, frame: Any) -> None:
    """The runner stops this process: take every process the trial started along."""
    end_descendants()
    os._exit(128 + signum)


def _load_model_class(path: str, cache: dict[str, Any]) -> Any:
    if path not in cache:
        module_name, _, class_name = path.partition(":")
        cache[path] = getattr(importlib.import_module(module_name), class_name)
    return cache[path]


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(seed)
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(seed)


def _data_service(request: dict[str, Any]) -> None:
    """Point ``ultron.data`` at the job's data service for this trial."""
    import ultron.data

    ultron.data.set_service(
        request["data"], seed=int(request["seed"]), hyperparameters=request["hyperparameters"]
    )


def _no_worker(entry: dict[str, Any]) -> bool:
    """Where no worker listens (a unit test of :func:`run_one`): keep the report, go on."""
    return False


def worker_channel(conn: Connection) -> Callable[[dict[str, Any]], bool]:
    """``ultron.report``'s way to the worker: send one report, return the worker's answer
    (stop or not). One report at a time, from whichever thread of ``score`` makes it."""
    lock = threading.Lock()

    def send(entry: dict[str, Any]) -> bool:
        with lock:
            conn.send({"op": "report", "entry": entry})
            answer = conn.recv()
        return bool(answer.get("stop"))

    return send


def run_one(
    request: dict[str, Any],
    models: dict[str, Any],
    send: Callable[[dict[str, Any]], bool] = _no_worker,
) -> dict[str, Any]:
    """Run one trial request; never raises for the user's errors.

    Args:
        request: the trial request as the worker sent it (no Redis URL in it).
        models: model classes imported so far, by ``module:Class``.
        send: hands one ``ultron.report`` entry to the worker; true when the trial should stop.
    """
    started = time.monotonic()
    context = TrialContext(request["job_id"], request["trial_id"], send)
    set_current_trial(context)
    out: dict[str, Any] = {"status": "completed"}
    try:
        model_class = _load_model_class(request["model"], models)
        os.makedirs(request["checkpoint_path"], exist_ok=True)
        _seed_everything(int(request["seed"]))
        apply_determinism(int(request["seed"]), enabled=bool(request.get("deterministic")))
        if request.get("data") is not None:
            _data_service(request)
        value = model_class().score(
            dict(request["hyperparameters"]), request["checkpoint_path"], bool(request["resume"])
        )
        out["score"], metrics = objective_and_metrics(value, request["metric"])
        add_asked_metrics(value, metrics, request.get("metrics") or ())
        out["metrics"], out["notes"] = recordable(metrics)
    except (Exception, SystemExit) as exc:  # whatever the user's code raises is recorded
        if is_out_of_memory(exc):
            # Drop score's locals (the memory it holds) before formatting anything.
            traceback.clear_frames(exc.__traceback__)
            error = memory_error(
                exc, request.get("memory_limit"), request.get("gpu_memory_fraction")
            )
            out = {"status": "out_of_memory", "error": error}
        else:
            out = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
        out["traceback"] = traceback.format_exc()
    finally:
        set_current_trial(None)
        if request.get("data") is not None:
            import ultron.data

            ultron.data.set_service(None)
    out["duration"] = time.monotonic() - started
    out["reports"] = len(context.reports)
    out["curve"] = context.reports
    return out


def _redirect_output(log_path: str) -> None:
    """Send this trial's stdout and stderr (C-level too) to its log file."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    # A file makes Python buffer 8 KiB at a time: line by line, the worker ships each line as
    # the trial prints it (ultron.worker.trial_log).
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and not stream.line_buffering:
            stream.reconfigure(line_buffering=True)


def _exit_with_parent() -> None:
    """End this process when its worker dies (a trial must not outlive its worker)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        end_descendants()
        os._exit(70)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _has_children() -> bool:
    """Whether this process has a child, a zombie included (Linux: ``/proc/self/task/*/
    children``). As a subreaper it adopts every orphan below it, so no child means nothing
    below it at all. ``True`` where the kernel does not say."""
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children", "rb") as children:
                if children.read().strip():
                    return True
    except OSError:
        return True
    return False


def main(
    fd: int,
    code_paths: Sequence[str] = (),
    *,
    memory_limit: int | None = None,
    gpu_memory_fraction: float | None = None,
) -> None:
    """Serve requests on the inherited socket ``fd`` until it closes or says ``exit``.

    Args:
        fd: the socket to the worker.
        code_paths: the code base's import folders: its names import from them first.
        memory_limit: bytes of private memory this process may hold (``resources.memory``).
        gpu_memory_fraction: share of its GPU's memory this process may hold (a fractional
            ``resources.gpu``), set in PyTorch and TensorFlow as the model imports them.
    """
    limit_memory(memory_limit)
    become_subreaper()
    signal.signal(signal.SIGTERM, _on_sigterm)
    claim_names(code_paths)
    cap_gpu_memory(gpu_memory_fraction)  # first on sys.meta_path: sees every import of them
    _exit_with_parent()
    conn = Connection(fd)
    send = worker_channel(conn)
    models: dict[str, Any] = {}
    conn.send({"op": "ready", "pid": os.getpid()})
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        op = request.get("op")
        if op == "exit":
            return
        if op == "import":
            try:
                _load_model_class(request["model"], models)
                if request.get("cuda"):  # a GPU job's: CUDA ready before the first trial
                    start_cuda()
                conn.send({"op": "imported"})
            except Exception as exc:
                conn.send({"op": "imported", "error": f"{type(exc).__name__}: {exc}"})
            continue
        _redirect_output(request["log_path"])
        out = run_one(request, models, send)
        sys.stdout.flush()  # a last line without its end: in the log before the answer
        sys.stderr.flush()
        if _has_children():  # the scan of /proc costs milliseconds; most trials start nothing
            end_descendants()  # before the answer: when the worker hears it, they are gone
        conn.send(out)


def _parse_args(argv: Sequence[str]) -> tuple[int, list[str], int | None, float | None]:
    """``FD [--memory-limit=BYTES] [--gpu-memory-fraction=F] [CODE_PATH ...]``."""
    rest, limit, fraction = list(argv[1:]), None, None
    while rest and rest[0].startswith("--"):
        option, _, value = rest.pop(0).partition("=")
        if option == "--memory-limit":
            limit = int(value)
        elif option == "--gpu-memory-fraction":
            fraction = float(value)
        else:
            raise SystemExit(f"unknown option {option}")
    return int(argv[0]), rest, limit, fraction


if __name__ == "__main__":
    _fd, _paths, _limit, _fraction = _parse_args(sys.argv[1:])
    main(_fd, _paths, memory_limit=_limit, gpu_memory_fraction=_fraction)
