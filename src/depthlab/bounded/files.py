"""Files opened for reading only when they are regular files, and read only up to a limit.

The kind of a file is read from the open descriptor (``fstat``), so a symlink to ``/dev/zero`` or a FIFO is
refused before a byte is read, and a file swapped for another between a check and the read cannot slip
through. FIFOs are opened non-blocking: opening one with no writer would otherwise wait forever.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from depthlab.errors import UserError

MAX_TEXT_BYTES = 1 << 20
MAX_JSON_BYTES = 16 << 20

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


class BoundError(UserError, ValueError):
    """An input refused before it was read or parsed. ``detail`` is the message without the input's name."""

    def __init__(self, what: str, detail: str) -> None:
        super().__init__(f"{what}: {detail}")
        self.detail = detail


class Unreadable(BoundError):
    """A file refused for what it is, not for what it holds: missing, not readable, not a regular file, too big."""


def size_text(n: int) -> str:
    """``n`` bytes for a message: 1,048,576 bytes (1.0 MiB)."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n:,} bytes ({n / size:.1f} {unit})"
    return f"{n:,} bytes"


def kind_of(mode: int) -> str | None:
    """What a file of ``st_mode`` is, in words, when it is not a regular file (None for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


@contextlib.contextmanager
def open_regular(path: str | Path, what: str, limit: int | None = None) -> Iterator[tuple[int, int]]:
    """``(descriptor, size)`` of ``path`` opened for reading, when it is a regular file of at most ``limit`` bytes.

    ``what`` names the input in messages (``config``, ``--plugin``, ``checkpoint in FOLDER``)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise Unreadable(what, f"cannot read {path}: {e.strerror or e}") from None
    try:
        info = os.fstat(fd)
        kind = kind_of(info.st_mode)
        if kind is not None:
            target = f" (a link to {os.path.realpath(path)})" if path.is_symlink() else ""
            raise Unreadable(what, f"{path}{target} is {kind}, not a regular file")
        if limit is not None and info.st_size > limit:
            raise Unreadable(what, f"{path} has {size_text(info.st_size)}, more than the {size_text(limit)} "
                                   f"allowed")
        yield fd, info.st_size
    finally:
        os.close(fd)


def read_exactly(fd: int, n: int, path: str | Path, what: str) -> bytes:
    """``n`` bytes from ``fd`` (fewer only when the file ends first: it was cut while being read)."""
    chunks, left = [], n
    while left > 0:
        try:
            chunk = os.read(fd, min(left, 1 << 24))
        except OSError as e:
            raise Unreadable(what, f"cannot read {path}: {e.strerror or e}") from None
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_file(path: str | Path, limit: int, what: str) -> bytes:
    """The bytes of the regular file ``path``, refused (:class:`BoundError`) past ``limit`` bytes."""
    with open_regular(path, what, limit) as (fd, size):
        data = read_exactly(fd, size + 1, path, what)  # one byte more: a file that grew since fstat
    if len(data) > limit:
        raise Unreadable(what, f"{path} grew past the {size_text(limit)} allowed while being read")
    return data
