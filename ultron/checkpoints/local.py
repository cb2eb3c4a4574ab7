"""The local side of trial checkpoints: one folder per checkpoint, ``COMPLETE`` written last.

This is all the training thread touches: creating a folder and a marker file is as fast as the
local disk, and nothing here waits on the object store (paper V-H).

Example:
    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> folder = new_checkpoint_dir(root, 7)
    >>> _ = (folder / "weights.bin").write_bytes(b"0123")
    >>> latest_local(root) is None              # not complete yet
    True
    >>> _ = mark_complete(folder)
    >>> latest_local(root).name
    'epoch-0007'
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

__all__ = [
    "COMPLETE_MARKER",
    "complete_checkpoints",
    "is_complete",
    "latest_local",
    "load_latest_torch",
    "mark_complete",
    "natural_key",
    "new_checkpoint_dir",
    "save_torch",
]

COMPLETE_MARKER = "COMPLETE"
"""Written last into a local checkpoint folder: all its files are written."""


def natural_key(name: str) -> tuple[Any, ...]:
    """Sort key that compares runs of digits as numbers.

    Example:
        >>> sorted(["epoch-10", "epoch-9", "epoch-0011"], key=natural_key)
        ['epoch-9', 'epoch-10', 'epoch-0011']
    """
    parts = re.split(r"(\d+)", name)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts))


def new_checkpoint_dir(checkpoint_path: str | Path, step: int, *, prefix: str = "epoch") -> Path:
    """Create the empty folder for the checkpoint of ``step``: ``<checkpoint_path>/epoch-0007``.

    A leftover of a crashed attempt (the folder without ``COMPLETE``) is emptied first.

    Raises:
        ValueError: ``step`` is negative, ``prefix`` is not a plain folder name, or the folder
            would lie outside ``checkpoint_path`` (a symlink out of it).
        FileExistsError: the checkpoint of ``step`` is already complete.
    """
    if step < 0:
        raise ValueError(f"step is {step}; it must be 0 or more: number checkpoints from 0")
    _check_name("prefix", prefix, "epoch")
    folder = _inside(checkpoint_path, f"{prefix}-{step:04d}")
    if is_complete(folder):
        raise FileExistsError(
            f"checkpoint folder {folder} is already complete; a checkpoint is written once: "
            f"save the next one under a step after {step}"
        )
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


def _check_name(field: str, value: str, example: str) -> None:
    """Refuse a name from user code that is not one plain path component."""
    if (
        not isinstance(value, str)
        or value in ("", ".", "..")
        or any(c in value for c in ("/", "\\", "\0"))
    ):
        raise ValueError(
            f"{field} is {value!r}; it must be a plain name without '/', '\\', NUL, or '.' "
            f"or '..' alone, so the checkpoint stays inside checkpoint_path. Fix: pass a name "
            f"such as {example!r}"
        )


def _inside(checkpoint_path: str | Path, name: str) -> Path:
    """``checkpoint_path / name``, refused when it resolves outside ``checkpoint_path``."""
    root = Path(checkpoint_path)
    folder = root / name
    if not folder.resolve().is_relative_to(root.resolve()):
        raise ValueError(
            f"checkpoint folder {str(folder)!r} resolves to {str(folder.resolve())!r}, outside "
            f"checkpoint_path {str(root)!r}; checkpoints are written only inside it. Fix: "
            "remove that link, or save under another step or prefix"
        )
    return folder


def mark_complete(folder: str | Path) -> Path:
    """Mark a checkpoint folder complete; call it after its last file is written and closed.

    It only creates a local file: it never waits on the object store. Returns the marker.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(
            f"checkpoint folder {folder} does not exist; mark_complete needs the folder the "
            "checkpoint was written to: create it with new_checkpoint_dir()"
        )
    marker = folder / COMPLETE_MARKER
    marker.touch()
    return marker


def is_complete(folder: str | Path) -> bool:
    """Whether ``folder`` holds a complete checkpoint."""
    return (Path(folder) / COMPLETE_MARKER).is_file()


def complete_checkpoints(checkpoint_path: str | Path) -> list[Path]:
    """Complete checkpoint folders under ``checkpoint_path``, oldest first (natural order).

    Folders whose names start with ``.`` (downloads in progress) are not checkpoints.
    """
    root = Path(checkpoint_path)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if not p.name.startswith(".") and is_complete(p)]
    return sorted(found, key=lambda p: natural_key(p.name))


def latest_local(checkpoint_path: str | Path) -> Path | None:
    """The newest complete checkpoint folder under ``checkpoint_path``, or None."""
    found = complete_checkpoints(checkpoint_path)
    return found[-1] if found else None


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise ImportError(
            "save_torch and load_latest_torch need PyTorch, which is not installed: "
            "pip install 'ultron-automl[torch]'"
        ) from exc
    return torch


def save_torch(
    state: Any, checkpoint_path: str | Path, step: int, *, filename: str = "state.pt"
) -> Path:
    """``torch.save`` ``state`` as the checkpoint of ``step``, then mark it complete.

    Example:
        >>> import tempfile
        >>> root = tempfile.mkdtemp()
        >>> save_torch({"epoch": 3}, root, 3).name                  # doctest: +SKIP
        'epoch-0003'
        >>> load_latest_torch(root)                                 # doctest: +SKIP
        {'epoch': 3}
    """
    _check_name("filename", filename, "state.pt")
    folder = new_checkpoint_dir(checkpoint_path, step)
    _torch().save(state, folder / filename)
    mark_complete(folder)
    return folder


def load_latest_torch(
    checkpoint_path: str | Path,
    *,
    filename: str = "state.pt",
    map_location: Any = "cpu",
    weights_only: bool = True,
) -> Any | None:
    """``torch.load`` the newest complete checkpoint under ``checkpoint_path``; None if none."""
    folder = latest_local(checkpoint_path)
    if folder is None:
        return None
    return _torch().load(folder / filename, map_location=map_location, weights_only=weights_only)
