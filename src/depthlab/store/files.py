"""Atomic file writes: a reader sees the old file or the complete new one, never a partial file.

Each write goes to a temporary file in the target's folder, is fsynced, replaces the target with
``os.replace`` and fsyncs the folder, so the new file also survives a power loss once the call returns.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from depthlab.bounded import kind_of
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


def ensure_folder(folder: str | Path) -> None:
    """``mkdir -p folder``, where what stands in the way (a file, a device, a symlink to nothing) is an OSError
    naming it and saying what it is (``mkdir`` alone says "File exists")."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        chain = [*reversed(folder.parents), folder]
        blocker = next((p for p in chain if (p.exists() or p.is_symlink()) and not p.is_dir()), folder)
        if blocker.is_symlink() and not blocker.exists():
            what = f"is a symlink to {os.readlink(blocker)}, which does not exist"
        else:
            what = f"is {kind_of(blocker.stat().st_mode) or 'a file'}" if blocker.exists() else "cannot be created"
        raise NotADirectoryError(errno.ENOTDIR, f"{what}; a folder is needed here", str(blocker)) from None


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: temp file in the same folder, fsync, ``os.replace``, fsync dir.

    Readers see either the old file or the complete new one, never a partial file; on failure the temp
    file is removed and the old file is left as it was, and the OSError names ``path`` (a full disk says which
    file it could not write). A ``path`` that is not a regular file (a device, a FIFO) is refused, not replaced.
    """
    with atomic_writer(path) as f:
        f.write(data)


@contextlib.contextmanager
def atomic_writer(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file to write ``path`` by parts (a table a page at a time), replacing ``path`` atomically when the
    block ends without an error, as :func:`atomic_write_bytes` does; an error leaves ``path`` as it was."""
    path = Path(path)
    folder = path.parent
    ensure_folder(folder)
    try:
        info = path.stat()
        mode = info.st_mode & 0o777
    except FileNotFoundError:
        info, mode = None, 0o666 & ~_UMASK
    if info is not None and kind_of(info.st_mode) is not None:
        raise IsADirectoryError(errno.EISDIR, f"is {kind_of(info.st_mode)}; give the path of a file", str(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(OSError):
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if e.filename is None and e.errno is not None:  # a write or fsync that failed (a full disk): name the file
            raise type(e)(e.errno, e.strerror, str(path)) from None
        raise
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(folder)


def atomic_write_json(path: str | Path, obj: Any, indent: int | None = 2) -> None:
    """Write ``obj`` as strict JSON (NaN/inf → null) to ``path`` atomically (:func:`atomic_write_bytes`)."""
    text = to_json(obj, indent=indent)
    atomic_write_bytes(path, (text + "\n").encode("utf-8"))
