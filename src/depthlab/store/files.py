"""Atomic file writes: a reader sees the old file or the complete new one, never a partial file.

Each write goes to a temporary file in the target's folder, is fsynced, replaces the target with
``os.replace`` and fsyncs the folder, so the new file also survives a power loss once the call returns.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

from depthlab.store.jsonable import to_json


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# Read once at import: os.umask can only be read by setting it, which is not thread-safe.
_UMASK = _current_umask()


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: temp file in the same folder, fsync, ``os.replace``, fsync dir.

    Readers see either the old file or the complete new one, never a partial file; on failure the temp
    file is removed and the old file is left as it was.
    """
    path = Path(path)
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = 0o666 & ~_UMASK
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(OSError):
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(folder)


def atomic_write_json(path: str | Path, obj: Any, indent: int | None = 2) -> None:
    """Write ``obj`` as strict JSON (NaN/inf → null) to ``path`` atomically (:func:`atomic_write_bytes`)."""
    text = to_json(obj, indent=indent)
    atomic_write_bytes(path, (text + "\n").encode("utf-8"))
