"""A Dask cluster that runs already, as a platform team starts one: ``dask scheduler`` and
``dask worker`` processes on loopback (the tests of ``cluster: {type: address}``), and the
wait on state that the flow tests share."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

DASK = str(Path(sys.executable).with_name("dask"))


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 240.0) -> None:
    """Return once ``condition()`` holds; TimeoutError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"never reached: {what}")
        time.sleep(0.05)


class DaskProcesses:
    """``dask scheduler`` and ``dask worker`` processes on loopback, each in a session of its
    own (its nanny and trial processes with it), their output in ``folder/dask.log``.

    Args:
        folder: where the scheduler file and the log go (the test's ``tmp_path``).
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.address = ""
        self._started: list[subprocess.Popen[bytes]] = []
        self._log = (folder / "dask.log").open("wb")

    def _start(self, args: list[str], env: dict[str, str] | None) -> None:
        self._started.append(
            subprocess.Popen(
                [DASK, *args],
                env={**os.environ, **(env or {})},
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    def scheduler(self, *, env: dict[str, str] | None = None) -> str:
        """Start the scheduler (on a free port, no dashboard) and return its address once it
        has written it. ``env``: variables added to this process's for it."""
        scheduler_file = self.folder / "scheduler.json"
        self._start(
            [
                "scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", ":0",
                "--scheduler-file", str(scheduler_file),
            ],
            env,
        )  # fmt: skip
        wait_for(
            lambda: scheduler_file.exists() and bool(scheduler_file.read_text()),
            "a scheduler's address in its file",
            timeout_s=60,
        )
        self.address = json.loads(scheduler_file.read_text())["address"]
        return self.address

    def worker(self, *args: str, env: dict[str, str] | None = None) -> None:
        """Start a worker of one thread, no memory limit and no dashboard on the scheduler;
        ``args`` are more of ``dask worker``'s options, ``env`` variables added for it."""
        self._start(
            [
                "worker", self.address, "--nthreads", "1", "--memory-limit", "0",
                "--no-dashboard", "--host", "127.0.0.1", *args,
            ],
            env,
        )  # fmt: skip

    def wait_for_workers(self, count: int) -> None:
        """Return once ``count`` workers have joined the scheduler: a worker process started
        is not yet a worker the scheduler knows."""
        from distributed import Client

        with Client(self.address, timeout=30) as client:
            client.wait_for_workers(count, timeout=120)

    def stop(self) -> None:
        """Kill every process started, with everything it started, workers first."""
        for proc in reversed(self._started):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        self._log.close()
