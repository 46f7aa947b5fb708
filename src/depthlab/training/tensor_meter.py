"""The peak of tensor memory a computation holds, measured by accounting tensor storages (on any device).

Every tensor an operation returns is counted from the moment it is made until its storage is freed (a finalizer on
the storage: views, autograd's saved tensors and caches keep it alive, as they keep the memory). What the
computation was given counts nothing; what it allocates and frees again counts while it lives. This is what
``training.footprint`` estimates before a group is built, and what the tests and ``benchmarks/scan_memory.py``
compare the estimate with, on the CPU, where no allocator reports a peak.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class TensorMeter(TorchDispatchMode):
    """Within ``with TensorMeter() as meter:``, ``meter.live`` and ``meter.peak``: bytes of the storages the
    operations made that are still alive, now and at most."""

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0
        self._seen: set[int] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        given = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in given:  # not a view, in place
                self._count(t.untyped_storage())
        return out

    def _count(self, storage: torch.UntypedStorage) -> None:
        key = storage.data_ptr()
        if key in self._seen or storage.nbytes() == 0:
            return
        self._seen.add(key)
        self.live += storage.nbytes()
        self.peak = max(self.peak, self.live)
        weakref.finalize(storage, self._free, key, storage.nbytes())

    def _free(self, key: int, size: int) -> None:
        self._seen.discard(key)
        self.live -= size


def peak_bytes(fn: Callable[[], Any]) -> int:
    """The most bytes of tensors ``fn()`` held at once (see the module docstring)."""
    with TensorMeter() as meter:
        fn()
    return meter.peak
