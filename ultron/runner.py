"""A warm job runner: ``ultron run`` forks each job from a process that imported ultron once.

Before a job's first trial can start, its process imports Prefect, Dask and ultron's master
(about 3 s on 2 cores: most of the time to the first trial). The ``ultron`` command therefore
hands ``ultron run`` to a runner that imported them already and forks one process per job
from it, the way Gradle's daemon or a multiprocessing forkserver does:

- the first ``ultron run`` starts the runner (its own session; socket, lock and log in
  ``$XDG_RUNTIME_DIR/ultron-runner/<key>.*``, else ``/tmp/ultron-runner-<uid>/``) and waits
  until it answers; later ones find it;
- the command sends its arguments, working directory, environment, umask and ``sys.path``,
  and passes its stdin, stdout and stderr (``SCM_RIGHTS``); the runner forks, and the child
  takes all of them on and runs the CLI exactly as the command would have;
- the command forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to the child (Ctrl-C cancels the
  job as before) and exits with the child's status; if the command dies, the child is killed
  (``SIGKILL``), as the job's process would have been;
- a runner serves only commands with its interpreter, ``sys.path``, environment and inherited
  process state (resource limits, niceness, CPU affinity, groups, control groups: what it
  passes on to its jobs; its ``<key>`` is their digest; the shell's ``PWD``, ``OLDPWD``,
  ``SHLVL`` and ``_`` do not count), and only its own user (``SO_PEERCRED``); it refuses, and
  exits, once a module it imported or a Prefect or Dask configuration file changed on disk
  (the command then runs the job in its own process): a job never runs code older than what
  is installed;
- it stops once no job ran for ``ULTRON_RUNNER_IDLE_S`` seconds (600).

``ULTRON_WARM_RUNNER=0`` runs every job in the command's own process; so does any failure to
reach a runner (another operating system than Linux, a socket path too long, a runner that
does not start in time). :func:`ultron.run` from Python always runs in the calling process.
This module's top level imports only the standard library: the command reaches the runner
before importing anything else.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import resource
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

__all__ = ["FORWARDED", "HEADER", "PRELOAD", "delegate", "main", "runtime_folder"]

# What the runner imports before it answers: every module a job's process needs up to its
# first trial, but no module that reads the terminal as it is imported (the CLI's consoles).
PRELOAD = (
    "typer",
    "rich.console",
    "rich.markup",
    "rich.progress",
    "rich.table",
    "prefect",
    "prefect.states",
    "distributed",
    "ultron.api",
    "ultron.flows.hpo_job",
    "ultron.master.progress",
    "ultron.servers.prefect",
    "ultron.cluster.forkserver",
    "ultron.spec.loader",
    "ultron.worker.runner",  # with distributed: the job's forkserver is a fork of the job
)
# Variables a shell changes from one command to the next, read by nothing the runner imports.
_VOLATILE = frozenset({"PWD", "OLDPWD", "SHLVL", "_"})
# Read by Prefect from the working directory as it is imported (its settings sources).
_CWD_SETTINGS = (".env", "prefect.toml", "pyproject.toml")
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_START_TIMEOUT_S = 60.0
_SOCKET_PATH_MAX = 100  # sun_path holds 108 bytes on Linux
HEADER = struct.Struct("!Q")


def _wanted(environ: dict[str, str]) -> bool:
    # pydantic's true values; anything else runs here, where the settings explain the error.
    value = environ.get("ULTRON_WARM_RUNNER", "1").strip().lower()
    return value in {"1", "true", "yes", "on", "t", "y"} and sys.platform == "linux"


def runtime_folder(environ: dict[str, str]) -> Path | None:
    """The runners' folder: ``$XDG_RUNTIME_DIR/ultron-runner``, else ``ultron-runner-<uid>`` in
    the temporary folder; ``None`` unless it is a real folder of this user that no one else may
    enter. Not ``ULTRON_HOME``: a command refused for bad input writes nothing there."""
    base = environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    suffix = "" if environ.get("XDG_RUNTIME_DIR") else f"-{os.getuid()}"
    folder = Path(base) / f"ultron-runner{suffix}"
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None
    return folder


def _key(environ: dict[str, str], path: list[str]) -> str:
    """The digest of what a job's process inherits from whoever started it: the interpreter,
    ``sys.path``, the environment, and the process state a runner passes on to its jobs (the
    one it got from the command that started it: resource limits, niceness, CPU affinity,
    groups, control groups, as under ``nice``, ``ulimit``, ``taskset`` or a SLURM step), and
    the settings files Prefect reads from the working directory as it is imported."""
    env = {k: v for k, v in environ.items() if k not in _VOLATILE}
    limits = {
        name: resource.getrlimit(getattr(resource, name))
        for name in dir(resource)
        if name.startswith("RLIMIT_")
    }
    cgroup = ""
    with contextlib.suppress(OSError):
        cgroup = Path("/proc/self/cgroup").read_text()
    here = {}
    for name in _CWD_SETTINGS:
        with contextlib.suppress(OSError):
            here[name] = hashlib.sha256(Path(name).read_bytes()).hexdigest()
    state = {
        "cwd_settings": here,
        "python": sys.executable,
        "path": path,
        "env": env,
        "limits": limits,
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "affinity": sorted(os.sched_getaffinity(0)),
        "groups": [os.getgid(), *sorted(os.getgroups())],
        "cgroup": cgroup,
    }
    text = json.dumps(state, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def main() -> None:
    """The ``ultron`` command: ``ultron run`` through the warm runner, the rest as the CLI."""
    argv = sys.argv[1:]
    if argv[:1] == ["run"] and not {"--help", "-h"} & set(argv):
        code = delegate(argv)
        if code is not None:
            _exit_like(code)
    from ultron.cli.main import app

    app(prog_name="ultron")


def _exit_like(code: int) -> NoReturn:
    """Exit as the child did: its exit code, or killed by the same signal (else 128 + it)."""
    sys.stdout.flush()
    if code < 0:
        number = -code
        with contextlib.suppress(OSError, ValueError):  # SIGKILL's disposition is fixed
            signal.signal(number, signal.SIG_DFL)
        with contextlib.suppress(OSError, ValueError):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {number})
            os.kill(os.getpid(), number)
            time.sleep(1)
        code = 128 + number
    os._exit(code)


def delegate(argv: list[str]) -> int | None:
    """Run ``ultron <argv>`` in a process forked from the warm runner; its exit status
    (negative: the signal that killed it), or ``None`` when no runner can take it (run it
    here then)."""
    environ = dict(os.environ)
    if not _wanted(environ):
        return None
    path = list(sys.path)
    key = _key(environ, path)
    try:
        folder = runtime_folder(environ)
        if folder is None or len(os.fsencode(folder / f"{key}.sock")) > _SOCKET_PATH_MAX:
            return None
        address = folder / f"{key}.sock"
        connection = _connect(address) or _start(folder, key, path, address)
    except OSError:
        return None
    if connection is None:
        return None
    ignored = [n for n in FORWARDED if signal.getsignal(n) == signal.SIG_IGN]
    child: list[int] = []
    pending: list[int] = []

    def forward(number: int, _frame: Any) -> None:
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child[0], number)
        else:
            pending.append(number)

    # Before the request leaves: a Ctrl-C from then on is the job's (under nohup, or in the
    # background of a script, what this command ignores the job ignores too).
    handled = [n for n in FORWARDED if n not in ignored]
    previous = {number: signal.signal(number, forward) for number in handled}
    request = {
        "argv": argv,
        "cwd": os.getcwd(),
        "env": environ,
        "umask": _umask(),
        "path": path,
        "key": key,
        "ignored": [int(n) for n in ignored],
    }
    payload = json.dumps(request).encode()
    try:
        with connection:
            try:
                socket.send_fds(connection, [HEADER.pack(len(payload)) + payload], [0, 1, 2])
            except (OSError, ValueError):
                return None  # nothing reached the runner: run here
            return _follow(connection, child, pending, forward)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _connect(address: Path) -> socket.socket | None:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(os.fspath(address))
    except OSError:
        connection.close()
        return None
    return connection


def _start(folder: Path, key: str, path: list[str], address: Path) -> socket.socket | None:
    """Start a runner for ``key`` unless one holds its lock (starting, or about to stop), and
    connect once it answers."""
    lock = folder / f"{key}.lock"
    code = f"from ultron.runner_server import serve; serve({key!r}, {path!r})"
    deadline = time.monotonic() + _START_TIMEOUT_S
    starts = 0
    while time.monotonic() < deadline:
        connection = _connect(address)
        if connection is not None:
            return connection
        if not _held(lock):
            if starts == 2:
                return None  # two runners did not start: run here
            starts += 1
            # The hash seed Dask's nanny gives every worker (6640 unless one is set): the
            # workers of a runner's jobs fork from a copy of it and keep its seed.
            env = dict(os.environ)
            if env.get("PYTHONHASHSEED") in (None, "", "0"):
                env["PYTHONHASHSEED"] = "6640"
            with open(folder / f"{key}.log", "ab") as log:
                subprocess.Popen(
                    [sys.executable, "-c", code],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                    close_fds=True,
                )
            time.sleep(0.2)  # the runner takes its lock as it starts
        time.sleep(0.02)
    return None


def _held(lock: Path) -> bool:
    """Whether a runner holds ``lock`` (it does from its start to its end)."""
    with open(lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def _follow(
    connection: socket.socket, child: list[int], pending: list[int], forward: Any
) -> int | None:
    """Until the job's process says how it ended (or the runner, if it was killed). The job's
    process announces itself first, so an end of the conversation before that means no job
    started: ``None``, run it here. After it, never: the job is not run twice."""
    reader = connection.makefile("r", encoding="utf-8")
    with contextlib.suppress(OSError):
        for line in reader:
            word, _, value = line.strip().partition(" ")
            if word == "refused":
                return None
            if word == "pid":
                child.append(int(value))
                for number in pending:
                    forward(number, None)
            elif word == "exit":
                return int(value)
    return 1 if child else None
