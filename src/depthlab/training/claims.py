"""One process trains a run at a time: a lock on the run's folder while its group trains.

Two commands training into one store (two ``depthlab sweep`` started together, a sweep beside a ``reproduce``)
used to train the same run at once, each deleting the other's temporary checkpoint files. Now a group takes an
exclusive ``flock`` on each of its runs' folders (``<store>/artifacts/<run id>``, in id order, so two groups that
share runs cannot wait on each other) before it reads their status, and holds them until it ends; a run another
process holds is waited for, and then found finished (skipped) or resumed from its checkpoint. The kernel
releases the locks of a process that dies, so a killed sweep never leaves a run locked. On a filesystem without
``flock`` (some network filesystems) and on Windows the locks are not taken.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from ..config import RunConfig
from ..store import Store, ensure_folder

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]


@contextlib.contextmanager
def hold_runs(store: Store, configs: list[RunConfig]) -> Iterator[None]:
    """Hold the runs of ``configs`` for this process while the block runs (waiting for any another one holds).

    ``store`` is a :class:`Store` or a Ray task's ``RemoteStore``: only ``run_id`` and ``run_folder`` are used."""
    held: list[int] = []
    try:
        for run_id in sorted({store.run_id(c.to_dict()) for c in configs}):
            if fcntl is None:
                break
            folder = store.run_folder(run_id)
            ensure_folder(folder)
            fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
            held.append(fd)
            with contextlib.suppress(OSError):  # no flock on this filesystem: train as before
                fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        for fd in held:
            os.close(fd)  # closing the last descriptor releases the lock
