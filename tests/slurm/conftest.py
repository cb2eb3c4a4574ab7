"""``slurm``: a real one-node SLURM cluster on loopback (Debian's slurm-wlm and munge).

``munged`` with a key of its own, ``slurmctld`` and ``slurmd`` as root on free loopback ports,
all of their files in a temporary folder; ``SLURM_CONF`` points this process (and what it
starts: ``sbatch``, ``squeue``) at it. No systemd and no cgroups in a container: processes
are tracked by their parents (``proctrack/linuxproc``) and no task plugin binds them. The node
claims more CPUs and memory than a small CI machine has (``config_overrides``), so that two
worker jobs fit on it; trials do not use what their jobs book here.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

_DAEMONS = ("munged", "slurmctld", "slurmd", "sinfo", "squeue", "scancel", "sbatch")


@dataclass
class Slurm:
    """A running SLURM cluster: its config file and the folder of its logs."""

    conf: Path
    logs: Path

    def squeue(self, *args: str) -> list[str]:
        """Lines of ``squeue --noheader ARGS`` (all users' jobs: the cluster is the test's)."""
        done = subprocess.run(
            ["squeue", "--noheader", *args], capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, done.stderr
        return [line for line in done.stdout.splitlines() if line.strip()]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(root: Path, host: str, munge_socket: Path) -> str:
    cpus = max(4, os.cpu_count() or 1)
    return f"""\
ClusterName=ultron-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/logs/slurmctld.log
SlurmdLogFile={root}/logs/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=16384 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def _wait(what: str, ready: Callable[[], bool], logs: Path, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            tails = {p.name: p.read_text()[-1500:] for p in logs.glob("*") if p.is_file()}
            raise AssertionError(f"{what} never came: {tails}")
        time.sleep(0.3)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _node_idle() -> bool:
    done = subprocess.run(["sinfo", "--noheader", "--format", "%T"], capture_output=True, text=True)
    return done.returncode == 0 and done.stdout.strip() == "idle"


@contextlib.contextmanager
def _running_slurm(root: Path) -> Iterator[Slurm]:
    logs = root / "logs"
    for folder in ("munge", "state", "spool", "logs"):
        (root / folder).mkdir(mode=0o711)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)  # munged refuses a key others can read
    munge_socket = root / "munge" / "munge.socket"
    conf = root / "slurm.conf"
    conf.write_text(_config(root, socket.gethostname().split(".")[0], munge_socket))
    commands = [
        [
            "munged",
            "--foreground",
            "--force",  # as root, in a folder under /tmp
            f"--key-file={key}",
            f"--socket={munge_socket}",
            f"--pid-file={root}/munge/munged.pid",
            f"--seed-file={root}/munge/munged.seed",
            f"--log-file={logs}/munged.log",
        ],
        ["slurmctld", "-D", "-f", str(conf)],
        ["slurmd", "-D", "-f", str(conf)],
    ]
    started: list[subprocess.Popen[bytes]] = []
    try:
        for command in commands:
            with (logs / f"{command[0]}.out").open("wb") as out:
                started.append(
                    subprocess.Popen(
                        command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                    )
                )
            if command[0] == "munged":
                _wait("munged's socket", munge_socket.exists, logs)
        _wait("an idle node in sinfo", _node_idle, logs)
        yield Slurm(conf, logs)
    finally:
        # Whatever a test left: cancelled before the daemons that track it stop.
        subprocess.run(["scancel", "--full", "--user", "root"], capture_output=True, check=False)
        for proc in reversed(started):
            _stop(proc)


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slurm]:
    """A one-node SLURM cluster on loopback, private to the session; ``SLURM_CONF`` is set."""
    missing = [name for name in _DAEMONS if shutil.which(name) is None]
    if missing:
        pytest.skip(f"needs Debian's slurm-wlm and munge ({', '.join(missing)} missing)")
    if os.geteuid() != 0:
        pytest.skip("slurmd runs jobs as their users: starting it needs root")
    root = tmp_path_factory.mktemp("slurm")
    root.chmod(0o711)  # munged checks that no one else may write on the way to its socket
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(root / "slurm.conf")
    try:
        with _running_slurm(root) as cluster:
            yield cluster
    finally:
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
