"""What the servers of ``ULTRON_HOME`` keep to their owner: a 0700 folder, a 0600 secret file,
and the lock one start holds so that two starts at once give one server, and how a server's
pidfile and listening socket are read.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> folder = private_folder(Path(tempfile.mkdtemp()) / "redis")
    >>> oct(folder.stat().st_mode & 0o777)
    '0o700'
    >>> secret(folder / "password") == secret(folder / "password")
    True
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil

from ultron.errors import UltronError

__all__ = ["listening_address", "private_folder", "secret", "server_pid", "starting"]

_START_LOCK = "start.lock"


def private_folder(path: Path) -> Path:
    """``path`` as a folder that only its owner, this user, may enter (0700); created if missing.

    Raises:
        UltronError: the folder belongs to another user.
    """
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = path.stat()
    if info.st_uid != os.geteuid():
        raise UltronError(
            f"{path} belongs to user id {info.st_uid}, not to this user ({os.geteuid()}); the "
            "servers of ULTRON_HOME must be private to their user. Fix: set ULTRON_HOME to a "
            "folder of your own"
        )
    if stat.S_IMODE(info.st_mode) != 0o700:
        path.chmod(0o700)
    return path.resolve()


def secret(path: Path) -> str:
    """The secret kept in ``path`` (0600), generated the first time.

    Written beside and linked into place, so two first calls at once agree on one secret and a
    reader never sees half of it.
    """
    with contextlib.suppress(FileNotFoundError):
        return path.read_text().strip()
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_hex(24))
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass  # another first call won: its secret is the one
    finally:
        tmp.unlink()
    return path.read_text().strip()


@contextlib.contextmanager
def starting(folder: Path) -> Iterator[None]:
    """Hold the folder's start lock: a second start waits here, then finds the server running.

    The kernel drops the lock of a process that dies, so a start that was killed leaves nothing
    to clean up.
    """
    fd = os.open(folder / _START_LOCK, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def server_pid(pidfile: Path, is_server: Callable[[psutil.Process], bool]) -> int | None:
    """The pid in ``pidfile``, if it names a live process of this user that ``is_server``.

    None for no pidfile, an empty or stale one, a zombie, or a pid reused by another program.
    """
    try:
        proc = psutil.Process(int(pidfile.read_text().strip()))
        if proc.status() == psutil.STATUS_ZOMBIE or proc.uids().effective != os.geteuid():
            return None
        return proc.pid if is_server(proc) else None
    except (OSError, ValueError, psutil.Error):
        return None


def listening_address(pid: int) -> tuple[str, int] | None:
    """The (host, port) of the first TCP socket process ``pid`` listens on, if any."""
    try:
        for conn in psutil.Process(pid).net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN:
                return str(conn.laddr.ip), int(conn.laddr.port)
    except psutil.Error:
        return None
    return None
