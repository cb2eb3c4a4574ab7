"""The warm runner's own process (:mod:`ultron.runner` is the command's side).

:func:`serve` imports :data:`~ultron.runner.PRELOAD`, then answers each ``ultron run`` on its
socket with a fork of itself (:func:`_child`) that takes the command's place and runs the CLI;
it reports each job's end, refuses once its code or configuration changed on disk (stale), and
stops once idle. See :mod:`ultron.runner` for the whole design.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from ultron.runner import FORWARDED, HEADER, PRELOAD, runtime_folder

__all__ = ["serve"]


def serve(key: str, path: list[str]) -> None:
    """The runner's process: import, then fork a child per command until idle."""
    sys.path[:] = path
    folder = runtime_folder(dict(os.environ))
    if folder is None:
        return
    lock = open(folder / f"{key}.lock", "a")  # noqa: SIM115  (held for the process's life)
    for _ in range(50):  # a command may be testing the lock this very moment
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            time.sleep(0.01)
    else:
        return  # another runner for the same key holds it
    hash_seed = os.environ.get("PYTHONHASHSEED", "")  # as the command that started it set it
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    from ultron.settings import settings

    idle_s = settings().runner_idle_s
    files = _fingerprint()
    address = folder / f"{key}.sock"
    with contextlib.suppress(FileNotFoundError):
        address.unlink()  # a runner that died; we hold the lock
    bound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        bound.bind(os.fspath(address))
    finally:
        os.umask(old)
    bound.listen(16)
    listener: socket.socket | None = bound
    children: dict[int, socket.socket] = {}
    last = time.monotonic()
    while True:
        _reap(children)
        if children:
            last = time.monotonic()
        elif listener is None or time.monotonic() - last > idle_s:
            break
        if listener is None:  # stale: only its jobs' ends are left to report
            time.sleep(0.2)
            continue
        ready, _, _ = select.select([listener], [], [], 0.2)
        if not ready:
            continue
        connection, _ = listener.accept()
        last = time.monotonic()
        try:
            if _fingerprint() != files:
                # Stale: the next command starts a fresh runner at once (lock and socket go
                # now; commands waiting in the backlog are answered by the close).
                with contextlib.suppress(OSError):
                    connection.sendall(b"refused stale\n")
                address.unlink(missing_ok=True)
                listener.close()
                listener = None
                fcntl.flock(lock, fcntl.LOCK_UN)
                continue
            _serve_one(connection, listener, lock, children, key, hash_seed)
        except Exception as exc:  # one bad request never ends the runner and its jobs
            print(f"runner: a request failed: {type(exc).__name__}: {exc}", flush=True)
        finally:
            if connection.fileno() != -1 and all(c is not connection for c in children.values()):
                connection.close()
    if listener is not None:  # idle: gone before the interpreter's own slow exit
        address.unlink(missing_ok=True)
        listener.close()
    lock.close()
    sys.stdout.flush()
    os._exit(0)


def _serve_one(
    connection: socket.socket,
    listener: socket.socket,
    lock: Any,
    children: dict[int, socket.socket],
    key: str,
    hash_seed: str,
) -> None:
    request, fds = _receive(connection)
    try:
        if request.get("key") != key:
            with contextlib.suppress(OSError):
                connection.sendall(b"refused key\n")
            return
        sys.stdout.flush()  # nothing of the runner's own output lands on the command's
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            lock.close()  # the lock is the runner's, not the job's
            for other in children.values():
                other.close()
            _child(listener, connection, request, fds, hash_seed)
        children[pid] = connection
    finally:
        for fd in fds:
            os.close(fd)


def _receive(connection: socket.socket) -> tuple[dict[str, Any], list[int]]:
    credentials = connection.getsockopt(
        socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")
    )
    _, uid, _ = struct.unpack("3i", credentials)
    connection.settimeout(10.0)
    data, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
    try:
        if uid != os.getuid() or len(fds) != 3 or len(data) < HEADER.size:
            raise ValueError(f"refused a request from uid {uid} with {len(fds)} descriptors")
        (size,) = HEADER.unpack(data[: HEADER.size])
        body = data[HEADER.size :]
        while len(body) < size:
            more = connection.recv(size - len(body))
            if not more:
                raise ValueError("the request ended early")
            body += more
        request = json.loads(body)
        if not isinstance(request, dict):
            raise ValueError("the request is not an object")
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    connection.settimeout(None)
    return request, list(fds)


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        connection = children.pop(pid, None)
        if connection is not None:
            with contextlib.suppress(OSError), connection:
                connection.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())


def _fingerprint() -> dict[str, tuple[int, int]]:
    """Size and modification time of every module file imported and of the Prefect and Dask
    configuration files read at import: any change makes the runner stale."""
    paths = {getattr(m, "__file__", None) for m in list(sys.modules.values())}
    with contextlib.suppress(Exception):
        import prefect.settings

        paths.add(os.fspath(prefect.settings.get_current_settings().profiles_path))
    with contextlib.suppress(Exception):
        import dask.config

        for folder in dask.config.paths:  # the folder too: a file added to it, or it made
            paths.add(os.fspath(folder))
            with contextlib.suppress(OSError):
                paths.update(str(p) for p in Path(folder).iterdir())
    seen: dict[str, tuple[int, int]] = {}
    for name in paths:
        if not name:
            continue
        try:
            info = os.stat(name)
        except OSError:
            seen[name] = (-1, -1)
            continue
        seen[name] = (info.st_mtime_ns, info.st_size)
    return seen


def _child(
    listener: socket.socket,
    connection: socket.socket,
    request: dict[str, Any],
    fds: list[int],
    hash_seed: str,
) -> NoReturn:
    """The job's process: take the command's place and run the CLI; never returns. It tells
    the command its pid first and its exit code last (the runner reports a death by signal)."""
    code = 1
    try:
        listener.close()
        connection.sendall(f"pid {os.getpid()}\n".encode())
        for number in (*FORWARDED, signal.SIGCHLD):
            signal.signal(number, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for number in request.get("ignored", []):
            signal.signal(number, signal.SIG_IGN)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.umask(request["umask"])
        sys.path[:] = request["path"]
        sys.argv = ["ultron", *request["argv"]]
        with contextlib.suppress(Exception):
            sys.stdout.reconfigure(line_buffering=os.isatty(1))  # type: ignore[union-attr]
        if "numpy" in sys.modules:  # each job its own unseeded draws, as a fresh process
            sys.modules["numpy"].random.seed()
        _watch(connection)
        from ultron.cluster import forkserver

        forkserver.fork_here(hash_seed)  # the job's workers fork from a copy of this process
        code = _run_cli(request["argv"])
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        with contextlib.suppress(Exception):
            connection.sendall(f"exit {code}\n".encode())
        os._exit(code)


def _watch(connection: socket.socket) -> None:
    """Kill this process the moment the command is gone (it was the job's process)."""
    import threading

    def watch() -> None:
        with contextlib.suppress(OSError):
            while connection.recv(64):
                pass
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="ultron-runner-watch", daemon=True).start()


def _run_cli(argv: list[str]) -> int:
    """The CLI as the command would run it, ended as an interpreter ends: exit code, an
    uncaught exception through ``sys.excepthook``, then the ``atexit`` functions."""
    import atexit
    import logging

    code = 1
    try:
        from ultron.cli.main import app

        app(args=argv, prog_name="ultron")
        code = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 130 if isinstance(sys.exc_info()[1], KeyboardInterrupt) else 1
    finally:
        atexit._run_exitfuncs()
        logging.shutdown()
    return code
