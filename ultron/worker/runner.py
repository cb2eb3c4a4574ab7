"""Runs trials on a Dask worker, each in a warm trial process (:mod:`ultron.worker.pool`).

The function Dask runs is :func:`run_trial`: it lends a warm process of the trial's code base,
memory limit and credentials (:func:`reads_object_store`) to one attempt, restores and syncs
its checkpoints, waits for its answer (stopping it past ``trial_timeout`` or an ignored early
stop), and writes the answer to Redis before returning it: the master reads it from there, and
Dask running the attempt again gets it back instead of a second run. While the attempt runs, its
output goes to the job's storage (:mod:`ultron.worker.trial_log`), all of it before the answer.

The worker is the trial's only way to Redis: the trial process gets its request without the
Redis URL (:func:`trial_message`) and an environment without it
(:func:`ultron.secrets.trial_environ`). Its ``ultron.report`` calls come over the socket to the
trial process, and :func:`~ultron.worker.reports.wait_for_answer` writes each under the job's keys
(the trial's reports and, with early stopping, the job's report stream) and answers with the
stop flag.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from ultron.redis import keys
from ultron.settings import settings
from ultron.trial_records import TrialRequest, TrialResult, TrialStatus, stored_answer
from ultron.worker.checkpoints import (
    ExploitError,
    begin_sync,
    exploit_for,
    finish_sync,
    restore_for,
    start_sync,
)
from ultron.worker.devices import on_claimed_gpus
from ultron.worker.pool import ProcessDied, WarmProcess, checkin, checkout, warm_up
from ultron.worker.reports import ForcedStop, last_reported, wait_for_answer
from ultron.worker.trial_log import ship_trial_log

__all__ = ["await_trial", "reads_object_store", "run_trial", "trial_message", "warm_up_worker"]

logger = logging.getLogger(__name__)

# URL schemes a trial reads without object-store credentials: its own disk, the data service.
_LOCAL_SCHEMES = ("", "file", "local", "grpc", "grpc+tls")


def reads_object_store(data: object) -> bool:
    """Whether a trial with this data config reads an object store itself (needs credentials).

    A job's data service stages the data (from ``s3://`` or wherever) on its own machine, and
    ``DataServiceHandle.trial_config()`` names only those local shards (``manifest.root``) and
    the dispatcher (``grpc://``): a trial reads them from its colocated worker or over gRPC
    and needs no credentials. Only a config naming another URL (``s3://``, ``gs://``, ...) does.
    Checkpoints need none either: the Dask worker restores and syncs them.

    Example:
        >>> reads_object_store({"dispatcher": "grpc://h:5050", "manifest": {"root": "/d"}})
        False
        >>> reads_object_store({"manifest": {"root": "s3://bucket/staged"}})
        True
    """
    if isinstance(data, str):
        return "://" in data and urlsplit(data).scheme.lower() not in _LOCAL_SCHEMES
    values = data.values() if isinstance(data, dict) else data
    return isinstance(values, Iterable) and any(map(reads_object_store, values))


def _worker_name() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().name)
    except (ImportError, ValueError):
        return f"pid-{os.getpid()}"


@functools.cache
def _fresh_processes() -> bool:
    """``ULTRON_FRESH_TRIAL_PROCESS``, read once per worker process (not on every trial)."""
    return settings().fresh_trial_process


_clients: dict[str, Any] = {}
_clients_lock = threading.Lock()


def _redis(url: str) -> Any:
    """The worker's one client of ``url``. Made under a lock: trials starting together in
    threads of one worker each made one, and a client dropped from the dict as another
    replaced it closed its pool under the trial still using it."""
    client = _clients.get(url)
    if client is None:
        from ultron.redis.client import connect

        with _clients_lock:
            client = _clients.get(url) or _clients.setdefault(url, connect(url))
    return client


def warm_up_worker(redis_url: str, *args: Any, **kwargs: Any) -> int:
    """Make this worker ready for its first trial: its warm trial processes
    (:func:`~ultron.worker.pool.warm_up`, with ``args`` and ``kwargs``) and its own side of a
    trial: its Redis client connected, the modules of the checkpoint syncer and the log
    shipper imported and the settings read.

    The first trial of each worker used to do the worker's side itself: 0.4 s of imports per
    worker on an idle core, 1-3 s when the P workers of a job did it at once on a few cores,
    and every slot waited (most of the overhead benchmark's loss at P=8). Here it runs in a
    side thread while the trial processes start; an error is raised here, failing the start.

    Returns:
        The trial processes started.
    """
    error: list[BaseException] = []

    def connect() -> None:
        try:
            import fsspec.implementations.local  # noqa: F401  (checkpoints and trial logs)

            _redis(redis_url).ping()
            _fresh_processes()  # the settings, read once
        except BaseException as exc:  # raised in the caller's thread below
            error.append(exc)

    thread = threading.Thread(target=connect, name="ultron-warm-up-worker")
    thread.start()
    started = warm_up(*args, **kwargs)
    thread.join()
    if error:
        raise error[0]
    return started


def trial_message(request: TrialRequest) -> dict[str, Any]:
    """The request as the trial process gets it: everything but the Redis URL (its password).

    Example:
        >>> request = TrialRequest("j", "t", {}, "m:M", "python", "loss", 1, "/c", "/l.log",
        ...                        redis_url="redis://:pw-secret@h:6379/0")
        >>> "redis_url" in trial_message(request), "pw-secret" in str(trial_message(request))
        (False, False)
    """
    message = request.to_dict()
    del message["redis_url"]
    return message


def _not_started(request: TrialRequest, reason: str) -> dict[str, Any]:
    """The answer of a trial the job asked to stop before it started (its goal was reached, or
    it was cancelled, while the trial waited behind another on its worker): stopped, with no
    score, its model never called. At a goal the master records it so; after a cancel it stays
    in the running record, and the resumed job runs it (nothing is stored under the attempt).
    (A stopper's decision for one trial is about its reports: a retry of a trial it stopped
    starts, and hears it at its first report.)"""
    result = TrialResult.from_dict(
        {
            "trial_id": request.trial_id,
            "hyperparameters": request.hyperparameters,
            "status": TrialStatus.STOPPED,
            "attempts": request.attempt,
            "worker": _worker_name(),
            "error": f"asked to stop ({reason}) before it started; its model never ran",
        }
    )
    return _answered(request, {**result.to_dict(), "curve": []}, store=False)


@on_claimed_gpus
def run_trial(request_data: dict[str, Any]) -> dict[str, Any]:
    """Run one trial attempt in a warm process; the Dask task function. With a ``GPU``
    resource it holds GPUs of this worker for its amount (:mod:`ultron.worker.devices`).

    Returns the :class:`TrialResult` as a dict (small, so nothing big stays in worker memory),
    plus its learning curve under ``curve``.
    """
    request = TrialRequest.from_dict(request_data)
    settled = _settled_before_start(request)
    if settled is not None:
        return settled
    started = time.monotonic()
    log_path = os.path.join(os.path.dirname(request.log_path), f"worker-{os.getpid()}.log")
    process = checkout(
        request.python,
        request.code_paths,
        log_path,
        request.memory_limit,
        reads_object_store(request.data),
        request.gpu_memory_fraction,
        request.threads,
    )
    base = {
        "trial_id": request.trial_id,
        "hyperparameters": request.hyperparameters,
        "attempts": request.attempt,
        "worker": _worker_name(),
        "log_path": request.log_url or request.log_path,
    }
    try:
        exploit_for(request)
    except ExploitError as exc:  # the model saves no checkpoint: the user's to fix
        result = TrialResult.from_dict({**base, "status": TrialStatus.FAILED, "error": str(exc)})
        checkin(process)
        return _answered(request, {**result.to_dict(), "curve": []})
    restore_for(request)
    status, extra = _attend(process, request, request_data, worker=base["worker"])
    extra.setdefault("duration", time.monotonic() - started)
    curve: list[dict[str, Any]] = extra.pop("curve", [])
    result = TrialResult.from_dict({**base, **extra, "status": status})
    return _answered(request, {**result.to_dict(), "curve": curve})


def _settled_before_start(request: TrialRequest) -> dict[str, Any] | None:
    """The attempt's answer where it must not run (one round trip, which also marks it
    started): it finished already, or the job asked its trials to stop while it waited."""
    ns = request.namespace
    done_key = keys.trial_result(request.job_id, request.trial_id, request.attempt, namespace=ns)
    pipe = _redis(request.redis_url).pipeline(transaction=False)  # one round trip
    pipe.get(done_key)
    pipe.get(keys.trial_stop(request.job_id, request.trial_id, namespace=ns))
    pipe.set(keys.trial_started(request.job_id, request.trial_id, request.attempt, namespace=ns), 1)
    stored, stop, _ = pipe.execute()
    finished = stored_answer(stored, request.hyperparameters)
    # Dask ran this attempt again (its result was on a lost worker), or a restarted master
    # resumed an attempt that had finished. A crash is run again: the infrastructure's fault
    # (a trial process killed as the old master's cluster closed, say).
    if finished is not None and finished.get("status") != TrialStatus.CRASHED:
        logger.info(
            "trial %s attempt %d already finished; not run again", request.trial_id, request.attempt
        )
        return _answered(request, finished, store=False)  # stored already: the notice only
    asked = json.loads(stop) if stop else {}
    if asked.get("job"):  # the job asked all its trials to stop while this one waited
        return _not_started(request, asked.get("decision", "stop"))
    return None


def _attend(
    process: WarmProcess, request: TrialRequest, request_data: dict[str, Any], *, worker: str
) -> tuple[TrialStatus, dict[str, Any]]:
    """Send the attempt to its process and wait for its answer, its checkpoints synced and
    its output shipped meanwhile; the status and the answer's fields (a failed one's log tail
    with them). The process goes back to the pool only when it may serve another trial."""
    # Their threads start once the trial has its request: each start waits for its thread to
    # run, 2 ms apiece on a busy machine, and the trial need not wait for them.
    syncer = start_sync(request, start=False)
    shipper = ship_trial_log(
        request.log_path,
        request.log_url,
        attempt=request.attempt,
        worker=worker,
        secrets=request_data,
        start=False,
    )
    extra: dict[str, Any]
    try:
        process.send(trial_message(request))
        if syncer is not None:
            begin_sync(syncer, request.trial_id)
        if shipper is not None:
            shipper.start()
        answer = wait_for_answer(process, request, _redis(request.redis_url))
    except TimeoutError:
        process.kill()
        error = f"trial ran past trial_timeout ({request.timeout} s) and was stopped"
        status, extra = TrialStatus.TIMEOUT, {"error": error}
    except ForcedStop as exc:
        process.kill()
        error = f"asked to stop ({exc}) and the model did not return within the grace period"
        status, extra = (
            TrialStatus.STOPPED,
            {"error": error, "score": last_reported(_redis(request.redis_url), request)},
        )
    except ProcessDied as exc:
        process.kill()
        status, extra = TrialStatus.CRASHED, {"error": str(exc)}
    except BaseException:
        process.kill()  # it may hold the trial still: it must not serve another
        raise
    else:
        status = TrialStatus(answer.pop("status"))
        extra = answer
        _return_process(process, status)
    finally:
        if syncer is not None and syncer.running:
            syncer.stop(wait=False)  # its last scan runs while the log is shipped
        if shipper is not None:
            shipper.stop()  # before the answer: a trial seen finished has its whole log stored
        finish_sync(syncer, request.trial_id)  # its next attempt must find them committed
    if shipper is not None and not status.ok:
        extra["log_tail"] = shipper.tail()
    return status, extra


def _return_process(process: WarmProcess, status: TrialStatus) -> None:
    """Back to the pool after an answer, or ended where it must not serve another trial."""
    if status is TrialStatus.OUT_OF_MEMORY:
        # Its heap may stay near the limit, and a CUDA out-of-memory can leave cached or
        # leaked GPU memory and a broken context: the next trial gets a fresh process.
        process.kill()
    elif _fresh_processes():
        process.kill()  # the baseline the benchmark compares against: no warm reuse
    else:
        checkin(process)


def _answered(
    request: TrialRequest, answer: dict[str, Any], *, store: bool = True
) -> dict[str, Any]:
    """Write the attempt's answer where a rerun and the master read it (unless not ``store``),
    and send it to the master (the job's notice list, ``<trial id>:<attempt>``, a newline, the
    answer: it need not wait for Dask to carry the task's end through the scheduler, and a
    trial in a slot has no task of its own), in one round trip; returns the answer."""
    ns, stored = request.namespace, json.dumps(answer)
    pipe = _redis(request.redis_url).pipeline(transaction=False)
    if store:
        key = keys.trial_result(request.job_id, request.trial_id, request.attempt, namespace=ns)
        pipe.set(key, stored)
    notice = f"{request.trial_id}:{request.attempt}\n{stored}"
    pipe.rpush(keys.trial_notices(request.job_id, namespace=ns), notice)
    pipe.execute()
    return answer


def await_trial(slot: dict[str, Any]) -> dict[str, Any] | None:
    """A slot (:mod:`ultron.master.slots`): a Dask task that says it has started (``slot\n``
    and its name, on the job's notice list), then runs, one after another, the attempts whose
    requests the master pushes to ``slot["key"]``, each as :func:`run_trial` (which answers
    each by its notice), until the master pushes ``null`` or, where ``slot["lease"]`` names the
    job's lease, the lease has expired (the master is gone). The batch loop's rounds so start
    one Redis push after the master's decision and end without a task's end through the
    scheduler.

    Returns the last attempt's answer (None if it ran none): a master that sees the slot end
    before it has read that answer's notice reads it here.
    """
    client = _redis(slot["redis_url"])
    client.rpush(slot["notices"], f"slot\n{slot['name']}")
    last = None
    while True:
        got = client.blpop([slot["key"]], timeout=5)
        if got is None:
            if slot.get("lease") and not client.exists(slot["lease"]):
                return last
            continue
        request = json.loads(got[1])
        if request is None:
            return last
        last = run_trial(request)
